"""Separable resampling (stax.frontend.ops.resample): adaptive average and max pooling and nearest and
bilinear upsampling with their gradients, against loops over numpy written here and the reference of the
traced program, and, where torch is installed, against torch's interpolate and adaptive pooling
(forward and training step through the torch front end)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import stax
from stax.frontend.ops import resample
from stax.errors import ShapeError, UnsupportedError

from tests.helpers import assert_matches_torch

RNG = np.random.default_rng(31)
X = RNG.standard_normal((2, 3, 7, 6), dtype=np.float32)


def _adaptive_loops(x: np.ndarray, out) -> np.ndarray:
    n, c, h, w = x.shape
    result = np.zeros((n, c, *out), np.float64)
    for i, j in itertools.product(range(out[0]), range(out[1])):
        r0, r1 = i * h // out[0], -(-(i + 1) * h // out[0])
        c0, c1 = j * w // out[1], -(-(j + 1) * w // out[1])
        result[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean((2, 3))
    return result


def _nearest_loops(x: np.ndarray, out) -> np.ndarray:
    rows = [min(int(np.float32(i) * np.float32(x.shape[2] / out[0])), x.shape[2] - 1) for i in range(out[0])]
    cols = [min(int(np.float32(j) * np.float32(x.shape[3] / out[1])), x.shape[3] - 1) for j in range(out[1])]
    return x[:, :, rows][:, :, :, cols]


def _bilinear_loops(x: np.ndarray, out, align_corners: bool) -> np.ndarray:
    def neighbours(n: int, m: int, i: int):
        if align_corners:
            src = i * (n - 1) / (m - 1) if m > 1 else 0.0
        else:
            src = max((i + 0.5) * n / m - 0.5, 0.0)
        low = int(src)
        return low, min(low + 1, n - 1), src - low
    result = np.zeros(x.shape[:2] + tuple(out), np.float64)
    for i, j in itertools.product(range(out[0]), range(out[1])):
        r0, r1, fr = neighbours(x.shape[2], out[0], i)
        c0, c1, fc = neighbours(x.shape[3], out[1], j)
        result[:, :, i, j] = ((1 - fr) * ((1 - fc) * x[:, :, r0, c0] + fc * x[:, :, r0, c1])
                              + fr * ((1 - fc) * x[:, :, r1, c0] + fc * x[:, :, r1, c1]))
    return result


def _adaptive_max_loops(x: np.ndarray, out) -> tuple[np.ndarray, np.ndarray]:
    """Each window's maximum and the row-major position of its first maximum (or NaN)."""
    n, c, h, w = x.shape
    values, indices = np.zeros((n, c, *out), x.dtype), np.zeros((n, c, *out), np.int64)
    for b, k, i, j in itertools.product(range(n), range(c), range(out[0]), range(out[1])):
        r0, r1 = i * h // out[0], -(-(i + 1) * h // out[0])
        c0, c1 = j * w // out[1], -(-(j + 1) * w // out[1])
        best = None
        for r, q in itertools.product(range(r0, r1), range(c0, c1)):
            if best is None or np.isnan(x[b, k, r, q]) and not np.isnan(best) or x[b, k, r, q] > best:
                best, indices[b, k, i, j] = x[b, k, r, q], r * w + q
        values[b, k, i, j] = best
    return values, indices


@pytest.mark.parametrize("out", [(3, 2), (4, 4), (7, 6), (1, 5), (5, 4)])
def test_adaptive_max_pooling_takes_each_windows_first_maximum_and_spreads_its_gradient(out):
    x = np.round(X * 2) / 2  # ties
    x[0, 0, 2, 1], x[1, 2] = np.nan, -np.inf  # a NaN, and a plane of -inf
    values, indices = stax.compile(lambda t: resample.adaptive_max_pool2d(t, out), x)(x)
    want_values, want_indices = _adaptive_max_loops(x, out)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    grad = RNG.standard_normal(values.shape).astype(np.float32)
    got = stax.compile(lambda g, t, i: resample.adaptive_max_pool2d_backward(g, t, i), grad, x, indices)(grad, x, indices)
    want = np.zeros(x.shape, np.float64).reshape(2, 3, -1)
    for b, k, o in itertools.product(range(2), range(3), range(out[0] * out[1])):
        want[b, k, indices.reshape(2, 3, -1)[b, k, o]] += grad.reshape(2, 3, -1)[b, k, o]
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("out", [(3, 2), (4, 4), (7, 6), (1, 5), (5, 4)])
def test_adaptive_average_pooling_averages_torchs_windows(check, out):
    compiled = check(lambda x: resample.adaptive_avg_pool2d(x, out), X, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled(X), _adaptive_loops(X, out), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out", [(14, 12), (21, 18), (9, 11), (7, 6), (3, 4)])
def test_nearest_upsampling_takes_each_outputs_source(check, out):
    compiled = check(lambda x: resample.upsample_nearest2d(x, out), X)
    np.testing.assert_array_equal(compiled(X), _nearest_loops(X, out))


@pytest.mark.parametrize("out, align_corners", [((14, 12), False), ((14, 12), True), ((9, 11), False),
                                                ((9, 11), True), ((1, 1), True), ((5, 4), False)])
def test_bilinear_upsampling_mixes_the_two_neighbours(check, out, align_corners):
    compiled = check(lambda x: resample.upsample_bilinear2d(x, out, align_corners), X, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled(X), _bilinear_loops(X, out, align_corners), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("forward, backward", [
    (lambda x: resample.adaptive_avg_pool2d(x, (3, 4)), lambda g, x: resample.adaptive_avg_pool2d_backward(g, x)),
    (lambda x: resample.adaptive_avg_pool2d(x, (7, 3)), lambda g, x: resample.adaptive_avg_pool2d_backward(g, x)),
    (lambda x: resample.upsample_nearest2d(x, (14, 12)),
     lambda g, x: resample.upsample_nearest2d_backward(g, (14, 12), x.shape)),
    (lambda x: resample.upsample_nearest2d(x, (9, 11)),
     lambda g, x: resample.upsample_nearest2d_backward(g, (9, 11), x.shape)),
    (lambda x: resample.upsample_bilinear2d(x, (9, 11), False),
     lambda g, x: resample.upsample_bilinear2d_backward(g, (9, 11), x.shape, False))])
def test_each_gradient_is_the_forwards_transpose(check, forward, backward):
    """<grad, forward(e_k)> for every input basis vector e_k of one plane: the linear map's
    transpose, entry by entry."""
    out_shape = stax.compile(forward, X)(X).shape
    grad = RNG.standard_normal(out_shape, dtype=np.float32)
    got = check(backward, grad, X, rtol=1e-5, atol=1e-5)(grad, X)
    forward_of = stax.compile(forward, X)
    want = np.zeros(X.shape, np.float64)
    for r, q in itertools.product(range(X.shape[2]), range(X.shape[3])):
        basis = np.zeros(X.shape, np.float32)
        basis[:, :, r, q] = 1.0
        want[:, :, r, q] = (forward_of(basis) * grad).sum((2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_resampling_is_named():
    with pytest.raises(ShapeError, match="positive .OH, OW. output size"):
        stax.compile(lambda x: resample.upsample_nearest2d(x, (0, 4)), X)
    with pytest.raises(UnsupportedError, match="floating-point input, got int32"):
        stax.compile(lambda x: resample.adaptive_avg_pool2d(x, (2, 2)), X.astype(np.int32))
    specs = (stax.TensorSpec((1, 1, 99, 98), "float32"), stax.TensorSpec((1, 1, 100, 100), "float32"),
             stax.TensorSpec((1, 1, 99, 98), "int64"))
    with pytest.raises(UnsupportedError, match="over stax's limit of 4194304"):
        stax.trace(resample.adaptive_max_pool2d_backward, *specs)
    with pytest.raises(ShapeError, match="give output_size or both scale factors"):
        stax.compile(lambda x: resample.upsample_bilinear2d(x, None, False, 2.0, None), X)


TORCH_CASES = {
    "nearest_scale_2": lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest"),
    "nearest_size": lambda F, x: F.interpolate(x, size=(9, 11), mode="nearest"),
    "nearest_scale_1_5": lambda F, x: F.interpolate(x, scale_factor=1.5, mode="nearest"),
    "bilinear_scale_2": lambda F, x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "bilinear_size_align": lambda F, x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True),
    "bilinear_down": lambda F, x: F.interpolate(x, size=(4, 3), mode="bilinear"),
    "adaptive_tiling": lambda F, x: F.adaptive_avg_pool2d(x, (7, 3)),
    "adaptive_uneven": lambda F, x: F.adaptive_avg_pool2d(x, (3, 4)),
    "adaptive_keeps_a_size": lambda F, x: F.adaptive_avg_pool2d(x, (None, 4)),
    "adaptive_max_uneven": lambda F, x: F.adaptive_max_pool2d(x, (3, 4)),
    "adaptive_max_tiling": lambda F, x: F.adaptive_max_pool2d(x, (7, 2)),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_torch_forward_and_training_step_match_torch(name):
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_module, import_training_step
    import torch.nn.functional as F

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return TORCH_CASES[name](F, self.conv(x))
    torch.manual_seed(5)
    net, x = Net(), torch.from_numpy(X.copy())
    for program in (import_module(net, x),
                    import_training_step(net, lambda o, t: ((o - t) ** 2).mean(), [x], [torch.randn_like(net(x))])):
        assert_matches_torch(program, rtol=1e-5, atol=1e-5)
