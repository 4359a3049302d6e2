"""Real PyTorch models as stax programs (needs torch): the suite that the instance export, the
comparison with TorchInductor and the torch front-end tests share.

Every builder takes ``small``: tiny shapes for tests, or the shapes of the shipped instances
(the transformer layer: d_model=256, nhead=4, dim_feedforward=1024 on (8, 128, 256)).
Dropout is 0 so that the graphs are deterministic.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from stax.torch.capture import TorchProgram, import_function, import_module, import_training_step, require_torch


def _seeded() -> object:
    torch = require_torch()
    torch.manual_seed(0)
    return torch


def _transformer(small: bool) -> tuple[object, object, str]:
    torch = _seeded()
    d, heads, ff, shape = (32, 4, 64, (2, 16, 32)) if small else (256, 4, 1024, (8, 128, 256))
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=ff, batch_first=True, dropout=0.0)
    text = (f"torch.nn.TransformerEncoderLayer(d_model={d}, nhead={heads}, dim_feedforward={ff}, "
            "batch_first=True, dropout=0.0)")
    return layer, torch.randn(*shape), text


def transformer_forward(small: bool = False) -> TorchProgram:
    layer, x, text = _transformer(small)
    return import_module(layer, x, name="transformer_forward", provenance={"model": text})


def transformer_train(small: bool = False) -> TorchProgram:
    """Loss ``mse_loss(layer(x), target)`` and the gradients of the 16 parameters."""
    torch = require_torch()
    layer, x, text = _transformer(small)
    return import_training_step(layer, torch.nn.functional.mse_loss, [x], [torch.randn_like(x)],
                                name="transformer_train", provenance={"model": text + ", mse_loss"})


def _mlp_block(small: bool) -> tuple[object, object, str]:
    """Pre-norm residual MLP block, as in a transformer: x + W2 gelu(W1 layernorm(x))."""
    torch = _seeded()
    d, hidden, rows = (32, 128, 16) if small else (512, 2048, 256)

    class MLPBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.up = torch.nn.Linear(d, hidden)
            self.down = torch.nn.Linear(hidden, d)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
    text = f"MLPBlock: x + Linear({hidden}, {d})(gelu(Linear({d}, {hidden})(LayerNorm({d})(x))))"
    return MLPBlock(), torch.randn(rows, d), text


def mlp_forward(small: bool = False) -> TorchProgram:
    block, x, text = _mlp_block(small)
    return import_module(block, x, name="mlp_forward", provenance={"model": text})


def mlp_train(small: bool = False) -> TorchProgram:
    torch = require_torch()
    block, x, text = _mlp_block(small)
    return import_training_step(block, torch.nn.functional.mse_loss, [x], [torch.randn_like(x)],
                                name="mlp_train", provenance={"model": text + ", mse_loss"})


def _soft_cross_entropy(logits, target):
    """Cross-entropy against soft targets (class probabilities), mean over the batch."""
    return -(target * logits.log_softmax(-1)).sum(-1).mean()


def _norm_net(small: bool):
    """A classifier with normalizations and several activations, trained with soft-target
    cross-entropy: Linear-LayerNorm-SiLU, Linear-LayerNorm-Tanh, Linear-Sigmoid gate, Linear head."""
    torch = _seeded()
    nn = torch.nn
    d_in, width, classes, rows = (16, 32, 8, 8) if small else (256, 512, 64, 128)

    class NormNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block1 = nn.Sequential(nn.Linear(d_in, width), nn.LayerNorm(width), nn.SiLU())
            self.block2 = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.Tanh())
            self.gate = nn.Linear(width, width)
            self.head = nn.Linear(width, classes)

        def forward(self, x):
            h = self.block1(x)
            h = self.block2(h) * torch.sigmoid(self.gate(h)) + h
            return self.head(nn.functional.leaky_relu(h, 0.1))

    target = torch.softmax(torch.randn(rows, classes), -1)
    text = (f"NormNet(Linear({d_in},{width})-LayerNorm-SiLU, Linear({width},{width})-LayerNorm-Tanh "
            f"* sigmoid gate + residual, leaky_relu, Linear({width},{classes})), soft-target cross-entropy")
    return NormNet(), torch.randn(rows, d_in), target, _soft_cross_entropy, text


def norm_net_train(small: bool = False) -> TorchProgram:
    net, x, target, loss, text = _norm_net(small)
    return import_training_step(net, loss, [x], [target], name="norm_net_train", provenance={"model": text})


def _conv_net(small: bool):
    """A small convolutional classifier: two Conv2d-BatchNorm2d-ReLU blocks (the second with stride
    2), global average pooling and a Linear head, trained with soft-target cross-entropy.  The
    batch norms use batch statistics without running ones (``track_running_stats=False``), as
    when these instances were first shipped; the zoo's CNNs (:mod:`experiments.models.zoo`) update
    running statistics."""
    torch = _seeded()
    nn = torch.nn
    shape, widths, classes = ((2, 3, 8, 8), (4, 8), 5) if small else ((8, 3, 32, 32), (16, 32), 10)

    class ConvNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(shape[1], widths[0], 3, padding=1), nn.BatchNorm2d(widths[0], track_running_stats=False),
                nn.ReLU(),
                nn.Conv2d(widths[0], widths[1], 3, stride=2, padding=1),
                nn.BatchNorm2d(widths[1], track_running_stats=False), nn.ReLU())
            self.head = nn.Linear(widths[1], classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))
    text = (f"ConvNet(Conv2d({shape[1]},{widths[0]},3,padding=1)-BatchNorm2d-ReLU, Conv2d({widths[0]},{widths[1]},3,"
            f"stride=2,padding=1)-BatchNorm2d-ReLU, global average pool, Linear({widths[1]},{classes})), batch "
            "statistics (track_running_stats=False), soft-target cross-entropy")
    return ConvNet(), torch.randn(*shape), torch.softmax(torch.randn(shape[0], classes), -1), _soft_cross_entropy, text


def conv_net_train(small: bool = False) -> TorchProgram:
    net, x, target, loss, text = _conv_net(small)
    return import_training_step(net, loss, [x], [target], name="conv_net_train", provenance={"model": text})


def adam_step(params: Sequence, grads: Sequence, exp_avgs: Sequence, exp_avg_sqs: Sequence, *, step: int = 1,
              lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> tuple:
    """The ``step``-th update of ``torch.optim.Adam`` (amsgrad=False, no weight decay), out of
    place: returns the new parameters, first and second moments."""
    beta1, beta2 = betas
    scale = lr / (1 - beta1 ** step)
    root_correction = math.sqrt(1 - beta2 ** step)
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m = m + (g - m) * (1 - beta1)
        v = v * beta2 + g * g * (1 - beta2)
        new_p.append(p - scale * m / (v.sqrt() / root_correction + eps))
        new_m.append(m)
        new_v.append(v)
    return (*new_p, *new_m, *new_v)


def adam(small: bool = False) -> TorchProgram:
    """Adam over every parameter of a stack of pre-norm MLP blocks (many small and large tensors)."""
    torch = _seeded()
    depth = 2 if small else 3
    blocks = [_mlp_block(small)[0] for _ in range(depth)]
    shapes = [p.shape for b in blocks for p in b.parameters()]
    params, grads = [torch.randn(s) for s in shapes], [torch.randn(s) for s in shapes]
    moments, squares = [torch.randn(s) * 0.1 for s in shapes], [torch.rand(s) * 0.01 for s in shapes]
    n = len(shapes)

    def step(*flat):
        return adam_step(flat[:n], flat[n:2 * n], flat[2 * n:3 * n], flat[3 * n:], step=10)
    names = [f"{kind}{i}" for kind in ("param", "grad", "exp_avg", "exp_avg_sq") for i in range(n)]
    return import_function(step, *params, *grads, *moments, *squares, name="adam", input_names=names,
                           provenance={"model": f"torch.optim.Adam step 10 (lr=1e-3) over the {n} parameters of "
                                                f"{depth} MLP blocks", "kind": "optimizer step"})


MODELS: dict[str, Callable[[bool], TorchProgram]] = {
    "transformer_forward": transformer_forward,
    "transformer_train": transformer_train,
    "mlp_forward": mlp_forward,
    "mlp_train": mlp_train,
    "norm_net_train": norm_net_train,
    "conv_net_train": conv_net_train,
    "adam": adam,
}
