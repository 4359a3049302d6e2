"""The model zoo (needs torch): modules a practitioner tries first, each with its inputs, its loss
and eager closures of its forward pass and training step, for ``python -m
experiments.models.compare_inductor --zoo`` and the shipped training graphs
(``python -m experiments.models.export``, ``zoo_*``).

Every builder takes ``small`` (tiny shapes for tests) and returns a :class:`ZooModel`; dropout
is 0 except in ``transformer_encoder``, which keeps torch's default 0.1 (its masks are drawn
from the program's seed, and the expected outputs are torch's under the same masks).  Batch
norms are in training mode with running statistics, the default of a CNN being trained.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from instances.whole_models import transformer_block
from stax.torch.capture import TorchProgram, import_module, import_training_step, require_torch


@dataclass
class ZooModel:
    name: str
    module: Any
    inputs: Sequence[Any]
    targets: Sequence[Any]
    loss: Callable[..., Any]
    text: str
    #: the programs' names start with it
    prefix: ClassVar[str] = "zoo"

    def forward(self) -> TorchProgram:
        return import_module(self.module, *self.inputs, name=f"{self.prefix}_{self.name}_forward",
                             provenance={"model": self.text})

    def training(self) -> TorchProgram:
        return import_training_step(self.module, self.loss, self.inputs, self.targets,
                                    name=f"{self.prefix}_{self.name}_train", provenance={"model": self.text})

    def eager_forward(self) -> Callable[[], Any]:
        torch = require_torch()

        def run() -> Any:
            with torch.no_grad():
                return self.module(*self.inputs)
        return run

    def eager_training(self) -> Callable[[], Any]:
        torch = require_torch()
        params = list(self.module.parameters())

        def run() -> Any:
            loss = self.loss(self.module(*self.inputs), *self.targets)
            return loss, torch.autograd.grad(loss, params)
        return run


def _torch() -> Any:
    torch = require_torch()
    torch.manual_seed(0)
    return torch


def _mse(output: Any, target: Any) -> Any:
    return require_torch().nn.functional.mse_loss(output, target)


def gpt2_block(small: bool) -> ZooModel:
    """Pre-LN GPT-2 block: causal self-attention (fused qkv, 4 heads) and a tanh-GELU MLP."""
    torch = _torch()
    (b, t, d), heads = ((2, 16, 32), 4) if small else ((4, 128, 256), 4)
    block = transformer_block(torch, d, heads, causal=True, pre_norm=True, approximate="tanh")
    x = torch.randn(b, t, d)
    return ZooModel("gpt2_block", block, [x], [torch.randn_like(x)], _mse,
                    f"hand-written GPT-2 block, d={d}, {heads} heads, causal, tanh GELU, on {(b, t, d)}")


def transformer_decoder(small: bool) -> ZooModel:
    torch = _torch()
    d, heads, ff, (b, t, s) = (32, 4, 64, (2, 8, 12)) if small else (256, 4, 1024, (4, 64, 96))
    layer = torch.nn.TransformerDecoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
    tgt, memory = torch.randn(b, t, d), torch.randn(b, s, d)
    return ZooModel("transformer_decoder", layer, [tgt, memory], [torch.randn_like(tgt)], _mse,
                    f"nn.TransformerDecoderLayer({d}, {heads}, {ff}), tgt {(b, t, d)}, memory {(b, s, d)}")


def transformer_encoder(small: bool) -> ZooModel:
    """nn.TransformerEncoderLayer as constructed by default: dropout 0.1 after attention's
    weights, the feed-forward's activation and both residual branches."""
    torch = _torch()
    d, heads, ff, (b, t) = (32, 4, 64, (2, 8)) if small else (256, 4, 1024, (4, 64))
    layer = torch.nn.TransformerEncoderLayer(d, heads, ff, batch_first=True)
    x = torch.randn(b, t, d)
    return ZooModel("transformer_encoder", layer, [x], [torch.randn_like(x)], _mse,
                    f"nn.TransformerEncoderLayer({d}, {heads}, {ff}) with dropout 0.1, on {(b, t, d)}")


def mlp_mixer(small: bool) -> ZooModel:
    """MLP-Mixer block: token mixing (an MLP across patches) and channel mixing, pre-LN, residual."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    b, patches, channels, token_hidden, channel_hidden = (2, 16, 32, 16, 64) if small else (8, 64, 256, 128, 1024)

    class Mixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
            self.t1, self.t2 = nn.Linear(patches, token_hidden), nn.Linear(token_hidden, patches)
            self.c1, self.c2 = nn.Linear(channels, channel_hidden), nn.Linear(channel_hidden, channels)

        def forward(self, x):
            x = x + self.t2(F.gelu(self.t1(self.ln1(x).transpose(1, 2)))).transpose(1, 2)
            return x + self.c2(F.gelu(self.c1(self.ln2(x))))
    x = torch.randn(b, patches, channels)
    return ZooModel("mlp_mixer", Mixer(), [x], [torch.randn_like(x)], _mse,
                    f"MLP-Mixer block, {patches} patches x {channels} channels, hidden {token_hidden}/{channel_hidden}")


def _swiglu(torch: Any, d: int, hidden: int, norm: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = norm
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)

        def forward(self, x):
            h = self.norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))
    return Block()


def rmsnorm_swiglu(small: bool) -> ZooModel:
    """RMSNorm written by hand (LLaMA's, with ``d * d``) and a SwiGLU MLP, residual."""
    torch = _torch()
    d, hidden, rows = (32, 64, 16) if small else (512, 1376, 512)

    class RMSNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt() * self.weight
    x = torch.randn(rows, d)
    return ZooModel("rmsnorm_swiglu", _swiglu(torch, d, hidden, RMSNorm()), [x], [torch.randn_like(x)], _mse,
                    f"hand-written RMSNorm + SwiGLU({d}, {hidden}) on {(rows, d)}")


def nn_rmsnorm_swiglu(small: bool) -> ZooModel:
    """torch's nn.RMSNorm (its in-place add_ functionalized) and a SwiGLU MLP, residual."""
    torch = _torch()
    d, hidden, rows = (32, 64, 16) if small else (512, 1376, 512)
    x = torch.randn(rows, d)
    return ZooModel("nn_rmsnorm_swiglu", _swiglu(torch, d, hidden, torch.nn.RMSNorm(d)), [x], [torch.randn_like(x)],
                    _mse, f"nn.RMSNorm({d}) + SwiGLU({d}, {hidden}) on {(rows, d)}")


def resnet_block(small: bool) -> ZooModel:
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, identity shortcut, ReLU; train-mode BN."""
    torch = _torch()
    nn = torch.nn
    shape = (2, 4, 8, 8) if small else (8, 32, 16, 16)
    c = shape[1]

    class BasicBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            return (x + self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))).relu()
    x = torch.randn(*shape)
    return ZooModel("resnet_block", BasicBlock(), [x], [torch.randn_like(x)], _mse,
                    f"ResNet basic block, {c} channels, train-mode BatchNorm2d, on {shape}")


def depthwise_separable(small: bool) -> ZooModel:
    """MobileNet's block: depthwise conv3x3 (groups = channels)-BN-ReLU, pointwise conv1x1-BN-ReLU."""
    torch = _torch()
    nn = torch.nn
    shape, out = ((2, 4, 8, 8), 8) if small else ((8, 32, 16, 16), 64)
    c = shape[1]
    block = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                          nn.Conv2d(c, out, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU())
    x = torch.randn(*shape)
    return ZooModel("depthwise_separable", block, [x], [torch.randn(shape[0], out, *shape[2:])], _mse,
                    f"depthwise-separable block {c}->{out}, train-mode BatchNorm2d, on {shape}")


def _unrolled(torch: Any, cell: Any, steps: int, lstm: bool) -> Any:
    class Unrolled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, xs, h):
            state = (h, torch.zeros_like(h)) if lstm else h
            outputs = []
            for step in range(steps):
                state = self.cell(xs[step], state)
                outputs.append(state[0] if lstm else state)
            return torch.stack(outputs)
    return Unrolled()


def _recurrent(small: bool, lstm: bool) -> ZooModel:
    """nn.GRUCell or nn.LSTMCell unrolled over a sequence (a Python loop, traced step by step)."""
    torch = _torch()
    steps, batch, d_in, hidden = (3, 2, 8, 16) if small else (8, 32, 128, 256)
    kind = torch.nn.LSTMCell if lstm else torch.nn.GRUCell
    model = _unrolled(torch, kind(d_in, hidden), steps, lstm)
    xs, h = torch.randn(steps, batch, d_in), torch.randn(batch, hidden)
    return ZooModel("lstm_cell" if lstm else "gru_cell", model, [xs, h], [torch.randn(steps, batch, hidden)], _mse,
                    f"nn.{kind.__name__}({d_in}, {hidden}) unrolled over {steps} steps, batch {batch}")


def gru_cell(small: bool) -> ZooModel:
    return _recurrent(small, lstm=False)


def lstm_cell(small: bool) -> ZooModel:
    return _recurrent(small, lstm=True)


def cross_entropy_head(small: bool) -> ZooModel:
    """A language-model head: Linear(d, 32,000 classes) and cross_entropy with class indices."""
    torch = _torch()
    rows, d, classes = (4, 16, 100) if small else (32, 256, 32000)
    head = torch.nn.Linear(d, classes)
    return ZooModel("cross_entropy_head", head, [torch.randn(rows, d)], [torch.randint(0, classes, (rows,))],
                    torch.nn.functional.cross_entropy, f"Linear({d}, {classes}) + cross_entropy over {rows} rows")


def small_cnn(small: bool) -> ZooModel:
    """A CNN classifier: three conv-BN-ReLU blocks (two strided), global average pool, Linear,
    cross_entropy with class indices; train-mode BN."""
    torch = _torch()
    nn = torch.nn
    shape, widths, classes = ((2, 3, 8, 8), (4, 8, 8), 5) if small else ((16, 3, 32, 32), (16, 32, 64), 10)

    def block(c_in: int, c_out: int, stride: int) -> list:
        return [nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]

    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*block(shape[1], widths[0], 1), *block(widths[0], widths[1], 2),
                                          *block(widths[1], widths[2], 2))
            self.head = nn.Linear(widths[2], classes)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))
    return ZooModel("small_cnn", CNN(), [torch.randn(*shape)], [torch.randint(0, classes, (shape[0],))],
                    torch.nn.functional.cross_entropy,
                    f"CNN classifier, widths {widths}, train-mode BatchNorm2d, cross_entropy, on {shape}")


def lenet(small: bool) -> ZooModel:
    """PyTorch's CIFAR-10 tutorial network (LeNet-5 style): two conv-ReLU-max-pool blocks, three
    Linear layers, cross_entropy with class indices."""
    torch = _torch()
    nn = torch.nn
    shape, classes = ((2, 3, 16, 16), 5) if small else ((16, 3, 32, 32), 10)
    flat = 16 * ((shape[2] - 4) // 2 - 4) // 2 * ((shape[3] - 4) // 2 - 4) // 2

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2, self.pool = nn.Conv2d(3, 6, 5), nn.Conv2d(6, 16, 5), nn.MaxPool2d(2, 2)
            self.fc1, self.fc2, self.fc3 = nn.Linear(flat, 120), nn.Linear(120, 84), nn.Linear(84, classes)

        def forward(self, x):
            x = self.pool(self.conv2(self.pool(self.conv1(x).relu())).relu())
            return self.fc3(self.fc2(self.fc1(x.flatten(1)).relu()).relu())
    return ZooModel("lenet", Net(), [torch.randn(*shape)], [torch.randint(0, classes, (shape[0],))],
                    torch.nn.functional.cross_entropy,
                    f"PyTorch's CIFAR-10 tutorial CNN: conv-ReLU-MaxPool2d twice, three Linear, cross_entropy, on {shape}")


def lstm_classifier(small: bool) -> ZooModel:
    """A text classifier, the sentiment tutorials' first model: Embedding, nn.LSTM, Linear on the
    last step's hidden state, cross_entropy with class indices."""
    torch = _torch()
    nn = torch.nn
    vocab, width, (batch, steps), classes = (50, 8, (2, 5), 3) if small else (20000, 128, (32, 16), 4)

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding, self.lstm = nn.Embedding(vocab, width), nn.LSTM(width, width, batch_first=True)
            self.head = nn.Linear(width, classes)

        def forward(self, tokens):
            return self.head(self.lstm(self.embedding(tokens))[0][:, -1])
    return ZooModel("lstm_classifier", Classifier(), [torch.randint(0, vocab, (batch, steps))],
                    [torch.randint(0, classes, (batch,))], torch.nn.functional.cross_entropy,
                    f"Embedding({vocab}, {width}), nn.LSTM({width}, {width}), Linear, cross_entropy, on "
                    f"{batch}x{steps} tokens")


ZOO: dict[str, Callable[[bool], ZooModel]] = {
    "gpt2_block": gpt2_block, "transformer_decoder": transformer_decoder,
    "transformer_encoder": transformer_encoder, "mlp_mixer": mlp_mixer,
    "rmsnorm_swiglu": rmsnorm_swiglu, "nn_rmsnorm_swiglu": nn_rmsnorm_swiglu, "resnet_block": resnet_block,
    "depthwise_separable": depthwise_separable, "gru_cell": gru_cell, "lstm_cell": lstm_cell,
    "cross_entropy_head": cross_entropy_head, "small_cnn": small_cnn, "lenet": lenet,
    "lstm_classifier": lstm_classifier,
}


#: the zoo's training steps as the shipped instances ``data/torch/zoo/MODULE_train``
TRAINING: dict[str, Callable[[bool], TorchProgram]] = {
    f"zoo/{name}_train": (lambda small, build=build: build(small).training()) for name, build in ZOO.items()}
