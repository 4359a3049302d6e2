"""Deprecated path of the PyTorch front end's capture, kept for code written before the move to
``stax.torch.capture`` (issue 52); importing it warns once."""
import warnings

from stax.torch.capture import TorchProgram, import_function, import_module, import_training_step, require_torch

__all__ = ["TorchProgram", "import_function", "import_module", "import_training_step", "require_torch"]

warnings.warn("stax.torch_frontend moved to stax.torch.capture; import it from there", DeprecationWarning,
              stacklevel=2)
