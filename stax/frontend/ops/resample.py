"""Separable 2-D resampling for traced programs: adaptive average pooling (torch's
``adaptive_avg_pool2d``) and nearest and bilinear upsampling (``interpolate``, ``nn.Upsample``),
with their gradients, composed of graph ops; and adaptive max pooling, over the same windows.

Each is a weight matrix over rows and one over columns, applied to every plane::

    out[n, c, i, j] = sum over h, w of rows[i, h] * x[n, c, h, w] * cols[j, w]

(a sum over ``w``, then over ``h``), and its gradient is the same sum with the matrices
transposed.  The weights are torch's, computed in the input's dtype from the output positions:
an adaptive window ``[floor(i * H / OH), ceil((i + 1) * H / OH))`` (its 0/1 mask, the sum then
divided by its size), the nearest source ``min(floor(i * scale), H - 1)``, the two bilinear
neighbours of ``(i + 0.5) * scale - 0.5`` (or ``i * (H - 1) / (OH - 1)`` with ``align_corners``)
and their distances.  Two common cases take no matrix: an adaptive pooling whose windows tile the
input is ``stax.frontend.ops.pooling.avg_pool2d``, and a nearest upsampling by whole factors repeats each
element (an ``expand``), its gradient the sum over each block.
"""
from __future__ import annotations

from typing import Sequence

from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import where
from stax.frontend.ops import pooling
from stax.frontend.ops.gather import iota
from stax.frontend.tensor import Tensor


def _positions(x: Tensor, n: int, dtype: str) -> Tensor:
    return iota(x, n).to(dtype)


def _mask(x: Tensor, index: Tensor, size: int) -> Tensor:
    """(len(index), size) in ``x``'s dtype: 1 where column ``h`` is ``index[i]``."""
    return where(index.reshape(-1, 1) == _positions(x, size, "int64").reshape(1, size), 1.0, 0.0).to(x.dtype)


def _separable(x: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """``rows @ plane @ cols^T`` of every (H, W) plane of ``x`` (N, C, H, W)."""
    across = (x.unsqueeze(-2) * cols).sum(-1)  # (N, C, H, OW)
    return (across.unsqueeze(2) * rows.reshape(rows.shape + (1,))).sum(3)


def _separable_adjoint(grad: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """The gradient of ``_separable`` with respect to its ``x``: ``rows^T @ plane @ cols`` of every
    (OH, OW) plane of ``grad``."""
    across = (grad.unsqueeze(-1) * cols).sum(-2)  # (N, C, OH, W)
    return (across.unsqueeze(3) * rows.reshape(rows.shape + (1,))).sum(2)


def _check(op: str, x_shape: Sequence[int], out: Sequence[int], dtype: str) -> None:
    if len(x_shape) != 4 or len(out) != 2 or min(out) < 1:
        raise ShapeError(f"{op}: expected an (N, C, H, W) input and a positive (OH, OW) output size, got "
                         f"{tuple(x_shape)} and {tuple(out)}")
    pooling.require_floating(op, dtype)


# --- adaptive average pooling ----------------------------------------------------------------
def _adaptive_windows(x: Tensor, n: int, out: int) -> tuple[Tensor, Tensor]:
    """The 0/1 mask (out, n) of the adaptive windows along a dim of ``n``, and each window's size (out,)."""
    i = _positions(x, out, "int64")
    start, end = i * n // out, ((i + 1) * n + out - 1) // out
    h = _positions(x, n, "int64").reshape(1, n)
    inside = (h >= start.reshape(-1, 1)) & (h < end.reshape(-1, 1))
    return where(inside, 1.0, 0.0).to(x.dtype), end - start


def _tiling_kernel(x_shape: Sequence[int], out: Sequence[int]) -> tuple[int, int] | None:
    """The window of an adaptive pooling whose windows tile the input, else None."""
    if all(x_shape[2 + d] % out[d] == 0 for d in (0, 1)):
        return x_shape[2] // out[0], x_shape[3] // out[1]
    return None


def adaptive_avg_pool2d(x: Tensor, output_size: Sequence[int]) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool2d of an (N, C, H, W) input (None keeps a size)."""
    out = tuple(x.shape[2 + d] if s is None else int(s) for d, s in enumerate(output_size))
    _check("adaptive_avg_pool2d", x.shape, out, x.dtype)
    kernel = _tiling_kernel(x.shape, out)
    if kernel is not None:  # windows that tile the input
        return pooling.avg_pool2d(x, kernel)
    (rows, row_sizes), (cols, col_sizes) = (_adaptive_windows(x, x.shape[2 + d], out[d]) for d in (0, 1))
    return _separable(x, rows, cols) / (row_sizes.reshape(-1, 1) * col_sizes.reshape(1, -1))


def adaptive_avg_pool2d_backward(grad: Tensor, x: Tensor) -> Tensor:
    """ATen's ``_adaptive_avg_pool2d_backward``: each output's gradient over its window's size,
    added at every input position of its window."""
    out = tuple(grad.shape[2:])
    _check("adaptive_avg_pool2d_backward", x.shape, out, x.dtype)
    kernel = _tiling_kernel(x.shape, out)
    if kernel is not None:
        return pooling.avg_pool2d_backward(grad, x, kernel, kernel, 0, False, True, None)
    (rows, row_sizes), (cols, col_sizes) = (_adaptive_windows(x, x.shape[2 + d], out[d]) for d in (0, 1))
    return _separable_adjoint(grad / (row_sizes.reshape(-1, 1) * col_sizes.reshape(1, -1)), rows, cols)


# --- adaptive max pooling --------------------------------------------------------------------
#: the most (input position, output point) pairs a plane that adaptive max pooling's gradient compares
MAX_SPREAD = 1 << 22


def _inside(x: Tensor, n: int, out: int) -> Tensor:
    """(out, n) bool: whether position ``h`` lies in output ``i``'s adaptive window."""
    return _adaptive_windows(x, n, out)[0] > 0


def _first_max(x: Tensor, inside: Tensor) -> tuple[Tensor, Tensor]:
    """Along the last dim of ``x`` (..., n), read as (..., 1, n) against the window mask
    ``inside`` (out, n): each window's maximum (NaN if it holds one) and its first position
    holding it (or the first NaN), (..., out) each."""
    n = x.shape[-1]
    row = x.unsqueeze(-2)
    values = where(inside, row, float("-inf")).amax(-1)
    hit = inside & ((row == values.unsqueeze(-1)) | (row != row))
    return values, where(hit, _positions(x, n, "int64"), n).amin(-1)


def adaptive_max_pool2d(x: Tensor, output_size: Sequence[int]) -> tuple[Tensor, Tensor]:
    """ATen's ``adaptive_max_pool2d`` of an (N, C, H, W) input: each window's maximum and its
    position ``h * W + w`` (the first maximum in row-major order, or the first NaN), as
    ``stax.frontend.ops.pooling.max_pool2d`` gives them.  Windows that tile the input are that pooling.
    Others are separable: the maximum of each row's column windows and its first column, then
    the maximum of those over the row windows and the first row holding it, whose first column
    is then the position's."""
    out = tuple(x.shape[2 + d] if s is None else int(s) for d, s in enumerate(output_size))
    _check("adaptive_max_pool2d", x.shape, out, x.dtype)
    kernel = _tiling_kernel(x.shape, out)
    if kernel is not None:
        return pooling.max_pool2d(x, kernel, return_indices=True)
    h, w = x.shape[2:]
    across, column = _first_max(x, _inside(x, w, out[1]))  # (N, C, H, OW)
    values, row = _first_max(across.transpose(2, 3), _inside(x, h, out[0]))  # (N, C, OW, OH)
    values, row = values.transpose(2, 3), row.transpose(2, 3)
    rows = _positions(x, h, "int64").reshape(h, 1)
    column_at_row = where(rows == row.unsqueeze(3), column.unsqueeze(2), 0).sum(3)  # (N, C, OH, OW)
    return values, row * w + column_at_row


def adaptive_max_pool2d_backward(grad: Tensor, x: Tensor, indices: Tensor) -> Tensor:
    """ATen's ``adaptive_max_pool2d_backward``: each output point's gradient added at the input
    position its index names; compared with every position, up to :data:`MAX_SPREAD` position
    and output pairs a plane when the windows do not tile the input."""
    out = tuple(grad.shape[2:])
    _check("adaptive_max_pool2d_backward", x.shape, out, x.dtype)
    kernel = _tiling_kernel(x.shape, out)
    if kernel is not None:
        return pooling.max_pool2d_backward(grad, x, kernel, kernel, 0, 1, False, indices)
    n, c, h, w = x.shape
    if h * w * out[0] * out[1] > MAX_SPREAD:
        raise UnsupportedError(f"adaptive_max_pool2d_backward: the gradient of a pooling from {(h, w)} to {out} "
                               f"compares {h * w * out[0] * out[1]} position and output pairs a plane, over stax's "
                               f"limit of {MAX_SPREAD}; output sizes that divide the input's take the max pooling's")
    named = indices.reshape(n, c, 1, out[0] * out[1]) == _positions(x, h * w, "int64").reshape(h * w, 1)
    return where(named, grad.reshape(n, c, 1, out[0] * out[1]), 0.0).sum(-1).reshape(n, c, h, w)


# --- upsampling --------------------------------------------------------------------------------
def _scale(n: int, out: int, scale_factor: float | None, align_corners: bool = False) -> float:
    """torch's source-per-output scale along a dim (``area_pixel_compute_scale``)."""
    if align_corners:
        return (n - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / scale_factor if scale_factor else n / out


def _nearest(x: Tensor, n: int, out: int, scale_factor: float | None) -> Tensor:
    """The (out, n) one-hot matrix of each output's nearest source, ``min(floor(i * scale), n - 1)``."""
    source = (_positions(x, out, x.dtype) * _scale(n, out, scale_factor)).to("int64").clamp(max=n - 1)
    return _mask(x, source, n)


def _bilinear(x: Tensor, n: int, out: int, align_corners: bool, scale_factor: float | None) -> Tensor:
    """The (out, n) weights of each output's two neighbours along a dim."""
    scale = _scale(n, out, scale_factor, align_corners)
    i = _positions(x, out, x.dtype)
    source = i * scale if align_corners else ((i + 0.5) * scale - 0.5).clamp(min=0.0)
    low = source.to("int64")
    high = (low + 1).clamp(max=n - 1)
    far = (source - low.to(x.dtype)).reshape(-1, 1)
    return _mask(x, low, n) * (1.0 - far) + _mask(x, high, n) * far


def _whole_factors(x_shape: Sequence[int], out: Sequence[int], scales: Sequence[float | None]) -> tuple[int, int] | None:
    """The whole factors of a nearest upsampling that repeats each element, else None."""
    factors = tuple(out[d] // x_shape[2 + d] for d in (0, 1))
    exact = all(out[d] == factors[d] * x_shape[2 + d] and scales[d] in (None, float(factors[d])) for d in (0, 1))
    return factors if exact and min(factors) >= 1 else None


def _plan(op: str, x: Tensor, output_size: Sequence[int] | None, scales: Sequence[float | None]) -> tuple[int, int]:
    if output_size is None:
        if any(s is None for s in scales):
            raise ShapeError(f"{op}: give output_size or both scale factors")
        return tuple(int(x.shape[2 + d] * scales[d]) for d in (0, 1))
    return tuple(int(s) for s in output_size)


def upsample_nearest2d(x: Tensor, output_size: Sequence[int] | None, scales_h: float | None = None,
                       scales_w: float | None = None) -> Tensor:
    """ATen's ``upsample_nearest2d`` (``interpolate(mode='nearest')``)."""
    out = _plan("upsample_nearest2d", x, output_size, (scales_h, scales_w))
    _check("upsample_nearest2d", x.shape, out, x.dtype)
    factors = _whole_factors(x.shape, out, (scales_h, scales_w))
    if factors is not None:
        n, c, h, w = x.shape
        return x.reshape(n, c, h, 1, w, 1).expand(n, c, h, factors[0], w, factors[1]).reshape(n, c, *out)
    rows, cols = (_nearest(x, x.shape[2 + d], out[d], (scales_h, scales_w)[d]) for d in (0, 1))
    return _separable(x, rows, cols)


def upsample_nearest2d_backward(grad: Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                scales_h: float | None = None, scales_w: float | None = None) -> Tensor:
    """ATen's ``upsample_nearest2d_backward``: each input's gradient the sum of its outputs'."""
    out = tuple(int(s) for s in output_size)
    _check("upsample_nearest2d_backward", input_size, out, grad.dtype)
    factors = _whole_factors(input_size, out, (scales_h, scales_w))
    if factors is not None:
        n, c, h, w = input_size
        return grad.reshape(n, c, h, factors[0], w, factors[1]).sum((3, 5))
    rows, cols = (_nearest(grad, input_size[2 + d], out[d], (scales_h, scales_w)[d]) for d in (0, 1))
    return _separable_adjoint(grad, rows, cols)


def upsample_bilinear2d(x: Tensor, output_size: Sequence[int] | None, align_corners: bool,
                        scales_h: float | None = None, scales_w: float | None = None) -> Tensor:
    """ATen's ``upsample_bilinear2d`` (``interpolate(mode='bilinear')``)."""
    out = _plan("upsample_bilinear2d", x, output_size, (scales_h, scales_w))
    _check("upsample_bilinear2d", x.shape, out, x.dtype)
    rows, cols = (_bilinear(x, x.shape[2 + d], out[d], align_corners, (scales_h, scales_w)[d]) for d in (0, 1))
    return _separable(x, rows, cols)


def upsample_bilinear2d_backward(grad: Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                 align_corners: bool, scales_h: float | None = None,
                                 scales_w: float | None = None) -> Tensor:
    """ATen's ``upsample_bilinear2d_backward``: each output's gradient shared by its four
    neighbours by their weights."""
    out = tuple(int(s) for s in output_size)
    _check("upsample_bilinear2d_backward", input_size, out, grad.dtype)
    rows, cols = (_bilinear(grad, input_size[2 + d], out[d], align_corners, (scales_h, scales_w)[d]) for d in (0, 1))
    return _separable_adjoint(grad, rows, cols)
