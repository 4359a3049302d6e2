"""Module paths that moved keep working for a while, with a warning that names the new one."""
import importlib
import sys

import pytest


def test_the_old_torch_front_end_path_warns_and_gives_the_same_functions():
    sys.modules.pop("stax.torch_frontend", None)
    with pytest.warns(DeprecationWarning, match="stax.torch.capture"):
        old = importlib.import_module("stax.torch_frontend")
    from stax.torch import capture
    assert old.import_module is capture.import_module and old.import_training_step is capture.import_training_step
