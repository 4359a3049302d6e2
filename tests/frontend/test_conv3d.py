"""3-D convolutions without torch: the forward against numpy's sliding windows, and the two
gradients by the adjoint law <conv3d(x, w), g> = <x, input_grad(g, w)> = <w, weight_grad(g, x)>."""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import stax
from stax.frontend.ops.conv3d import conv3d, conv3d_input_grad, conv3d_weight_grad


def numpy_conv3d(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups: int) -> np.ndarray:
    """The definition, in float64: every output point's window of the padded input times the kernel."""
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    o, per_group, *kernel = w.shape
    reach = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    windows = sliding_window_view(x, reach, axis=(2, 3, 4))[..., ::dilation[0], ::dilation[1], ::dilation[2]]
    windows = windows[:, :, ::stride[0], ::stride[1], ::stride[2]]
    n, c, od, oh, ow = windows.shape[:5]
    grouped = windows.reshape(n, groups, c // groups, od, oh, ow, *kernel)
    wg = w.astype(np.float64).reshape(groups, o // groups, per_group, *kernel)
    return np.einsum("ngcdhwijk,gocijk->ngodhw", grouped, wg).reshape(n, o, od, oh, ow)


CASES = {  # x shape, weight shape, stride, padding, dilation, groups
    "plain": ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    "strided_dilated_grouped": ((1, 4, 9, 7, 8), (6, 2, 3, 2, 3), (2, 1, 2), (2, 0, 1), (2, 1, 1), 2),
    "depthwise_deep_stride": ((2, 3, 8, 5, 5), (3, 1, 2, 3, 1), (3, 2, 1), (0, 1, 0), (1, 1, 1), 3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv3d_matches_the_definition_and_its_gradients_are_its_adjoints(name):
    x_shape, w_shape, stride, padding, dilation, groups = CASES[name]
    rng = np.random.default_rng(len(name))
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    want = numpy_conv3d(x, w, stride, padding, dilation, groups)
    g = rng.standard_normal(want.shape).astype(np.float32)

    def program(x, w, g):
        return (conv3d(x, w, None, stride, padding, dilation, groups),
                conv3d_input_grad(g, w, x.shape, stride, padding, dilation, groups),
                conv3d_weight_grad(g, x, w.shape, stride, padding, dilation, groups))
    out, gx, gw = stax.compile(program, x, w, g)(x, w, g)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert gx.shape == x.shape and gw.shape == w.shape
    inner = float(np.vdot(want, g.astype(np.float64)))
    scale = float(np.abs(want).sum() * np.abs(g).max())
    assert abs(np.vdot(x.astype(np.float64), gx) - inner) <= 1e-5 * scale
    assert abs(np.vdot(w.astype(np.float64), gw) - inner) <= 1e-5 * scale


def test_conv3d_names_what_is_wrong():
    x = np.zeros((1, 2, 2, 4, 4), np.float32)
    with pytest.raises(stax.ShapeError, match="shallower than the kernel"):
        stax.compile(lambda t, w: conv3d(t, w), x, np.zeros((3, 2, 3, 1, 1), np.float32))
    with pytest.raises(stax.ShapeError, match="5-D weight"):
        stax.compile(lambda t, w: conv3d(t, w), x, np.zeros((3, 2, 1, 1), np.float32))
    with pytest.raises(stax.ShapeError, match="triple"):
        stax.compile(lambda t, w: conv3d(t, w, stride=(1, 2)), x, np.zeros((3, 2, 1, 1, 1), np.float32))
