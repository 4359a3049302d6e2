"""The real-model zoo (needs ``pip install -e '.[models]'``): model definitions of torchvision, timm
and Hugging Face transformers, built with random weights and small inputs (nothing is downloaded),
for ``python -m experiments.models.compare_inductor --real-zoo`` and the shipped training graphs
(``python -m experiments.models.export --real-zoo``, ``real/*``).

Each builder takes ``small`` (the tests' tiny configs) and returns a :class:`RealModel`, a
:class:`~experiments.models.zoo.ZooModel` whose forward pass runs in eval mode and whose training
step in train mode. Dropout and stochastic depth are 0 (set so where a library's default is not),
so that a float64 run of the model (:func:`float64_outputs`) is the reference of every compiler. The language models return their logits only (``use_cache=False``); their loss is
next-token cross-entropy, a classifier's is cross-entropy with class indices.

torchvision's wheel on PyPI is built for CUDA: its C++ operators (``nms``, ``roi_align``) do not
load with the CPU build of torch, and ``import torchvision`` (which transformers and timm import
too) then fails where it registers a fake kernel for ``nms``. :func:`load_torchvision` declares
the schemas of the two operators it registers so, without kernels, so that the model definitions
(pure Python) import; calling those two operators still fails, as it would without the shim.
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ClassVar

import numpy as np

from experiments.models.zoo import ZooModel
from stax.errors import StaxError
from stax.torch.capture import TorchProgram, require_torch

#: what ``pip install -e '.[models]'`` installs (pyproject.toml's ``models`` extra)
MODEL_LIBRARIES = ("torchvision", "timm", "transformers")

#: torchvision's operators that ``torchvision._meta_registrations`` registers fake kernels for
#: without checking that its C++ extension loaded
_UNGUARDED_OPERATORS = ("nms", "qnms")


#: the libraries that declare those operators: a Library's definitions last as long as the object
_LIBRARIES: list[Any] = []


def load_torchvision() -> ModuleType:
    """``torchvision``, with its unloadable operators declared first where its C++ extension does
    not load on this torch (see the module docstring)."""
    torch = require_torch()
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if not _extension_loads(torch):
        library = torch.library.Library("torchvision", "FRAGMENT")
        for name in _UNGUARDED_OPERATORS:
            if not _declared(torch, name):
                library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARIES.append(library)
    return importlib.import_module("torchvision")


def _extension_loads(torch: Any) -> bool:
    """Whether torchvision's C++ extension loads (it registers ``torchvision::nms``)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise StaxError(f"the real zoo needs {', '.join(MODEL_LIBRARIES)}: pip install -e '.[models]'")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("_C*.so"))
    try:
        if found:
            torch.ops.load_library(str(found[0]))
    except OSError:
        return False
    return _declared(torch, "nms")


def _declared(torch: Any, name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True


def require_models() -> tuple[ModuleType, ModuleType, ModuleType]:
    """torchvision, timm and transformers, or a StaxError that says how to install them."""
    try:
        torchvision = load_torchvision()
        return torchvision, importlib.import_module("timm"), importlib.import_module("transformers")
    except ImportError as error:
        raise StaxError(f"the real zoo needs {', '.join(MODEL_LIBRARIES)}: pip install -e '.[models]' "
                        f"[{error}]") from error


@dataclass
class RealModel(ZooModel):
    """A library's model: forward pass in eval mode, training step in train mode."""

    library: str = ""
    prefix: ClassVar[str] = "real"

    def forward(self) -> TorchProgram:
        self.module.eval()
        return super().forward()

    def training(self) -> TorchProgram:
        self.module.train()
        return super().training()

    def eager_forward(self) -> Callable[[], Any]:
        self.module.eval()
        return super().eager_forward()

    def eager_training(self) -> Callable[[], Any]:
        self.module.train()
        return super().eager_training()


def _seeded() -> Any:
    torch = require_torch()
    torch.manual_seed(0)
    return torch


def _without_zero_matrices(torch: Any, module: Any) -> Any:
    """``module`` with every weight matrix that its library initializes to zeros (torchvision's ViT
    head) drawn from N(0, 0.02) instead, so that its outputs depend on its inputs."""
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.ndim >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    return module


def _classifier(name: str, library: str, module: Any, image: tuple[int, ...], classes: int, text: str) -> RealModel:
    torch = require_torch()
    module = _without_zero_matrices(torch, module)
    inputs = [torch.randn(*image)]
    targets = [torch.randint(0, classes, (image[0],))]
    return RealModel(name, module, inputs, targets, torch.nn.functional.cross_entropy,
                     f"{text}, random weights, {classes} classes, cross_entropy, on {image}", library)


CLASSES = 10


def _image(small: bool) -> tuple[int, int, int, int]:
    return (2, 3, 32, 32) if small else (4, 3, 64, 64)


def tv_resnet18(small: bool) -> RealModel:
    _seeded()
    models = require_models()[0].models
    return _classifier("tv_resnet18", "torchvision", models.resnet18(num_classes=CLASSES), _image(small), CLASSES,
                       "torchvision resnet18")


def tv_mobilenet_v3_small(small: bool) -> RealModel:
    _seeded()
    models = require_models()[0].models
    return _classifier("tv_mobilenet_v3_small", "torchvision", models.mobilenet_v3_small(num_classes=CLASSES),
                       _image(small), CLASSES, "torchvision mobilenet_v3_small")


def tv_convnext_tiny(small: bool) -> RealModel:
    """ConvNeXt-tiny; the small config keeps one block per stage (``block_setting``)."""
    _seeded()
    models = require_models()[0].models
    if small:
        block = models.convnext.CNBlockConfig
        stages = [block(16, 32, 1), block(32, 64, 1), block(64, 128, 1), block(128, None, 1)]
        return _classifier("tv_convnext_tiny", "torchvision", models.ConvNeXt(stages, num_classes=CLASSES),
                           _image(small), CLASSES, "torchvision ConvNeXt, widths 16-128, one block per stage")
    return _classifier("tv_convnext_tiny", "torchvision",
                       models.convnext_tiny(num_classes=CLASSES, stochastic_depth_prob=0.0), _image(small), CLASSES,
                       "torchvision convnext_tiny, stochastic depth 0")


def tv_vit(small: bool) -> RealModel:
    """A small torchvision VisionTransformer: patches of 8, 2 (small: 1) layers, width 64."""
    _seeded()
    models = require_models()[0].models
    image = _image(small)
    layers = 1 if small else 2
    module = models.VisionTransformer(image[-1], 8, layers, 4, 64, 128, num_classes=CLASSES)
    return _classifier("tv_vit", "torchvision", module, image, CLASSES,
                       f"torchvision VisionTransformer(patch 8, {layers} layers, 4 heads, width 64, mlp 128)")


def _timm(zoo_name: str, name: str, small: bool, **config: Any) -> RealModel:
    _seeded()
    timm = require_models()[1]
    module = timm.create_model(name, pretrained=False, num_classes=CLASSES, **config)
    settings = "".join(f", {k}={v}" for k, v in config.items())
    return _classifier(zoo_name, "timm", module, _image(small), CLASSES, f"timm {name}{settings}")


def timm_resnet18(small: bool) -> RealModel:
    return _timm("timm_resnet18", "resnet18", small)


def timm_vit_tiny(small: bool) -> RealModel:
    """timm's ViT-tiny at the input's size, patches of 8 (the small config: 2 blocks)."""
    return _timm("timm_vit_tiny", "vit_tiny_patch16_224", small, img_size=_image(small)[-1], patch_size=8,
                 **({"depth": 2} if small else {}))


def timm_convnext_atto(small: bool) -> RealModel:
    """timm's ConvNeXt-atto (the small config: one block per stage)."""
    return _timm("timm_convnext_atto", "convnext_atto", small, **({"depths": (1, 1, 1, 1)} if small else {}))


def _tokens(small: bool, vocab: int) -> Any:
    torch = require_torch()
    return torch.randint(0, vocab, (2, 8) if small else (4, 64))


def _language_model(name: str, library_model: Any, small: bool, vocab: int, text: str) -> RealModel:
    """A causal language model's logits, next-token cross-entropy as its loss."""
    torch = require_torch()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = library_model

        def forward(self, tokens):
            return self.model(input_ids=tokens, use_cache=False).logits

    def next_token_loss(logits: Any, tokens: Any) -> Any:
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 tokens[:, 1:].reshape(-1))
    tokens = _tokens(small, vocab)
    return RealModel(name, Logits(), [tokens], [tokens], next_token_loss,
                     f"{text}, random weights, next-token cross_entropy, on {tuple(tokens.shape)} tokens",
                     "transformers")


def _width(small: bool) -> tuple[int, int, int]:
    """(vocabulary, hidden width, heads) of the 2-layer language models."""
    return (100, 32, 4) if small else (1000, 128, 4)


def hf_gpt2(small: bool) -> RealModel:
    _seeded()
    transformers = require_models()[2]
    vocab, width, heads = _width(small)
    config = transformers.GPT2Config(n_layer=2, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=128,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return _language_model("hf_gpt2", transformers.GPT2LMHeadModel(config), small, vocab,
                           f"transformers GPT2LMHeadModel(2 layers, width {width}, {heads} heads, vocab {vocab})")


def hf_llama(small: bool) -> RealModel:
    _seeded()
    transformers = require_models()[2]
    vocab, width, heads = _width(small)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=width, num_attention_heads=heads,
                                      num_key_value_heads=heads // 2, intermediate_size=2 * width, vocab_size=vocab,
                                      max_position_embeddings=128, bos_token_id=0, eos_token_id=0)
    return _language_model("hf_llama", transformers.LlamaForCausalLM(config), small, vocab,
                           f"transformers LlamaForCausalLM(2 layers, width {width}, {heads} heads, "
                           f"{heads // 2} KV heads, vocab {vocab})")


def hf_bert(small: bool) -> RealModel:
    """BERT for sequence classification (2 layers), its pooled logits' cross-entropy."""
    torch = _seeded()
    transformers = require_models()[2]
    vocab, width, heads = _width(small)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=width, num_attention_heads=heads,
                                     intermediate_size=2 * width, vocab_size=vocab, max_position_embeddings=128,
                                     num_labels=CLASSES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForSequenceClassification(config)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, tokens):
            return self.model(input_ids=tokens).logits
    tokens = _tokens(small, vocab)
    return RealModel("hf_bert", Logits(), [tokens], [torch.randint(0, CLASSES, (tokens.shape[0],))],
                     torch.nn.functional.cross_entropy,
                     f"transformers BertForSequenceClassification(2 layers, width {width}, {heads} heads, vocab "
                     f"{vocab}), random weights, cross_entropy, on {tuple(tokens.shape)} tokens", "transformers")


def float64_outputs(model: RealModel, mode: str) -> list[np.ndarray]:
    """The outputs of ``model``'s forward pass or training step (``mode``: ``"forward"`` or
    ``"training"``; the step's loss and every parameter's gradient) computed by eager torch in
    float64 on a float64 copy of the module and of its floating-point inputs."""
    torch = require_torch()
    module = copy.deepcopy(model.module).double()
    widened = [t.double() if t.is_floating_point() else t for t in (*model.inputs, *model.targets)]
    inputs, targets = widened[:len(model.inputs)], widened[len(model.inputs):]
    if mode == "forward":
        module.eval()
        with torch.no_grad():
            results = module(*inputs)
    else:
        module.train()
        loss = model.loss(module(*inputs), *targets)
        results = (loss, *torch.autograd.grad(loss, list(module.parameters())))
    return [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(results)]


def relative_error(got: Any, reference: list[np.ndarray]) -> float:
    """The largest error of ``got`` (the outputs, in order) against ``reference``, each output's
    largest absolute difference over its largest absolute reference value (at least 1e-6)."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    return max(float(np.abs(np.asarray(g, np.float64) - r).max(initial=0)) / max(float(np.abs(r).max(initial=0)), 1e-6)
               for g, r in zip(got, reference, strict=True))


REAL_ZOO: dict[str, Callable[[bool], RealModel]] = {
    "tv_resnet18": tv_resnet18, "tv_mobilenet_v3_small": tv_mobilenet_v3_small, "tv_convnext_tiny": tv_convnext_tiny,
    "tv_vit": tv_vit, "timm_resnet18": timm_resnet18, "timm_vit_tiny": timm_vit_tiny,
    "timm_convnext_atto": timm_convnext_atto, "hf_bert": hf_bert, "hf_gpt2": hf_gpt2, "hf_llama": hf_llama,
}

#: the real zoo's training steps as the shipped instances ``data/torch/real/MODEL_train``
REAL_TRAINING: dict[str, Callable[[bool], TorchProgram]] = {
    f"real/{name}_train": (lambda small, build=build: build(small).training()) for name, build in REAL_ZOO.items()}
