"""Whole models as stax programs (needs torch): GPT-2-, BERT-, ResNet-18- and MLP-Mixer-like
networks, forward or training step, random initialization from a seed (nothing downloaded).

Each builder takes ``layers`` (the depth, the size parameter of the family) and ``seed``;
``default_layers`` gives the depth of the named architecture (GPT-2 small: 12 layers, d = 768,
sequence 128).  ``python -m instances.export_models`` writes their problems to
``instances/data/models/`` as gzip-compressed JSON.  The ResNet uses eval-mode batch norm
(running statistics), so its training step differentiates through a fixed affine map: the front
end does not yet take train-mode batch norm's in-place statistics update.
"""
from __future__ import annotations

from typing import Any, Callable

from stax.torch.capture import TorchProgram, import_module, import_training_step, require_torch


def _torch(seed: int) -> Any:
    torch = require_torch()
    torch.manual_seed(seed)
    return torch


def transformer_block(torch: Any, d: int, heads: int, causal: bool, pre_norm: bool, approximate: str = "none") -> Any:
    """A transformer block: fused-qkv self-attention (``heads`` heads, causal or not) and a GELU
    MLP (``approximate`` as torch's ``gelu``: "none" or "tanh"), each with a residual and a
    LayerNorm before (``pre_norm``, GPT-2) or after (BERT)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def attention(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).reshape(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(-1, -2)) * (d // heads) ** -0.5
            if causal:
                mask = torch.ones(t, t).triu(1) * -1e9
                scores = scores + mask
            out = scores.softmax(-1) @ v
            return self.proj(out.transpose(1, 2).reshape(b, t, d))

        def mlp(self, x):
            return self.down(nn.functional.gelu(self.up(x), approximate=approximate))

        def forward(self, x):
            if pre_norm:
                x = x + self.attention(self.ln1(x))
                return x + self.mlp(self.ln2(x))
            x = self.ln1(x + self.attention(x))
            return self.ln2(x + self.mlp(x))
    return Block()


def _stack(torch: Any, blocks: list[Any], head: Any = None) -> Any:
    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.Sequential(*blocks)
            self.head = head if head is not None else torch.nn.Identity()

        def forward(self, x):
            return self.head(self.blocks(x))
    return Stack()


def gpt2(layers: int, seed: int) -> tuple[Any, tuple[Any, ...], str]:
    """GPT-2-small-like decoder: pre-norm causal blocks, d = 768, 12 heads, sequence 128, batch 1
    (embeddings are inputs: the model starts at the residual stream), final LayerNorm."""
    torch = _torch(seed)
    d = 768
    model = _stack(torch, [transformer_block(torch, d, 12, True, True) for _ in range(layers)], torch.nn.LayerNorm(d))
    return model, (torch.randn(1, 128, d),), f"GPT-2-like decoder, {layers} layers, d=768, 12 heads, seq 128"


def bert(layers: int, seed: int) -> tuple[Any, tuple[Any, ...], str]:
    """BERT-base-like encoder: post-norm bidirectional blocks, d = 768, 12 heads, sequence 128, batch 1."""
    torch = _torch(seed)
    d = 768
    model = _stack(torch, [transformer_block(torch, d, 12, False, False) for _ in range(layers)])
    return model, (torch.randn(1, 128, d),), f"BERT-base-like encoder, {layers} layers, d=768, 12 heads, seq 128"


def resnet(layers: int, seed: int) -> tuple[Any, tuple[Any, ...], str]:
    """ResNet-18-like: a 3x3 stem, ``layers`` basic blocks (two 3x3 conv + eval-mode batch norm +
    ReLU, a strided 1x1 shortcut where the width doubles every two blocks), global pool, Linear;
    input (2, 3, 32, 32).  ``layers = 8`` is ResNet-18's block count."""
    torch = _torch(seed)
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.short = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
                          if stride != 1 or c_in != c_out else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.short(x))

    blocks, c = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for i in range(layers):
        wider = i > 0 and i % 2 == 0
        blocks.append(Basic(c, 2 * c if wider else c, 2 if wider else 1))
        c = 2 * c if wider else c

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(c, 10)

        def forward(self, x):
            return self.fc(x.mean((2, 3)))
    model = _stack(torch, blocks, Head()).eval()
    return model, (torch.randn(2, 3, 32, 32),), f"ResNet-like, {layers} basic blocks, eval-mode batch norm, (2, 3, 32, 32)"


def mixer(layers: int, seed: int) -> tuple[Any, tuple[Any, ...], str]:
    """MLP-Mixer-like: ``layers`` blocks of token mixing (an MLP across 64 patches) and channel
    mixing (an MLP across 256 channels), pre-norm with residuals, on patches (4, 64, 256)."""
    torch = _torch(seed)
    nn = torch.nn
    tokens, d = 64, 256

    class MixerBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
            self.chan = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.chan(self.ln2(x))
    model = _stack(torch, [MixerBlock() for _ in range(layers)], nn.LayerNorm(d))
    return model, (torch.randn(4, tokens, d),), f"MLP-Mixer-like, {layers} blocks, 64 patches x 256 channels, batch 4"


BUILDERS: dict[str, Callable[[int, int], tuple[Any, tuple[Any, ...], str]]] = {
    "gpt2": gpt2, "bert": bert, "resnet": resnet, "mixer": mixer}
default_layers = {"gpt2": 12, "bert": 12, "resnet": 8, "mixer": 8}


def whole_model(model: str, train: bool, layers: int | None = None, seed: int = 0) -> TorchProgram:
    """``model``'s forward pass, or its training step (MSE loss against a random target, the
    gradients of every parameter), imported through the torch front end."""
    layers = default_layers[model] if layers is None else layers
    module, inputs, text = BUILDERS[model](layers, seed)
    name = f"{model}{layers}_{'train' if train else 'forward'}"
    if not train:
        return import_module(module, *inputs, name=name, provenance={"model": text, "seed": seed})
    torch = require_torch()
    target = torch.randn_like(module(*inputs))
    return import_training_step(module, torch.nn.functional.mse_loss, list(inputs), [target], name=name,
                                provenance={"model": text + ", mse_loss", "seed": seed})
