"""Padding, windows, concatenation and 2-D convolution (``stax.frontend.ops.nn``), compiled and run at ISA levels avx2 and
none: against the numpy reference evaluator (``check``) and against explicit loops written here,
which share no code with the graph's composition of pad, unfold and sum."""
from __future__ import annotations

import numpy as np
import pytest
from tests.helpers import sample

import stax
from stax.frontend.ops import nn
from stax.frontend.ops.conv_forms import ConvForm
from stax.errors import ShapeError, UnsupportedError
from stax.measure.traffic import count_traffic

# (input shape, weight shape, stride, padding, dilation): odd sizes, strides 1-3, padding beyond
# the kernel's reach (the input gradient's padding is then negative), dilation, 1x1 kernels
CASES = [((2, 3, 7, 9), (4, 3, 3, 3), 1, 1, 1), ((2, 3, 8, 8), (5, 3, 3, 3), 2, 1, 1),
         ((1, 2, 9, 7), (3, 2, 3, 2), (2, 1), (0, 2), (2, 1)), ((2, 2, 5, 6), (3, 2, 3, 3), 3, 4, 1),
         ((3, 4, 5, 5), (2, 4, 1, 1), 1, 0, 1), ((1, 1, 11, 4), (2, 1, 5, 3), (1, 2), (2, 1), (2, 1)),
         ((2, 2, 7, 6), (3, 2, 1, 2), (2, 3), (0, 1), 1),  # kernels narrower than the stride: phases without taps
         ((1, 2, 1, 3), (2, 2, 1, 1), 2, 1, 1)]  # no tap reaches the input row: its gradient is zero


def pairs(*values):
    return [v if isinstance(v, tuple) else (v, v) for v in values]


def output_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def taps(x_shape, w_shape, stride, padding, dilation):
    """Every (output row, output column, kernel row, kernel column) with its padded input position."""
    (sh, sw), (dh, dw) = stride, dilation
    oh = output_size(x_shape[2], w_shape[2], sh, padding[0], dh)
    ow = output_size(x_shape[3], w_shape[3], sw, padding[1], dw)
    for i in range(oh):
        for j in range(ow):
            for kh in range(w_shape[2]):
                for kw in range(w_shape[3]):
                    yield i, j, kh, kw, i * sh + kh * dh, j * sw + kw * dw


def loops_conv(x, w, stride, padding, dilation):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2])
    points = list(taps(x.shape, w.shape, stride, padding, dilation))
    out = np.zeros((x.shape[0], w.shape[0], points[-1][0] + 1, points[-1][1] + 1))
    for i, j, kh, kw, ih, iw in points:
        out[:, :, i, j] += xp[:, :, ih, iw] @ w[:, :, kh, kw].T.astype(np.float64)
    return out


def loops_grads(g, x, w, stride, padding, dilation):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2])
    gx, gw = np.zeros_like(xp), np.zeros(w.shape)
    for i, j, kh, kw, ih, iw in taps(x.shape, w.shape, stride, padding, dilation):
        gx[:, :, ih, iw] += g[:, :, i, j] @ w[:, :, kh, kw]
        gw[:, :, kh, kw] += g[:, :, i, j].T @ xp[:, :, ih, iw]
    return gx[:, :, padding[0]:padding[0] + x.shape[2], padding[1]:padding[1] + x.shape[3]], gw


def test_pad_unfold_and_flip(isa, check):
    """Padding of inputs, of inlined expressions and of pads (same and other value), cropping,
    windows and flips, as outputs and inside reductions."""
    def fn(x, y):
        e = (x * 2).exp()
        return (nn.pad(x, (1, 2)), nn.pad(x, (0, 0, 2, 1), value=-1.0), nn.pad(x, (-1, 2, 1, -2)),
                nn.pad(e, (1, 1, 1, 1)) + 1, nn.pad(nn.pad(x, (1, 0)), (0, 2, 1, 1)),
                nn.pad(nn.pad(x, (1, 1), value=3.0), (1, 1)), nn.pad(x, (2, 2)).sum(-1), nn.pad(y, (3, 1)).amax(0),
                x.unfold(1, 3, 2), x.unfold(0, 2, 1).sum(-1), y.unfold(0, 4, 3) * 2, x.flip(1), x.flip(0, 1).sum(0),
                nn.pad(x, (1, 1)).unfold(1, 3, 1).flip(-1).sum(-1))
    check(fn, sample((5, 7), seed=90), sample((13,), seed=91))


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_pad_unfold_and_flip_of_integers_and_bools(isa, check, dtype):
    def fn(x):
        return nn.pad(x, (1, 2, 0, 1), value=1), nn.pad(x, (2, -1)).flip(0), x.unfold(1, 2, 2).flip(-1)
    check(fn, sample((4, 6), dtype, seed=105))


def test_cat(isa, check):
    """Concatenation along any dim, with promotion, of inlined expressions and views; a
    concatenated ``-0.0`` keeps its sign."""
    def fn(x, y, n, b, e):
        return (nn.cat([x, y.t(), x * 2], 1), nn.cat([x.exp(), n], 0), nn.cat([b, x > 0], 0), nn.cat([x[:, :1], x], -1),
                nn.cat([x]) + 1, nn.cat([n, e, n], 1).sum(1))
    x, n = sample((3, 5), seed=106), sample((2, 5), "int32", seed=107)
    x[1, 2] = -0.0
    arrays = (x, sample((4, 3), seed=108), n, sample((1, 5), "bool", seed=109), np.zeros(0, np.int32))
    compiled = check(fn, *arrays)
    assert np.signbit(compiled(*arrays)[0][1, 2])


def test_padded_reads_stay_inside_the_input(isa):
    """The input is a window of a larger array whose border is NaN: a read outside the input
    (a missing guard) would bring a NaN in."""
    border = np.full((9, 12), np.nan, np.float32)
    border[1:-1, 1:-1] = sample((7, 10), seed=92)
    x = border[1:-1, 1:-1]
    compiled = stax.compile(lambda t: (nn.pad(t, (2, 3, 1, 1)) * 2, nn.pad(t, (1, 1, 1, 1)).unfold(1, 3, 1).sum(-1)), x,
                            isa=isa)
    padded, smoothed = compiled(x)
    assert not np.isnan(padded).any() and not np.isnan(smoothed).any()
    np.testing.assert_array_equal(padded[1:-1, 2:-3], x * 2)


def test_padded_rows_are_read_by_vectors_lane_by_lane(isa):
    """At a vector ISA a padded row is read by vectors that test the guard per lane: the lanes
    outside the input never read it (its border here is NaN), the others read it in place."""
    border = np.full((6, 43), np.nan, np.float32)
    border[1:-1, 1:-1] = sample((4, 41), seed=102)
    x = border[1:-1, 1:-1]
    compiled = stax.compile(lambda t: nn.pad(t, (3, 5, 0, 0)) + 1, x, isa=isa)
    got = compiled(x)
    assert not np.isnan(got).any() and (got[:, :3] == 1).all() and (got[:, -5:] == 1).all()
    np.testing.assert_array_equal(got[:, 3:-5], x + 1)
    assert ("stax::vload_guarded(" in compiled.kernels[0].source) == (isa != "none")


def test_padded_convolution_runs_across_neighbouring_outputs():
    """A stride-1 convolution's kernel rows are shorter than a vector: it runs in the outer-vector
    form along the output width, its padded reads tested lane by lane."""
    x, w = sample((2, 3, 12, 21), seed=103), sample((4, 3, 3, 3), seed=104)
    compiled = stax.compile(lambda x, w: nn.conv2d(x, w, padding=1), x, w, isa="avx2")
    assert [k.form for k in compiled.block_kernels] == ["outer-vector"]
    np.testing.assert_allclose(compiled(x, w), loops_conv(x, w, (1, 1), (1, 1), (1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation", CASES)
def test_conv2d_matches_explicit_loops(isa, check, x_shape, w_shape, stride, padding, dilation):
    x, w, b = sample(x_shape, seed=93), sample(w_shape, seed=94), sample(w_shape[:1], seed=95)
    compiled = check(lambda x, w, b: nn.conv2d(x, w, b, stride, padding, dilation).relu(), x, w, b,
                     rtol=1e-4, atol=1e-4)
    want = np.maximum(loops_conv(x, w, *pairs(stride, padding, dilation)) + b.reshape(1, -1, 1, 1), 0)
    np.testing.assert_allclose(compiled(x, w, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation", CASES)
def test_conv2d_gradients_match_explicit_loops(isa, check, x_shape, w_shape, stride, padding, dilation):
    x, w = sample(x_shape, seed=96), sample(w_shape, seed=97)
    stride, padding, dilation = pairs(stride, padding, dilation)
    g = sample(loops_conv(x, w, stride, padding, dilation).shape, seed=98)

    def fn(g, x, w):
        return (nn.conv2d_input_grad(g, w, x.shape, stride, padding, dilation),
                nn.conv2d_weight_grad(g, x, w.shape, stride, padding, dilation))
    compiled = check(fn, g, x, w, rtol=1e-4, atol=1e-4)
    for got, want in zip(compiled(g, x, w), loops_grads(g.astype(np.float64), x, w.astype(np.float64),
                                                        stride, padding, dilation)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def loops_grouped(groups, conv, x, w, *args):
    """A grouped convolution (or its gradients) by explicit loops: each group's channels apart."""
    per_x, per_w = x.shape[1] // groups, w.shape[0] // groups
    parts = [conv(x[:, g * per_x:(g + 1) * per_x], w[g * per_w:(g + 1) * per_w], *args) for g in range(groups)]
    return parts


# (input shape, weight shape, groups, stride, padding, dilation): grouped, depthwise (one input
# channel per group), depthwise with a channel multiplier, strided and dilated
GROUPED = [((2, 4, 7, 6), (6, 2, 3, 3), 2, 1, 1, 1), ((2, 6, 9, 8), (6, 1, 3, 3), 6, 2, 1, 1),
           ((1, 3, 8, 7), (6, 1, 3, 2), 3, (2, 1), (1, 0), (1, 2))]


@pytest.mark.parametrize("x_shape, w_shape, groups, stride, padding, dilation", GROUPED)
def test_grouped_conv2d_and_gradients_match_explicit_loops(isa, check, x_shape, w_shape, groups, stride, padding,
                                                           dilation):
    x, w = sample(x_shape, seed=110), sample(w_shape, seed=111)
    stride, padding, dilation = pairs(stride, padding, dilation)
    out = np.concatenate(loops_grouped(groups, loops_conv, x, w, stride, padding, dilation), 1)
    g = sample(out.shape, seed=112)

    def fn(x, w, g):
        return (nn.conv2d(x, w, None, stride, padding, dilation, groups),
                nn.conv2d_input_grad(g, w, x.shape, stride, padding, dilation, groups),
                nn.conv2d_weight_grad(g, x, w.shape, stride, padding, dilation, groups))
    compiled = check(fn, x, w, g, rtol=1e-4, atol=1e-4)
    per_g = g.shape[1] // groups
    grads = [loops_grads(g[:, i * per_g:(i + 1) * per_g].astype(np.float64), xs, ws.astype(np.float64), stride,
                         padding, dilation)
             for i, (xs, ws) in enumerate(zip(*[np.split(a, groups, 1 if k == 0 else 0) for k, a in enumerate((x, w))]))]
    want = (out, np.concatenate([gx for gx, _ in grads], 1), np.concatenate([gw for _, gw in grads], 0))
    for got, expected in zip(compiled(x, w, g), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups, stride, padding, output_padding, dilation", [
    (1, 2, 1, 1, 1), (2, 1, 0, 0, 1), (4, (2, 3), (1, 0), (1, 2), (1, 2))])
def test_conv_transpose2d_is_the_input_gradient_by_loops(check, groups, stride, padding, output_padding, dilation):
    """A transposed convolution is the input gradient of the convolution with its weight: checked
    against the loops' input gradient, and unbatched (3-D) input against the batch of one."""
    x, w, b = sample((2, 4, 5, 6), seed=113), sample((4, 2, 3, 2), seed=114), sample((2 * groups,), seed=115)
    stride, padding, output_padding, dilation = pairs(stride, padding, output_padding, dilation)

    def fn(x, w, b):
        out = nn.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
        return out, nn.conv_transpose2d(x[0], w, b, stride, padding, output_padding, groups, dilation)
    compiled = check(fn, x, w, b, rtol=1e-4, atol=1e-4)
    got, single = compiled(x, w, b)
    size = [(x.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (w.shape[2 + d] - 1)
            + output_padding[d] + 1 for d in (0, 1)]
    per_x, per_w = x.shape[1] // groups, w.shape[0] // groups
    parts = []
    for i in range(groups):
        xs = np.zeros((2, w.shape[1], *size))
        parts.append(loops_grads(x[:, i * per_x:(i + 1) * per_x].astype(np.float64), xs,
                                 w[i * per_w:(i + 1) * per_w].astype(np.float64), stride, padding, dilation)[0])
    want = np.concatenate(parts, 1) + b.reshape(1, -1, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(single, want[0], rtol=1e-4, atol=1e-4)


def test_unbatched_conv2d_is_a_batch_of_one(check):
    x, w = sample((3, 7, 6), seed=116), sample((4, 3, 3, 3), seed=117)
    compiled = check(lambda x, w: nn.conv2d(x, w, padding=1), x, w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compiled(x, w), loops_conv(x[None], w, (1, 1), (1, 1), (1, 1))[0], rtol=1e-4, atol=1e-4)


def test_conv_block_fuses_its_epilogue_but_not_a_padded_read():
    """conv + bias + relu is one kernel (a reduction with its pointwise consumer); the second
    convolution reads the first block's output through a guard, so it runs in a kernel of its own."""
    x, w1, w2 = sample((2, 3, 8, 8), seed=99), sample((4, 3, 3, 3), seed=100), sample((4, 4, 3, 3), seed=101)
    compiled = stax.compile(lambda x, w1, w2: nn.conv2d(nn.conv2d(x, w1, padding=1).relu(), w2, padding=1), x, w1, w2)
    assert len(compiled.fusion.partition) == 2
    reasons = {p.reason.split(":")[0] for p in compiled.fusion_problem.forbidden}
    assert "guarded_read" in reasons
    np.testing.assert_allclose(compiled(x, w1, w2), loops_conv(np.maximum(loops_conv(x, w1, (1, 1), (1, 1), (1, 1)), 0),
                                                                w2, (1, 1), (1, 1), (1, 1)), rtol=1e-4, atol=1e-4)


def test_modeled_traffic_equals_counted_traffic_of_a_strided_convolution():
    """Kernels that touch every element of their buffers count what Definition 7.3 models; the
    input gradient's phase kernels read only their taps of the weight (``w[:, :, r::2, c::2]``)
    and the gradient rows their phase reaches, so they count less than the whole buffers."""
    x, w, g = sample((2, 3, 9, 8), seed=102), sample((4, 3, 3, 3), seed=103), sample((2, 4, 5, 4), seed=104)
    compiled = stax.compile(lambda x, w, g: (nn.conv2d(x, w, stride=2, padding=1),
                                             nn.conv2d_input_grad(g, w, x.shape, 2, 1)), x, w, g)
    rows = count_traffic(compiled, x, w, g)
    assert len(rows) == 6, rows  # the convolution, four phases, their interleaving sum
    whole = [rows[0], rows[-1]]
    assert all((r.counted_read, r.counted_write) == (r.modeled_read, r.modeled_write) for r in whole), rows
    phases = rows[1:-1]
    assert all(r.counted_write == r.modeled_write and 0 < r.counted_read < r.modeled_read for r in phases), rows


@pytest.mark.parametrize("call, error, message", [
    (lambda x, w: nn.conv2d(x, w[:, :2]), ShapeError, r"the input has 3 channels, the weight .* expects 2"),
    (lambda x, w: nn.conv2d(x, w[:3, :1], groups=2), ShapeError, r"groups=2 expects 2 and 3 output channels divisible"),
    (lambda x, w: nn.conv2d(x.int(), w.int()), UnsupportedError, r"float32 or both float64, got int32"),
    (lambda x, w: nn.conv2d(x, w, stride=0), ShapeError, r"stride \(0, 0\) .* must be positive"),
    (lambda x, w: nn.conv2d(x[:, :, :2], w), ShapeError, r"kernel \(3, 3\) .* larger than the padded input"),
    (lambda x, w: nn.conv2d(x[0, 0], w), ShapeError, r"expected a 4-D input"),
    (lambda x, w: nn.pad(x, (1, 2, 3)), ShapeError, r"\(before, after\) pairs"),
    (lambda x, w: nn.pad(x, (0, 0, -3, -3)), ShapeError, r"negative size"),
    (lambda x, w: nn.pad(x, (1, 1), mode="mirror"), UnsupportedError, r"mode 'mirror'"),
    (lambda x, w: nn.pad(x, (5, 1, 0, 0), mode="reflect"), ShapeError, r"reflect padding \(5, 1\) .* at most 4"),
    (lambda x, w: x.unfold(2, 6, 1), ShapeError, r"unfold: size 6 and step 1 do not fit"),
    (lambda x, w: nn.cat([x, w], 1), ShapeError, r"cat: shapes .* must match except in dimension 1"),
    (lambda x, w: nn.cat([]), ShapeError, r"cat: expected a non-empty list"),
    (lambda x, w: nn.cat([x.sum(), w.sum()]), ShapeError, r"cat: zero-dimensional tensors"),
])
def test_bad_convolutions_and_pads_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        stax.trace(call, sample((2, 3, 5, 5)), sample((4, 3, 3, 3)))


def test_a_replicated_pointwise_input_is_materialized_once(check):
    """A weight gradient reads each element of the output gradient once per input channel and
    tap: an inlined pointwise producer (the backward of batch norm and ReLU) would be evaluated
    4 x 9 times per element in the direct form, so the lowering materializes it; a row's statistics broadcast along
    the row stay inlined (the C++ compiler hoists them out of the inner loop)."""
    def weight_grad_of_a_chain(g, x, scale, shift):
        grad = (g * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)).relu() * g
        return nn.conv2d_weight_grad(grad, x, (8, 4, 3, 3), padding=1, form=ConvForm.DIRECT)

    def normalize_rows(x):
        centered = x - x.mean(-1, keepdim=True)
        return centered * ((centered * centered).mean(-1, keepdim=True) + 1e-5).rsqrt()
    g, x = sample((2, 8, 64, 64), seed=70), sample((2, 4, 64, 64), seed=71)
    scale, shift = sample((8,), seed=72), sample((8,), seed=73)
    conv = check(weight_grad_of_a_chain, g, x, scale, shift, rtol=1e-4, atol=1e-3)
    assert [b.shape for b in conv.program.buffers if b.reduction is None] == [g.shape]
    rows = check(normalize_rows, sample((256, 128), seed=74), rtol=1e-4, atol=1e-4)
    assert [b.shape for b in rows.program.buffers if b.reduction is None] == [(256, 128)]


def test_a_shared_dilated_read_is_materialized_once(check):
    """A strided convolution's input gradient interleaves its phases through pad's interior zeros
    (guards with a modulo, which no vector tests lane by lane); read by two consumers it is
    materialized once, so only the kernel that interleaves needs the interleaved form and the
    reduction over it is a vector loop."""
    def fn(g, w, x):
        gx = nn.conv2d_input_grad(g, w, x.shape, 2, 1)
        return (gx * x).sum((0, 2, 3)), gx.relu() + x
    g, w, x = sample((2, 4, 16, 16), seed=90), sample((4, 3, 3, 3), seed=91), sample((2, 3, 32, 32), seed=92)
    compiled = check(fn, g, w, x, rtol=1e-4, atol=1e-4)
    forms = [k.form for k in compiled.block_kernels]
    assert sorted(forms) == ["interleaved"] + ["outer-vector"] * 3 + ["vector"], forms
