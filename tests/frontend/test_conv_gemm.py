"""The GEMM and blocked forms of a convolution (``stax.frontend.ops.conv_forms``) next to the direct form: all give the
explicit loops' convolution and gradients (``test_conv``'s, which share no code with either) on
strided, padded, dilated and grouped cases, in float32 and float64; the rule's decisions; the
columns materialized once for the forward and the weight gradient; a ResNet basic block
imported from torch in the GEMM form agrees with eager torch."""
from __future__ import annotations

import numpy as np
import pytest
from tests.helpers import sample
from tests.frontend.test_conv import loops_conv, loops_grads, pairs

import stax
from stax.environment import isa_from_env
from stax.frontend.ops import nn
from stax.frontend.ops.conv_forms import ConvForm, ConvPlan, blocked_applies, plan_conv
from stax.errors import UnsupportedError

# (input shape, weight shape, groups, stride, padding, dilation)
CASES = [((2, 3, 9, 8), (5, 3, 3, 3), 1, 1, 1, 1), ((2, 4, 11, 10), (6, 4, 3, 3), 1, 2, 1, 1),
         ((1, 3, 10, 9), (4, 3, 3, 2), 1, (2, 1), (0, 2), (2, 1)), ((2, 4, 6, 7), (6, 4, 1, 1), 1, 1, 0, 1),
         ((2, 4, 9, 8), (6, 2, 3, 3), 2, 2, 1, 1), ((1, 6, 8, 9), (6, 2, 3, 2), 3, 1, (1, 0), (1, 2)),
         ((2, 4, 7, 7), (4, 1, 3, 3), 4, 1, 1, 1)]


def grouped_loops(x, w, g, groups, stride, padding, dilation):
    """The convolution and both gradients by explicit loops, group by group, in float64."""
    xs, ws, gs = np.split(x, groups, 1), np.split(w, groups, 0), np.split(g, groups, 1)
    out = np.concatenate([loops_conv(a, b, stride, padding, dilation) for a, b in zip(xs, ws)], 1)
    grads = [loops_grads(c.astype(np.float64), a, b.astype(np.float64), stride, padding, dilation)
             for a, b, c in zip(xs, ws, gs)]
    return out, np.concatenate([gx for gx, _ in grads], 1), np.concatenate([gw for _, gw in grads], 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", list(ConvForm))
@pytest.mark.parametrize("x_shape, w_shape, groups, stride, padding, dilation", CASES)
def test_both_forms_match_explicit_loops(check, x_shape, w_shape, groups, stride, padding, dilation, form, dtype):
    stride, padding, dilation = pairs(stride, padding, dilation)
    x, w = sample(x_shape, dtype, seed=120), sample(w_shape, dtype, seed=121)
    out_shape = loops_conv(x[:, :w_shape[1]], w[:w_shape[0] // groups], stride, padding, dilation).shape
    g = sample((x_shape[0], w_shape[0]) + out_shape[2:], dtype, seed=122)
    conv = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups, "form": form}

    def fn(x, w, g):
        return (nn.conv2d(x, w, **conv).relu(), nn.conv2d_input_grad(g, w, x.shape, **conv),
                nn.conv2d_weight_grad(g, x, w.shape, **conv))
    if form is ConvForm.BLOCKED and not blocked_applies(stride, dilation, groups, dtype, isa_from_env()):
        with pytest.raises(UnsupportedError, match="blocked form takes float32 convolutions of stride and dilation 1"):
            stax.compile(fn, x, w, g)
        return
    tol = 1e-4 if dtype == "float32" else 1e-10
    compiled = check(fn, x, w, g, rtol=tol, atol=tol)
    out, gx, gw = grouped_loops(x, w, g, groups, stride, padding, dilation)
    for got, want in zip(compiled(x, w, g), (np.maximum(out, 0), gx, gw)):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    externs = [k for k in compiled.block_kernels if k.extern]
    assert bool(externs) == (form is not ConvForm.DIRECT)
    assert {p.form for p in compiled.graph.conv_plans.values()} == {form}


def test_the_rule_takes_the_gemm_form_for_wide_convolutions_only():
    """A ResNet 3x3, a 1x1 and a 7x7 stem take the GEMM form; a depthwise convolution (one output
    channel per group) and a tiny one stay direct; the plan records the GEMM's shape."""
    resnet = plan_conv((8, 64, 34, 34), (64, 64, 3, 3), (32, 32), 1)
    assert resnet == ConvPlan(ConvForm.GEMM, 1, 64, 576, 8 * 32 * 32)
    assert plan_conv((8, 256, 16, 16), (64, 256, 1, 1), (16, 16), 1).form is ConvForm.GEMM
    assert plan_conv((1, 3, 230, 230), (64, 3, 7, 7), (112, 112), 1).form is ConvForm.GEMM
    assert plan_conv((8, 32, 18, 18), (32, 1, 3, 3), (16, 16), 32).form is ConvForm.DIRECT
    assert plan_conv((2, 3, 9, 9), (4, 3, 3, 3), (7, 7), 1).form is ConvForm.DIRECT
    assert plan_conv((2, 3, 9, 9), (4, 3, 3, 3), (7, 7), 1, ConvForm.GEMM).form is ConvForm.GEMM
    # where the blocked kernel applies (stride 1, one group, float32, vectors), it takes the wide
    # ones but the pointwise, which is a product read in place
    assert plan_conv((8, 64, 34, 34), (64, 64, 3, 3), (32, 32), 1, blocked=True).form is ConvForm.BLOCKED
    assert plan_conv((8, 256, 16, 16), (64, 256, 1, 1), (16, 16), 1, blocked=True).form is ConvForm.GEMM
    assert plan_conv((2, 3, 9, 9), (4, 3, 3, 3), (7, 7), 1, blocked=True).form is ConvForm.DIRECT
    # one input channel (an MNIST stem): too short a reduction for columns, not for the blocked kernel
    mnist = ((64, 1, 30, 30), (16, 1, 3, 3), (28, 28), 1)
    assert plan_conv(*mnist).form is ConvForm.DIRECT
    assert plan_conv(*mnist, blocked=True).form is ConvForm.BLOCKED


def test_the_columns_are_written_once_for_the_forward_and_the_weight_gradient():
    """The weight gradient reads the forward's column buffer, transposed in place: one im2col
    kernel writes it, and the two matmuls read it (the weight as a (C_out, K) matrix, unmoved)."""
    x, w, g = sample((4, 32, 12, 12), seed=123), sample((32, 32, 3, 3), seed=124), sample((4, 32, 12, 12), seed=125)

    def fn(x, w, g):
        return (nn.conv2d(x, w, padding=1, form=ConvForm.GEMM),
                nn.conv2d_weight_grad(g, x, w.shape, padding=1, form=ConvForm.GEMM))
    compiled = stax.compile(fn, x, w, g)
    columns = [b for b in compiled.program.buffers if b.shape == (1, 32, 3, 3, 4, 12, 12)]
    assert len(columns) == 1
    calls = [k.extern for k in compiled.block_kernels if k.extern]
    assert [columns[0].name in c["inputs"] for c in calls] == [True, True]
    assert sorted(str(c["attrs"].get("transposed")) for c in calls) == ["(False, True)", "None"]
    out, gw = compiled(x, w, g)
    np.testing.assert_allclose(out, loops_conv(x, w, (1, 1), (1, 1), (1, 1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, loops_grads(g.astype(np.float64), x, w, (1, 1), (1, 1), (1, 1))[1],
                               rtol=1e-4, atol=1e-4)


def test_a_matrix_times_a_batch_reads_both_in_place(check):
    """``w @ x`` with a 2-D ``w`` and a batched ``x`` is one matmul of the matrix and the batch
    (no copy of ``w`` per batch), and a reshaped input is read in place: only the matmuls read
    the inputs (the kernels left copy their results into the outputs' shapes)."""
    w, x, y = sample((24, 40), seed=126), sample((3, 40, 72), seed=127), sample((6, 12, 40), seed=128)
    compiled = check(lambda w, x, y: (w @ x, y @ w.t()), w, x, y, rtol=1e-4, atol=1e-4)
    externs = [b for b in compiled.program.buffers if b.kind == "extern"]
    assert len(externs) == 2 and {i for b in externs for i in b.inputs} == {i.name for i in compiled.program.inputs}
    assert all(ld.buffer in {b.name for b in externs} for b in compiled.program.buffers if b.kind != "extern"
               for ld in b.reads())


def test_a_resnet_block_in_the_rules_forms_agrees_with_torch():
    """A ResNet basic block wide enough for the rule's blocked and GEMM forms, imported from torch:
    its forward and training step match eager torch, in the forms the rule picks."""
    torch = pytest.importorskip("torch", reason="the torch import needs torch: pip install 'stax[torch]'")
    from experiments.models.compare_inductor import _largest_error
    from experiments.models.zoo import ZooModel, _mse
    torch.manual_seed(0)
    nn_ = torch.nn
    c, shape = 32, (2, 32, 16, 16)

    class BasicBlock(nn_.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn_.Conv2d(c, c, 3, padding=1, bias=False), nn_.BatchNorm2d(c)
            self.conv2, self.bn2 = nn_.Conv2d(c, c, 3, padding=1, bias=False), nn_.BatchNorm2d(c)

        def forward(self, x):
            return (x + self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))).relu()
    x = torch.randn(*shape)
    model = ZooModel("resnet_gemm", BasicBlock(), [x], [torch.randn_like(x)], _mse, "ResNet basic block")
    blocked = blocked_applies((1, 1), (1, 1), 1, "float32", isa_from_env())
    # the convolutions and both their gradients are blocked where the kernel applies
    want = {ConvForm.BLOCKED} if blocked else {ConvForm.GEMM}
    for program in (model.forward(), model.training()):
        arguments = program.arguments()
        compiled = program.compile()
        error = _largest_error(program, compiled(*arguments), arguments)
        scale = max(float(np.abs(e).max(initial=1.0)) for e in program.expected)
        assert error <= 1e-4 * scale, f"{program.name}: error {error}"
        forms = {p.form for p in compiled.graph.conv_plans.values()}
        assert forms == want, (program.name, forms)


def test_a_pointwise_convolution_reads_its_input_and_gradient_in_place():
    """A 1x1 stride-1 convolution's columns are its input: the forward, the input gradient and the
    weight gradient are matmuls of the weight and each image (no column buffer), and only they
    read the input and the output gradient."""
    x, w, g = sample((4, 64, 8, 8), seed=129), sample((96, 64, 1, 1), seed=130), sample((4, 96, 8, 8), seed=131)

    def fn(x, w, g):
        return (nn.conv2d(x, w).relu(), nn.conv2d_input_grad(g, w, x.shape),
                nn.conv2d_weight_grad(g, x, w.shape))
    compiled = stax.compile(fn, x, w, g)
    x_name, _, g_name = (i.name for i in compiled.program.inputs)
    readers = {b.kind for b in compiled.program.buffers
               if any(name in (x_name, g_name) for name in (b.inputs if b.kind == "extern" else
                                                            [ld.buffer for ld in b.reads()]))}
    assert readers == {"extern"}
    assert len([b for b in compiled.program.buffers if b.kind == "extern"]) == 3
    got = compiled(x, w, g)
    out = loops_conv(x, w, (1, 1), (0, 0), (1, 1))
    gx, gw = loops_grads(g.astype(np.float64), x, w.astype(np.float64), (1, 1), (0, 0), (1, 1))
    for have, want in zip(got, (np.maximum(out, 0), gx, gw)):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("program", [lambda x, w: nn.conv2d(x.transpose(2, 3), w, form=ConvForm.BLOCKED),
                                     lambda x, w: nn.conv2d(x, w.transpose(2, 3), form=ConvForm.BLOCKED),
                                     lambda x, w: nn.conv2d_weight_grad(x.transpose(2, 3), x, (16, 16, 3, 3), padding=1,
                                                                        form=ConvForm.BLOCKED)])
def test_a_blocked_convolution_reads_a_transposed_operand_as_its_values(check, program):
    """The blocked kernels read their operands as stored: a transposed view of a buffer (an
    unpadded input, a weight, an output gradient) is copied in its own layout, where a product would read it in place
    with a transpose flag (the kernels once read such an input untransposed)."""
    if not blocked_applies((1, 1), (1, 1), 1, "float32", isa_from_env()):
        pytest.skip("the blocked form needs vector instructions, which this CPU lacks")
    x, w = sample((4, 16, 24, 24), seed=140), sample((24, 16, 3, 3), seed=141)
    compiled = check(program, x, w, rtol=1e-4, atol=1e-2)  # sums of up to 1,936 terms of size 10
    assert "stax::direct_conv" in compiled.source  # the convolution's entry or the weight gradient's
