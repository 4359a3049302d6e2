"""The PyTorch front end: real models compile with every fusion and order strategy and agree
with PyTorch; ops without a translation raise an error naming the ATen op."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch: pip install 'stax[torch]'")

import numpy as np  # noqa: E402

from experiments.torch_models import MODELS, adam_step  # noqa: E402
from stax.errors import UnsupportedError  # noqa: E402
from stax.torch_frontend import TorchProgram, import_function, import_module, import_training_step  # noqa: E402

FUSIONS = {"greedy": {}, "cpsat": {"time_limit": 2.0}, "mwc": {"time_limit": 2.0}}
ORDERS = {"original": {}, "lpmf": {}, "bfs": {}, "dfs": {}, "best": {}, "dp": {}, "cpsat": {"time_limit": 2.0}}
TRAINING = ("transformer_train", "norm_net_train")


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
    with pytest.raises(UnsupportedError, match=r"aten\.cat\.default"):
        import_function(lambda x: torch.cat([x, x]).exp(), torch.randn(3))


def test_convolution_is_unsupported():
    conv = torch.nn.Conv2d(2, 4, 3)
    with pytest.raises(UnsupportedError, match=r"aten\.convolution"):
        import_module(conv, torch.randn(1, 2, 6, 6))


def test_in_place_update_is_unsupported():
    net = torch.nn.BatchNorm1d(4)
    with pytest.raises(UnsupportedError, match=r"aten\.add_\.Tensor .* in place .*BatchNorm"):
        import_training_step(net, lambda y: y.sum(), [torch.randn(3, 4)])
