"""2-D pooling (stax.frontend.ops.pooling): max_pool2d with its indices, avg_pool2d and both gradients, against
loops over numpy written here (every window, every tap) and, where torch is installed, against
torch's own functions and modules (forward and training step, through the torch front end)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import stax
from stax.frontend.ops import pooling
from stax.errors import ShapeError, UnsupportedError

from tests.helpers import assert_matches_torch

#: (kernel, stride, padding, dilation, ceil_mode): overlapping and disjoint windows, padding,
#: dilation, a last window that ceil mode adds
GEOMETRIES = [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 1, 1, 2, False), (3, 2, 0, 1, True),
              ((2, 3), (1, 2), (1, 0), 1, True), (2, 2, 0, 2, False)]  # the last: stride = kernel, but dilated
#: those without dilation, which avg_pool2d does not take
AVG_GEOMETRIES = [g for g in GEOMETRIES if g[3] == 1]


def _pairs(*values):
    return [v if isinstance(v, tuple) else (v, v) for v in values]


def _loops(x: np.ndarray, kernel, stride, padding, dilation, ceil_mode, avg=False, count_include_pad=True,
           divisor_override=None):
    """Pooling by loops over windows: (values, indices) for the max, values for the average."""
    kernel, padding, dilation = _pairs(kernel, padding, dilation)
    stride = kernel if stride is None else _pairs(stride)[0]
    n, c, h, w = x.shape
    size = []
    for d, extent in enumerate((h, w)):
        out = (extent + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1 + (stride[d] - 1 if ceil_mode else 0)) \
            // stride[d] + 1
        size.append(out - 1 if ceil_mode and (out - 1) * stride[d] >= extent + padding[d] else out)
    values, indices = np.zeros((n, c, *size), x.dtype), np.zeros((n, c, *size), np.int64)
    for i, j in itertools.product(range(size[0]), range(size[1])):
        r0, c0 = i * stride[0] - padding[0], j * stride[1] - padding[1]
        taps = [(r0 + a * dilation[0], c0 + b * dilation[1]) for a in range(kernel[0]) for b in range(kernel[1])]
        inside = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
        window = np.stack([x[:, :, r, q] for r, q in inside], -1)
        if avg:
            if divisor_override:
                divisor = divisor_override
            elif count_include_pad:
                divisor = (min(r0 + kernel[0], h + padding[0]) - r0) * (min(c0 + kernel[1], w + padding[1]) - c0)
            else:
                divisor = len(inside)
            values[:, :, i, j] = window.sum(-1) / divisor
        else:
            first = np.where(np.isnan(window).any(-1), np.isnan(window).argmax(-1), window.argmax(-1))
            values[:, :, i, j] = np.take_along_axis(window, first[..., None], -1)[..., 0]
            indices[:, :, i, j] = np.array([inside[k][0] * w + inside[k][1] for k in first.ravel()]).reshape(first.shape)
    return values if avg else (values, indices)


def _spread_loops(grad: np.ndarray, x_shape, windows_of) -> np.ndarray:
    """The gradient of a pooling: each output point's gradient added at the input positions
    ``windows_of(n, c, i, j)`` gives with their weights."""
    out = np.zeros(x_shape, np.float64)
    for n, c, i, j in itertools.product(*(range(s) for s in grad.shape)):
        for (r, q), weight in windows_of(n, c, i, j):
            out[n, c, r, q] += grad[n, c, i, j] * weight
    return out


RNG = np.random.default_rng(21)
X = RNG.standard_normal((2, 3, 9, 8), dtype=np.float32)
X[0, 0, 2, 2:5] = 7.0  # ties: the first maximum's index
X[1, 2, 4, 4] = np.nan


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_max_pool_values_and_indices_are_every_windows_first_maximum(geometry):
    compiled = stax.compile(lambda x: pooling.max_pool2d(x, *geometry, return_indices=True), X)
    values, indices = compiled(X)
    want_values, want_indices = _loops(X, *geometry)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    assert indices.dtype == np.int64


@pytest.mark.parametrize("geometry", AVG_GEOMETRIES)
@pytest.mark.parametrize("count_include_pad, divisor_override", [(True, None), (False, None), (True, 5)])
def test_avg_pool_is_every_windows_sum_over_torchs_divisor(geometry, count_include_pad, divisor_override):
    kernel, stride, padding, _, ceil_mode = geometry
    got = stax.compile(lambda x: pooling.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                                                    divisor_override), X)(X)
    want = _loops(X, kernel, stride, padding, 1, ceil_mode, True, count_include_pad, divisor_override)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("fusion", ["greedy", "none", "cpsat"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_max_pool_gradient_goes_to_each_windows_index(check, geometry, fusion):
    x = np.nan_to_num(X)
    _, indices = _loops(x, *geometry)
    grad = RNG.standard_normal(indices.shape, dtype=np.float32)
    compiled = check(lambda g, a, ix: pooling.max_pool2d_backward(g, a, *geometry, ix), grad, x, indices,
                     rtol=1e-6, atol=1e-6, fusion=fusion)
    want = _spread_loops(grad, x.shape, lambda n, c, i, j: [(divmod(int(indices[n, c, i, j]), x.shape[3]), 1.0)])
    np.testing.assert_allclose(compiled(grad, x, indices), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("geometry", AVG_GEOMETRIES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_gradient_is_shared_over_the_window(check, geometry, count_include_pad):
    kernel, stride, padding, _, ceil_mode = geometry
    averaged = _loops(X, kernel, stride, padding, 1, ceil_mode, True, count_include_pad)
    grad = RNG.standard_normal(averaged.shape, dtype=np.float32)
    compiled = check(lambda g, a: pooling.avg_pool2d_backward(g, a, kernel, stride, padding, ceil_mode,
                                                              count_include_pad, None), grad, X, rtol=1e-5, atol=1e-6)
    # the average is linear: the gradient at input (r, q) is the output gradient times the
    # average of a plane that is 1 at (r, q) and 0 elsewhere
    want = np.zeros(X.shape, np.float64)
    for r, q in itertools.product(range(X.shape[2]), range(X.shape[3])):
        probe = np.zeros((1, 1) + X.shape[2:], np.float64)
        probe[0, 0, r, q] = 1.0
        weights = _loops(probe, kernel, stride, padding, 1, ceil_mode, True, count_include_pad)
        want[:, :, r, q] = (weights * grad.astype(np.float64)).sum((2, 3))
    np.testing.assert_allclose(compiled(grad, X), want, rtol=1e-5, atol=1e-6)


def test_unbatched_inputs_are_pooled_as_one_image():
    got = stax.compile(lambda x: pooling.max_pool2d(x, 2, return_indices=True), X[0])(X[0])
    want = _loops(X[:1], 2, None, 0, 1, False)
    np.testing.assert_array_equal(got[0], want[0][0])
    np.testing.assert_array_equal(got[1], want[1][0])
    got = stax.compile(lambda x: pooling.avg_pool2d(x, 3, 2, 1), X[0])(X[0])
    np.testing.assert_allclose(got, _loops(X[:1], 3, 2, 1, 1, False, True)[0], rtol=1e-6, equal_nan=True)


def test_bad_pooling_is_named():
    with pytest.raises(ShapeError, match="padding .* at most half the kernel_size"):
        stax.compile(lambda x: pooling.max_pool2d(x, 2, padding=2), X)
    with pytest.raises(ShapeError, match="too small for kernel_size"):
        stax.compile(lambda x: pooling.avg_pool2d(x, 10), X)
    with pytest.raises(UnsupportedError, match="floating-point input, got int64"):
        stax.compile(lambda x: pooling.max_pool2d(x, 2), np.nan_to_num(X).astype(np.int64))
    with pytest.raises(ShapeError, match="kernel_size .* must be positive"):
        stax.compile(lambda x: pooling.avg_pool2d(x, 0), X)
    with pytest.raises(ShapeError, match="must both be the output's shape"):
        stax.compile(lambda g, x, ix: pooling.max_pool2d_backward(g, x, 2, None, 0, 1, False, ix),
                     X[:, :, :3, :3], X, X[:, :, :3, :3].astype(np.int64))
    with pytest.raises(ShapeError, match="divisor_override must not be zero"):
        stax.compile(lambda x: pooling.avg_pool2d(x, 2, divisor_override=0), X)


torch_cases = [("max", g) for g in GEOMETRIES] + [("avg", g) for g in AVG_GEOMETRIES]


@pytest.mark.parametrize("kind, geometry", torch_cases)
def test_torch_modules_forward_and_training_step_match_torch(kind, geometry):
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_module, import_training_step
    kernel, stride, padding, dilation, ceil_mode = geometry
    pool = torch.nn.MaxPool2d(kernel, stride, padding, dilation, ceil_mode=ceil_mode) if kind == "max" else \
        torch.nn.AvgPool2d(kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=False)
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), pool)
    x = torch.randn(2, 3, 11, 10)
    for program in (import_module(net, x),
                    import_training_step(net, lambda o, t: torch.nn.functional.mse_loss(o, t), [x],
                                         [torch.randn_like(net(x))])):
        assert_matches_torch(program, rtol=1e-5, atol=1e-6)


def test_torch_max_pool_indices_match_torch():
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_function
    x = torch.from_numpy(X.copy())
    program = import_function(lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1, return_indices=True), x)
    values, indices = program.compile()(*program.arguments())
    np.testing.assert_array_equal(values, program.expected[0])
    np.testing.assert_array_equal(indices, program.expected[1])


def _unfold_loops(x: np.ndarray, kernel, dilation, padding, stride) -> np.ndarray:
    """torch's im2col written as loops: column l holds window l's taps, channel by channel."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    out = np.zeros((n, c * kernel[0] * kernel[1], oh * ow), x.dtype)
    for k, a, b, i, j in itertools.product(range(c), range(kernel[0]), range(kernel[1]), range(oh), range(ow)):
        out[:, (k * kernel[0] + a) * kernel[1] + b, i * ow + j] = \
            padded[:, k, i * stride[0] + a * dilation[0], j * stride[1] + b * dilation[1]]
    return out


#: (kernel, dilation, padding, stride): padding beyond half the kernel is unfold's, not a pooling's
UNFOLDS = [((2, 3), (1, 1), (0, 0), (1, 1)), ((3, 2), (2, 1), (2, 3), (2, 1)), ((1, 1), (1, 1), (0, 1), (3, 2))]


@pytest.mark.parametrize("kernel, dilation, padding, stride", UNFOLDS)
def test_unfold_takes_every_window_and_fold_is_its_adjoint(kernel, dilation, padding, stride):
    x = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)
    columns = stax.compile(lambda t: pooling.unfold(t, kernel, dilation, padding, stride), x)(x)
    np.testing.assert_array_equal(columns, _unfold_loops(x, kernel, dilation, padding, stride))
    # fold is unfold's adjoint: <unfold(x), y> == <x, fold(y)> for every y
    y = RNG.standard_normal(columns.shape).astype(np.float32)
    folded = stax.compile(lambda t: pooling.fold(t, (7, 6), kernel, dilation, padding, stride), y)(y)
    np.testing.assert_allclose(float((columns.astype(np.float64) * y).sum()), float((x.astype(np.float64) * folded).sum()),
                               rtol=1e-5)
    with pytest.raises(ShapeError, match="columns, but windows of kernel_size"):
        stax.trace(lambda t: pooling.fold(t, (12, 6), kernel, dilation, padding, stride), y)


def test_torch_unfold_and_fold_match_torch():
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_module, import_training_step
    torch.manual_seed(6)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.Unfold(3, padding=1, stride=2),
                              torch.nn.Fold((6, 7), 2))
    x = torch.randn(2, 3, 9, 11)
    for program in (import_module(net, x),
                    import_training_step(net, lambda o: (o ** 2).mean(), [x])):
        assert_matches_torch(program, rtol=1e-5, atol=1e-5)


def _avg_loops_3d(x: np.ndarray, kernel, stride, padding, ceil_mode, count_include_pad) -> np.ndarray:
    """avg_pool3d by loops over windows, with torch's divisor (the window clipped to the padded
    input, or to the input without count_include_pad)."""
    extents = x.shape[2:]
    size = []
    for d, extent in enumerate(extents):
        out = (extent + 2 * padding[d] - kernel[d] + (stride[d] - 1 if ceil_mode else 0)) // stride[d] + 1
        size.append(out - 1 if ceil_mode and (out - 1) * stride[d] >= extent + padding[d] else out)
    values = np.zeros(x.shape[:2] + tuple(size), np.float64)
    for point in itertools.product(*(range(s) for s in size)):
        starts = [point[d] * stride[d] - padding[d] for d in range(3)]
        padded_ends = [min(starts[d] + kernel[d], extents[d] + padding[d]) for d in range(3)]
        lo = [max(s, 0) for s in starts]
        hi = [min(e, extents[d]) for d, e in enumerate(padded_ends)]
        window = x[:, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]].astype(np.float64)
        divisor = np.prod([padded_ends[d] - starts[d] for d in range(3)]) if count_include_pad \
            else np.prod([hi[d] - lo[d] for d in range(3)])
        values[(slice(None), slice(None), *point)] = window.sum((2, 3, 4)) / divisor
    return values


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [((3, 2, 2), (2, 1, 2), (1, 1, 0), True),
                                                                ((2, 3, 1), (1, 2, 1), (0, 1, 0), False)])
def test_avg_pool3d_is_every_windows_mean_and_its_gradient_the_adjoint(kernel, stride, padding, ceil_mode,
                                                                       count_include_pad):
    """avg_pool3d (a pooling of each plane, then of the depth) against loops over 3-D windows, and
    its gradient by the adjoint law <pool(x), g> = <x, pool_backward(g)> (the average is linear)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 6, 5)).astype(np.float32)
    want = _avg_loops_3d(x, kernel, stride, padding, ceil_mode, count_include_pad)
    g = rng.standard_normal(want.shape).astype(np.float32)
    out, gx = stax.compile(lambda a, b: (
        pooling.avg_pool3d(a, kernel, stride, padding, ceil_mode, count_include_pad),
        pooling.avg_pool3d_backward(b, a, kernel, stride, padding, ceil_mode, count_include_pad, None)), x, g)(x, g)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert gx.shape == x.shape
    np.testing.assert_allclose(np.vdot(x.astype(np.float64), gx), np.vdot(want, g.astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [((3, 2, 2), (2, 1, 2), (1, 1, 0), 1, True),
                                                                          (2, None, 0, (2, 1, 1), False)])
def test_max_pool3d_takes_each_windows_first_maximum_and_routes_its_gradient_there(kernel, stride, padding, dilation,
                                                                                  ceil_mode):
    """max_pool3d (each plane's max, then the depth's) against loops over 3-D windows, ties across
    the depth included (the first depth holding the maximum); its gradient adds each output
    point's gradient at the input position its index names."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 2, 8, 6, 5)).astype(np.float32)
    x[0, 1, 3, 2, 2] = x[0, 1, 2, 2, 2] = 9.0  # a tie across the depth: the first depth's index
    k, s, p, dl = (np.broadcast_to(v, 3).tolist() for v in (kernel, kernel if stride is None else stride, padding,
                                                              dilation))
    size = []
    for d, extent in enumerate(x.shape[2:]):
        out = (extent + 2 * p[d] - dl[d] * (k[d] - 1) - 1 + (s[d] - 1 if ceil_mode else 0)) // s[d] + 1
        size.append(out - 1 if ceil_mode and (out - 1) * s[d] >= extent + p[d] else out)
    out_shape = x.shape[:2] + tuple(size)
    want_values, want_indices = np.zeros(out_shape, np.float32), np.zeros(out_shape, np.int64)
    for point in itertools.product(*(range(n) for n in size)):
        taps = [t for t in itertools.product(*(range(n) for n in k))
                if all(0 <= point[d] * s[d] - p[d] + t[d] * dl[d] < x.shape[2 + d] for d in range(3))]
        for n, c in itertools.product(range(2), range(2)):
            values = [x[n, c, *(point[d] * s[d] - p[d] + t[d] * dl[d] for d in range(3))] for t in taps]
            first = int(np.argmax(values))
            where_ = [point[d] * s[d] - p[d] + taps[first][d] * dl[d] for d in range(3)]
            want_values[n, c, *point] = values[first]
            want_indices[n, c, *point] = (where_[0] * x.shape[3] + where_[1]) * x.shape[4] + where_[2]
    g = rng.standard_normal(want_values.shape).astype(np.float32)
    values, indices, gx = stax.compile(lambda a, b: (
        *pooling.max_pool3d(a, kernel, stride, padding, dilation, ceil_mode, return_indices=True),
        pooling.max_pool3d_backward(b, a, kernel, stride, padding, dilation, ceil_mode,
                                    pooling.max_pool3d(a, kernel, stride, padding, dilation, ceil_mode,
                                                       return_indices=True)[1])), x, g)(x, g)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    want_gx = np.zeros(x.shape, np.float64).reshape(2, 2, -1)
    for n, c in itertools.product(range(2), range(2)):
        np.add.at(want_gx[n, c], want_indices[n, c].ravel(), g[n, c].ravel())
    np.testing.assert_allclose(gx, want_gx.reshape(x.shape), rtol=1e-6, atol=1e-6)
