"""The PyTorch front end: real models compile with every fusion and order strategy and agree
with PyTorch; ops without a translation raise an error naming the ATen op."""
from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")

import numpy as np  # noqa: E402

from experiments.models.suite import MODELS, adam_step  # noqa: E402
from experiments.models.zoo import TRAINING  # noqa: E402
from stax.errors import UnsupportedError  # noqa: E402
from stax.torch.capture import TorchProgram, import_function, import_module, import_training_step  # noqa: E402

FUSIONS = {"greedy": {}, "cpsat": {"time_limit": 2.0}, "mwc": {"time_limit": 2.0}}
ORDERS = {"original": {}, "lpmf": {}, "bfs": {}, "dfs": {}, "best": {}, "dp": {}, "cpsat": {"time_limit": 2.0}}
TRAINING = ("transformer_train", "norm_net_train", "conv_net_train")


@pytest.fixture(scope="module")
def programs() -> dict[str, TorchProgram]:
    return {name: build(True) for name, build in MODELS.items()}


def assert_agrees(program: TorchProgram, **options) -> None:
    compiled = program.compile(**options)
    outputs = compiled(*program.arguments())
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    assert len(outputs) == len(program.expected)
    for i, (got, want) in enumerate(zip(outputs, program.expected)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=f"{program.name} output {i}")


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("model", MODELS)
def test_every_fusion_agrees_with_torch(programs, model, fusion):
    assert_agrees(programs[model], fusion=fusion, fusion_params=FUSIONS[fusion])


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("model", TRAINING)
def test_every_order_agrees_with_torch(programs, model, order):
    assert_agrees(programs[model], order=order, order_params=ORDERS[order])


def test_training_step_is_the_joint_graph(programs):
    """Loss and one gradient per parameter; the backward's index masks are lifted constants."""
    program = programs["transformer_train"]
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    assert len(program.expected) == 1 + len(list(layer.parameters()))
    assert program.constants and program.input_names[-1].startswith("constant")
    assert program.provenance["torch"] == torch.__version__


def test_module_buffers_are_inputs():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU()).eval()
    net[1].running_var.uniform_(0.5, 2.0)
    program = import_module(net, torch.randn(4, 8))
    assert "1.running_var" in program.input_names
    assert_agrees(program)


def test_scalar_first_ops_and_casts():
    def fn(x, y):
        return (1 - x.sigmoid()) * (x > 0).float() + torch.where(y < 0, 2.0, y).double().float(), x.amax(-1)
    program = import_function(fn, torch.randn(3, 5), torch.randn(3, 5))
    assert_agrees(program)


def test_adam_step_is_torch_optim_adam():
    torch.manual_seed(0)
    param, grad = torch.randn(7, requires_grad=True), torch.randn(7)
    zeros = torch.zeros(7)
    new_param, _, _ = adam_step([param.detach()], [grad], [zeros], [zeros], step=1)
    optimizer = torch.optim.Adam([param], lr=1e-3, foreach=False)
    param.grad = grad
    optimizer.step()
    torch.testing.assert_close(new_param, param.detach())


def test_unsupported_op_names_the_aten_op():
    with pytest.raises(UnsupportedError, match=r"aten\.lgamma\.default"):
        import_function(lambda x: torch.lgamma(x).exp(), torch.rand(3))


@pytest.mark.parametrize("stride, padding, dilation, size", [
    (1, 0, 1, (6, 6)), (1, 1, 1, (7, 5)), (2, 1, 1, (9, 8)), (2, 2, 1, (7, 7)), ((2, 1), (0, 3), (2, 1), (8, 5)),
    (3, 4, 1, (5, 6))])
def test_convolution_and_its_gradients_agree_with_torch(stride, padding, dilation, size):
    """Forward, input and weight gradients of conv2d (one training step of a convolution) for
    strides 1-3, paddings beyond the kernel's reach, dilation and odd sizes."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 5, (3, 2), stride=stride, padding=padding, dilation=dilation)
    program = import_training_step(conv, lambda y: (y * y).sum(), [torch.randn(2, 3, *size)])
    assert_agrees(program)
    assert_agrees(import_function(lambda x, w: torch.autograd.grad(conv(x).square().sum(), x)[0],
                                  torch.randn(2, 3, *size).requires_grad_(), conv.weight.detach()))


def test_constant_pad_flip_and_cat_agree_with_torch():
    def fn(x):
        padded = torch.nn.functional.pad(x, (1, 2, -1, 3), value=-1.5)
        return (padded.flip(0, 2).exp(), torch.nn.functional.pad(x, (0, 0, 2, 0)),
                torch.cat([x, x.sigmoid(), x[:, :1]], 1) * 2, torch.cat([x, (x > 0).int()], -1))
    assert_agrees(import_function(fn, torch.randn(3, 4, 5)))


@pytest.mark.parametrize("conv, shape", [
    (torch.nn.Conv2d(4, 6, 3, groups=2, padding=1), (2, 4, 7, 6)),
    (torch.nn.Conv2d(6, 6, 3, groups=6, stride=2, padding=1), (2, 6, 9, 8)),  # depthwise
    (torch.nn.Conv2d(3, 4, 3), (3, 7, 7)),  # unbatched
    (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 6)),
    (torch.nn.ConvTranspose2d(4, 4, (3, 2), stride=(2, 3), padding=(1, 0), dilation=(1, 2), groups=4), (2, 4, 5, 6))])
def test_grouped_transposed_and_unbatched_convolutions_agree_with_torch(conv, shape):
    """Forward and training step (input, weight and bias gradients through convolution_backward)."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    assert_agrees(import_module(conv, x))
    assert_agrees(import_training_step(conv, lambda y: (y * y).sum(), [x]))


def test_cross_entropy_over_32000_classes_agrees_with_torch():
    """cross_entropy with class indices (aten.gather forward, aten.scatter backward): the loss and
    the logits' gradient."""
    torch.manual_seed(0)
    logits, targets = torch.randn(8, 32000, requires_grad=True), torch.randint(0, 32000, (8,))

    def step(logits, targets):
        loss = torch.nn.functional.cross_entropy(logits, targets)
        return loss, torch.autograd.grad(loss, logits)[0]
    program = import_function(step, logits, targets)
    targets_ops = {str(n.target) for n in program.fx_graph.graph.nodes}
    assert {"aten.gather.default", "aten.scatter.value"} <= targets_ops
    assert_agrees(program)


def test_indexing_and_embedding_with_their_gradients_agree_with_torch():
    """x[i] (aten.index, negative positions too) and its gradient (index_put with accumulate), and
    an nn.Embedding training step (padding_idx's row gets no gradient)."""
    torch.manual_seed(0)
    x, i = torch.randn(10, 4, requires_grad=True), torch.tensor([1, 3, 3, -3])
    assert_agrees(import_function(lambda x, i: (x[i].exp(), torch.autograd.grad((x[:, i[:2]] ** 2).sum(), x)[0]),
                                  x, i))
    embedding = torch.nn.Embedding(10, 4, padding_idx=0)
    assert_agrees(import_training_step(embedding, lambda y: (y * y).sum(), [torch.tensor([[0, 3, 3], [9, 1, 0]])]))


def assert_updates_agree(program: TorchProgram, arguments: list[np.ndarray]) -> None:
    """The buffers the compiled call updated in ``arguments`` hold torch's values after its call."""
    assert program.updated and len(program.updated) == len(program.expected_updates)
    for name, want in zip(program.updated, program.expected_updates):
        got = arguments[program.input_names.index(name)]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=f"{program.name}: {name}")


@pytest.mark.parametrize("cell, inputs", [(torch.nn.GRUCell(6, 8), (3, 6, 8)), (torch.nn.RMSNorm(8), (3, 8))])
def test_modules_with_in_place_ops_import_functionalized(cell, inputs):
    """nn.GRUCell (add_, sigmoid_, tanh_ on slices: slice_scatter after functionalization) and
    nn.RMSNorm (add_.Scalar): forward and training step agree with eager torch."""
    torch.manual_seed(0)
    tensors = [torch.randn(inputs[0], n) for n in inputs[1:]]
    assert_agrees(import_module(cell, *tensors))
    program = import_training_step(cell, lambda h: (h * h).sum(), tensors)
    assert not program.updated
    assert_agrees(program)


def test_train_mode_batch_norm_updates_the_running_statistics():
    """A conv + train-mode BatchNorm2d training step: loss and gradients agree with torch, and the
    compiled call writes running_mean, running_var and num_batches_tracked into the module as
    torch's call does (momentum 0.1, unbiased running variance)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.ReLU())
    x = torch.randn(4, 2, 6, 6)
    program = import_training_step(net, lambda y: (y * y).sum(), [x])
    assert program.updated == ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    arguments = program.arguments()
    outputs = program.compile()(*arguments)
    for got, want in zip(outputs, program.expected):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    assert_updates_agree(program, arguments)
    reference = copy.deepcopy(net)
    reference(x)
    program.compile()(*program.module_arguments(net, x))  # the module's own buffers, updated in place
    for name, buffer in net.named_buffers():
        torch.testing.assert_close(buffer, dict(reference.named_buffers())[name], rtol=2e-5, atol=1e-6)
    assert int(net[1].num_batches_tracked) == 1


def test_batch_norm2d_forward_in_training_mode():
    torch.manual_seed(0)
    program = import_module(torch.nn.BatchNorm2d(5), torch.randn(3, 5, 4, 4))
    arguments = program.arguments()
    np.testing.assert_allclose(program.compile()(*arguments), program.expected[0], rtol=2e-4, atol=2e-5)
    assert_updates_agree(program, arguments)


def test_update_of_a_tensor_that_is_not_an_input_is_refused():
    stats = torch.zeros(3)

    def count(x):
        stats.add_(1)
        return x * stats
    with pytest.raises(UnsupportedError, match=r"aten\.add_\.Tensor .* of count updates a tensor that is not an input"
                                               r".*register_buffer"):
        import_function(count, torch.randn(3))


@pytest.mark.parametrize("model", [*MODELS, *(pytest.param(name, marks=pytest.mark.slow) for name in TRAINING)])
def test_shipped_files_are_what_the_exporter_writes(model, tmp_path):
    """instances/data/torch/ matches the front end and the default fusion rule today (rebuild with
    ``python -m experiments.models.export``); skipped under another torch version."""
    from experiments.models.export import OUT, export
    made_with = json.loads((OUT / f"{model}.fusion.json").read_text())["provenance"]["torch"]
    if made_with != torch.__version__:
        pytest.skip(f"shipped files made with torch {made_with}, this is {torch.__version__}")
    for path, _ in export(model, small=False, out=tmp_path):
        same = path.read_text() == (OUT / path.name).read_text()
        assert same, f"instances/data/torch/{path.name} differs from a fresh export: rebuild it"
