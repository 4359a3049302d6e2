"""The PyTorch front end: real models compile with every fusion and order strategy and agree
with PyTorch; ops without a translation raise an error naming the ATen op."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")

import numpy as np  # noqa: E402

from experiments.torch_models import MODELS, adam_step  # noqa: E402
from stax.errors import UnsupportedError  # noqa: E402
from stax.torch_frontend import TorchProgram, import_function, import_module, import_training_step  # noqa: E402

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
    with pytest.raises(UnsupportedError, match=r"aten\.sort\.default"):
        import_function(lambda x: torch.sort(x).values.exp(), torch.randn(3))


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


def test_grouped_convolution_is_unsupported():
    conv = torch.nn.Conv2d(4, 4, 3, groups=2)
    with pytest.raises(UnsupportedError, match=r"aten\.convolution: .*groups=2"):
        import_module(conv, torch.randn(1, 4, 6, 6)).graph()


def test_batch_norm_with_running_statistics_is_unsupported_in_training():
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    with pytest.raises(UnsupportedError, match=r"in place .*track_running_stats=False"):
        import_training_step(net, lambda y: y.sum(), [torch.randn(2, 2, 5, 5)])
    stats = torch.zeros(3), torch.ones(3)
    with pytest.raises(UnsupportedError, match=r"native_batch_norm in training mode .*track_running_stats=False"):
        import_function(lambda x: torch.ops.aten.native_batch_norm(x, None, None, *stats, True, 0.1, 1e-5)[0],
                        torch.randn(2, 3, 4, 4)).graph()


def test_in_place_update_is_unsupported():
    net = torch.nn.BatchNorm1d(4)
    with pytest.raises(UnsupportedError, match=r"aten\.add_\.Tensor .* in place .*BatchNorm"):
        import_training_step(net, lambda y: y.sum(), [torch.randn(3, 4)])


@pytest.mark.parametrize("model", MODELS)
def test_shipped_files_are_what_the_exporter_writes(model, tmp_path):
    """instances/data/torch/ matches the front end and the default fusion rule today (rebuild with
    ``python -m experiments.export_torch_instances``); skipped under another torch version."""
    from experiments.export_torch_instances import OUT, export
    made_with = json.loads((OUT / f"{model}.fusion.json").read_text())["provenance"]["torch"]
    if made_with != torch.__version__:
        pytest.skip(f"shipped files made with torch {made_with}, this is {torch.__version__}")
    for path, _ in export(model, small=False, out=tmp_path):
        same = path.read_text() == (OUT / path.name).read_text()
        assert same, f"instances/data/torch/{path.name} differs from a fresh export: rebuild it"
