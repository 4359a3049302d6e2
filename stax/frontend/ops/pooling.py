"""Pooling for traced programs: torch.nn.functional's ``max_pool2d`` (with its indices),
``avg_pool2d``, and ``max_pool3d`` and ``avg_pool3d`` (a 2-D pooling of each plane, then one along
the depth), and their gradients (ATen's ``max_pool2d_with_indices_backward``,
``avg_pool2d_backward`` and their 3-D counterparts), and the windows themselves, ``unfold`` and ``fold`` (``im2col`` and
``col2im``), composed of graph ops, so that they fuse and are scheduled like every
other node (spec 7.1) and the reference evaluates them op by op.

A pooled point reduces its window of the padded input (``stax.frontend.ops.nn``'s ``unfold`` windows; the pad
value is -inf for the max, 0 for the average)::

    out[n, c, oh, ow] = max (or sum / divisor) over a, b of pad(x)[n, c, oh * sh + a * dh, ow * sw + b * dw]

The max's index is torch's: the flat position ``ih * W + iw`` in the input plane of the window's
first maximum in row-major tap order (of a NaN where there is one).  The average's divisor is
torch's too: the window's size clipped to the padded input, or to the input itself without
``count_include_pad``, or ``divisor_override``.

A gradient is spread back tap by tap, as a strided convolution's input gradient is (``stax.frontend.ops.nn``):
the output gradient of tap ``(a, b)`` (for the max, only where the index is that tap's position;
for the average, over the divisor) lands at ``(oh * sh - ph + a * dh, ow * sw - pw + b * dw)`` by a
``pad`` with ``s - 1`` interior zeros, and the taps' spreads are summed.  Max pooling windows
that tile the input (stride = kernel, no padding or dilation) spread their gradient in one pass.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import where
from stax.frontend.ops.gather import iota
from stax.frontend.ops.nn import Pair, as_pair, as_triple, conv_windows
from stax.frontend.ops.padding import pad_graph
from stax.frontend.tensor import Tensor


def _geometry(op: str, x_shape: Sequence[int], kernel: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool, pooled: bool = True) -> tuple[Pair, Pair, Pair, Pair, Pair]:
    """(kernel, stride, padding, dilation, output size) of a pooling (or, not ``pooled``, of the
    windows of ``unfold``, which may pad more) of an (N, C, H, W) input, as torch computes them (an
    empty stride is the kernel), or a ShapeError naming what is wrong."""
    kernel = as_pair(kernel, "kernel_size", op)
    stride = as_pair(stride, "stride", op) if stride not in (None, (), []) else kernel
    padding, dilation = as_pair(padding, "padding", op), as_pair(dilation, "dilation", op)
    if min(kernel + stride + dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"{op}: kernel_size {kernel}, stride {stride} and dilation {dilation} must be positive, "
                         f"padding {padding} non-negative")
    if pooled and any(2 * padding[d] > dilation[d] * (kernel[d] - 1) + 1 for d in (0, 1)):
        raise ShapeError(f"{op}: padding {padding} must be at most half the kernel_size {kernel} (times the dilation "
                         f"{dilation}), as torch requires")
    size = []
    for d in (0, 1):
        n, span = x_shape[2 + d], dilation[d] * (kernel[d] - 1) + 1
        out = (n + 2 * padding[d] - span + (stride[d] - 1 if ceil_mode else 0)) // stride[d] + 1
        if ceil_mode and (out - 1) * stride[d] >= n + padding[d]:  # the last window starts in the input or its left pad
            out -= 1
        size.append(out)
    if min(size) < 1:
        raise ShapeError(f"{op}: the input {tuple(x_shape[2:])} is too small for kernel_size {kernel} with padding "
                         f"{padding} and dilation {dilation} (output size {tuple(size)})")
    return kernel, stride, padding, dilation, (size[0], size[1])


def require_floating(op: str, dtype: str) -> None:
    """Refuse a pooling or resampling of a non-float input, as torch does, saying what to do."""
    if not dtypes.is_floating(dtype):
        raise UnsupportedError(f"{op}: expected a floating-point input, got {dtype}; cast with .float() first")


def _batched(x: Tensor, op: str) -> Tensor:
    if x.ndim not in (3, 4):
        raise ShapeError(f"{op}: expected a 4-D input (N, C, H, W) or a 3-D one (C, H, W), got shape {x.shape}")
    require_floating(op, x.dtype)
    return x if x.ndim == 4 else x.unsqueeze(0)


def _padded_windows(x: Tensor, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, size: Pair,
                    value: float) -> Tensor:
    """(N, C, OH, OW, kH * kW): each output point's window of ``x`` padded with ``value``."""
    high = [(size[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1 - x.shape[2 + d] - padding[d]
            for d in (0, 1)]
    padded = pad_graph(x, [0, 0, *padding], [0, 0, *high], [0] * 4, value)
    windows = conv_windows(padded, kernel, stride, dilation)
    return windows.reshape(windows.shape[:4] + (kernel[0] * kernel[1],))


def _tap_starts(x: Tensor, size: Pair, stride: Pair, offset: Pair) -> tuple[Tensor, Tensor]:
    """The input row of each output row and column of each output column under a tap that sits
    ``offset`` from the window's corner: ``o * s + offset``, as (OH, 1) and (1, OW) int64."""
    return tuple((iota(x, size[d]).to("int64") * stride[d] + offset[d]).reshape((size[0], 1) if d == 0 else (1, size[1]))
                 for d in (0, 1))


def _spread(grad: Tensor, input_shape: Sequence[int], kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
            tap_gradient) -> Tensor:
    """The sum over the taps ``(a, b)`` of ``tap_gradient(a * kW + b, offset)`` (the output gradient
    that tap passes back, (N, C, OH, OW)) placed at the input positions it read."""
    total = None
    for a, b in itertools.product(range(kernel[0]), range(kernel[1])):
        offset = (a * dilation[0] - padding[0], b * dilation[1] - padding[1])
        high = [input_shape[2 + d] - 1 - (grad.shape[2 + d] - 1) * stride[d] - offset[d] for d in (0, 1)]
        placed = pad_graph(tap_gradient(a * kernel[1] + b, offset), [0, 0, *offset], [0, 0, *high],
                            [0, 0, stride[0] - 1, stride[1] - 1], 0)
        total = placed if total is None else total + placed
    return total


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool2d, with the int64 indices torch returns when ``return_indices``."""
    batched = _batched(x, "max_pool2d")
    kernel, stride, padding, dilation, size = _geometry("max_pool2d", batched.shape, kernel_size, stride, padding,
                                                        dilation, ceil_mode)
    windows = _padded_windows(batched, kernel, stride, padding, dilation, size, float("-inf"))
    values = windows.amax(-1)
    if not return_indices:
        return values if x.ndim == 4 else values.squeeze(0)
    tap = windows.argmax(-1)
    rows, columns = _tap_starts(x, size, stride, (-padding[0], -padding[1]))
    indices = (rows + tap // kernel[1] * dilation[0]) * batched.shape[3] + columns + tap % kernel[1] * dilation[1]
    return (values, indices) if x.ndim == 4 else (values.squeeze(0), indices.squeeze(0))


def max_pool2d_backward(grad: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                        ceil_mode: bool, indices: Tensor) -> Tensor:
    """ATen's ``max_pool2d_with_indices_backward``: each output point's gradient added at the input
    position its index names."""
    batched, g, ix = _batched(x, "max_pool2d_backward"), grad, indices
    if x.ndim == 3:
        g, ix = grad.unsqueeze(0), indices.unsqueeze(0)
    out = _max_spread(g, ix, batched.shape, kernel_size, stride, padding, dilation, ceil_mode)
    return out if x.ndim == 4 else out.squeeze(0)


def _max_spread(g: Tensor, ix: Tensor, input_shape: Sequence[int], kernel_size: Any, stride: Any, padding: Any,
                dilation: Any, ceil_mode: bool) -> Tensor:
    """The input gradient of an (N, C, H, W) input's max pooling, given its output's ``g`` and indices."""
    kernel, stride, padding, dilation, size = _geometry("max_pool2d_backward", input_shape, kernel_size, stride,
                                                        padding, dilation, ceil_mode)
    if tuple(g.shape) != tuple(input_shape[:2]) + size or tuple(ix.shape) != tuple(g.shape):
        raise ShapeError(f"max_pool2d_backward: the gradient {g.shape} and indices {ix.shape} must both be "
                         f"the output's shape {tuple(input_shape[:2]) + size}")
    if kernel == stride and padding == (0, 0) and dilation == (1, 1) and \
            all(size[d] * kernel[d] <= input_shape[2 + d] for d in (0, 1)):
        return _tiled_spread(g, ix, input_shape, kernel)

    def tap_gradient(tap: int, offset: Pair) -> Tensor:
        rows, columns = _tap_starts(g, size, stride, offset)
        return where(ix == rows * input_shape[3] + columns, g, 0.0)
    return _spread(g, input_shape, kernel, stride, padding, dilation, tap_gradient)


def _tiled_spread(grad: Tensor, indices: Tensor, input_shape: Sequence[int], kernel: Pair) -> Tensor:
    """The max pooling's gradient when its windows tile the input (stride = kernel, no padding,
    MaxPool2d(2)'s): each input position takes its window's gradient where the window's index
    names it, one pass over the input instead of a pass a tap."""
    n, c, oh, ow = grad.shape
    height, width = oh * kernel[0], ow * kernel[1]

    def spread(t: Tensor) -> Tensor:  # each output point repeated over its window
        return t.reshape(n, c, oh, 1, ow, 1).expand(n, c, oh, kernel[0], ow, kernel[1]).reshape(n, c, height, width)
    positions = iota(grad, height).to("int64").reshape(height, 1) * input_shape[3] + iota(grad, width).to("int64")
    out = where(spread(indices) == positions, spread(grad), 0.0)
    return pad_graph(out, [0] * 4, [0, 0, input_shape[2] - height, input_shape[3] - width], [0] * 4, 0)


def _divisor(like: Tensor, plane: Pair, kernel: Pair, stride: Pair, padding: Pair, size: Pair,
             count_include_pad: bool, divisor_override: Any) -> Tensor | int:
    """Each output point's divisor, torch's, for input planes of size ``plane`` (in ``like``'s
    trace): the window clipped to the padded input (to the input itself without
    ``count_include_pad``), an (OH, OW) int64 tensor; or ``divisor_override``."""
    if divisor_override is not None:
        if int(divisor_override) == 0:
            raise ShapeError("avg_pool2d: divisor_override must not be zero")
        return int(divisor_override)
    extents = []
    for d, start in enumerate(_tap_starts(like, size, stride, (-padding[0], -padding[1]))):
        end = (start + kernel[d]).clamp(max=plane[d] + padding[d])
        if not count_include_pad:
            start, end = start.clamp(min=0), end.clamp(max=plane[d])
        extents.append(end - start)
    return extents[0] * extents[1]


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """torch.nn.functional.avg_pool2d."""
    batched = _batched(x, "avg_pool2d")
    kernel, stride, padding, _, size = _geometry("avg_pool2d", batched.shape, kernel_size, stride, padding, 1,
                                                 ceil_mode)
    sums = _padded_windows(batched, kernel, stride, padding, (1, 1), size, 0.0).sum(-1)
    out = sums / _divisor(batched, batched.shape[2:], kernel, stride, padding, size, count_include_pad,
                          divisor_override)
    return out if x.ndim == 4 else out.squeeze(0)


def avg_pool2d_backward(grad: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                        count_include_pad: bool, divisor_override: Any) -> Tensor:
    """ATen's ``avg_pool2d_backward``: each output point's gradient over its divisor, added at every
    input position of its window."""
    batched, g = _batched(x, "avg_pool2d_backward"), grad if x.ndim == 4 else grad.unsqueeze(0)
    out = _average_spread(g, batched.shape, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override)
    return out if x.ndim == 4 else out.squeeze(0)


def _average_spread(g: Tensor, input_shape: Sequence[int], kernel_size: Any, stride: Any, padding: Any,
                    ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> Tensor:
    """The input gradient of an (N, C, H, W) input's average pooling, given its output's ``g``."""
    kernel, stride, padding, _, size = _geometry("avg_pool2d_backward", input_shape, kernel_size, stride, padding,
                                                 1, ceil_mode)
    if tuple(g.shape) != tuple(input_shape[:2]) + size:
        raise ShapeError(f"avg_pool2d_backward: the gradient {g.shape} must be the output's shape "
                         f"{tuple(input_shape[:2]) + size}")
    share = g / _divisor(g, input_shape[2:], kernel, stride, padding, size, count_include_pad, divisor_override)
    return _spread(g, input_shape, kernel, stride, padding, (1, 1), lambda tap, offset: share)


def _planes_and_depth(op: str, kernel_size: Any, stride: Any, padding: Any, **rest: Any) -> tuple[dict, dict]:
    """A 3-D pooling's parameters as its two 2-D poolings' keyword arguments: of each (H, W) plane,
    then along the depth (over (D, OH * OW), windows of width 1).  A max's ``dilation`` splits
    alike; an average's ``divisor_override`` divides once, in the planes' pooling, and the depth's
    pooling then sums."""
    kernel = as_triple(kernel_size, "kernel_size", op)
    stride = as_triple(stride, "stride", op) if stride not in (None, (), []) else kernel
    padding = as_triple(padding, "padding", op)
    planes = dict(kernel_size=kernel[1:], stride=stride[1:], padding=padding[1:])
    depth = dict(kernel_size=(kernel[0], 1), stride=(stride[0], 1), padding=(padding[0], 0))
    if "dilation" in rest:
        dilation = as_triple(rest["dilation"], "dilation", op)
        planes["dilation"], depth["dilation"] = dilation[1:], (dilation[0], 1)
    if "divisor_override" in rest:
        override = rest["divisor_override"]
        planes["divisor_override"], depth["divisor_override"] = override, None if override is None else 1
    return planes, depth


def max_pool3d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool3d: the max of each plane's windows, then of those along the
    depth (the max is separable).  The index (into each input volume, ``(d * H + h) * W + w``) is
    that of the first depth holding the maximum and, in its plane, of the first tap holding it: the
    first maximum in (depth, row, column) tap order, as torch's."""
    batched = _volumes(x, "max_pool3d")
    planes, depth = _planes_and_depth("max_pool3d", kernel_size, stride, padding, dilation=dilation)
    n, c, d, h, w = batched.shape
    values, in_plane = max_pool2d(batched.reshape(n, c * d, h, w), **planes, ceil_mode=ceil_mode, return_indices=True)
    oh, ow = values.shape[2:]
    out, in_depth = max_pool2d(values.reshape(n, c, d, oh * ow), **depth, ceil_mode=ceil_mode, return_indices=True)
    out_depth = out.shape[2]
    out = out.reshape(n, c, out_depth, oh, ow)
    if not return_indices:
        return out if x.ndim == 5 else out.squeeze(0)
    chosen = in_depth // (oh * ow)  # the depth each output point took its maximum from
    indices = (chosen * (h * w) + in_plane.reshape(n, c, d, oh * ow).gather(2, chosen)).reshape(n, c, out_depth, oh, ow)
    return (out, indices) if x.ndim == 5 else (out.squeeze(0), indices.squeeze(0))


def max_pool3d_backward(grad: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                        ceil_mode: bool, indices: Tensor) -> Tensor:
    """ATen's ``max_pool3d_with_indices_backward``: each output point's gradient added at the input
    position its index names, as the two poolings' gradients in reverse: to the depth the index
    names, then to the plane position the planes' pooling chose there (its indices recomputed
    from ``x``: the forward's own)."""
    batched = _volumes(x, "max_pool3d_backward")
    g, ix = (grad, indices) if x.ndim == 5 else (grad.unsqueeze(0), indices.unsqueeze(0))
    planes, depth = _planes_and_depth("max_pool3d_backward", kernel_size, stride, padding, dilation=dilation)
    n, c, d, h, w = batched.shape
    if g.ndim != 5 or tuple(ix.shape) != tuple(g.shape):
        raise ShapeError(f"max_pool3d_backward: the gradient {grad.shape} and indices {indices.shape} must both be "
                         f"the output's shape")
    _, in_plane = max_pool2d(batched.reshape(n, c * d, h, w), **planes, ceil_mode=ceil_mode, return_indices=True)
    out_depth, oh, ow = g.shape[2:]
    columns = iota(g, oh * ow).to("int64")
    in_depth = (ix.reshape(n, c, out_depth, oh * ow) // (h * w)) * (oh * ow) + columns
    over_depth = _max_spread(g.reshape(n, c, out_depth, oh * ow), in_depth, (n, c, d, oh * ow), ceil_mode=ceil_mode,
                             **depth)
    out = _max_spread(over_depth.reshape(n, c * d, oh, ow), in_plane, (n, c * d, h, w), ceil_mode=ceil_mode,
                      **planes).reshape(n, c, d, h, w)
    return out if x.ndim == 5 else out.squeeze(0)


def _volumes(x: Tensor, op: str) -> Tensor:
    if x.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 5-D input (N, C, D, H, W) or a 4-D one (C, D, H, W), got shape {x.shape}")
    require_floating(op, x.dtype)
    return x if x.ndim == 5 else x.unsqueeze(0)


def avg_pool3d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """torch.nn.functional.avg_pool3d: an average pooling of each plane, then one along the depth
    (torch's divisor is the product of the window's clipped extents along each dim, so the average
    is separable)."""
    batched = _volumes(x, "avg_pool3d")
    planes, depth = _planes_and_depth("avg_pool3d", kernel_size, stride, padding, divisor_override=divisor_override)
    n, c, d, h, w = batched.shape
    pooled = avg_pool2d(batched.reshape(n, c * d, h, w), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                        **planes)
    oh, ow = pooled.shape[2:]
    out = avg_pool2d(pooled.reshape(n, c, d, oh * ow), ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                     **depth)
    out = out.reshape(n, c, out.shape[2], oh, ow)
    return out if x.ndim == 5 else out.squeeze(0)


def avg_pool3d_backward(grad: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                        count_include_pad: bool, divisor_override: Any) -> Tensor:
    """ATen's ``avg_pool3d_backward``: the depth pooling's gradient, then the planes'."""
    batched, g = _volumes(x, "avg_pool3d_backward"), grad if x.ndim == 5 else grad.unsqueeze(0)
    planes, depth = _planes_and_depth("avg_pool3d_backward", kernel_size, stride, padding,
                                      divisor_override=divisor_override)
    n, c, d, h, w = batched.shape
    if g.ndim != 5:
        raise ShapeError(f"avg_pool3d_backward: the gradient {grad.shape} must have the output's rank")
    oh, ow = g.shape[3:]
    over_depth = _average_spread(g.reshape(n, c, g.shape[2], oh * ow), (n, c, d, oh * ow), ceil_mode=ceil_mode,
                                 count_include_pad=count_include_pad, **depth)
    out = _average_spread(over_depth.reshape(n, c * d, oh, ow), (n, c * d, h, w), ceil_mode=ceil_mode,
                          count_include_pad=count_include_pad, **planes).reshape(n, c, d, h, w)
    return out if x.ndim == 5 else out.squeeze(0)


def unfold(x: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
    """torch.nn.functional.unfold (ATen's ``im2col``): every window of the zero-padded input as a
    column, (N, C * kH * kW, L), the window's taps in row-major order within each channel."""
    batched = _batched(x, "unfold")
    kernel, stride, padding, dilation, size = _geometry("unfold", batched.shape, kernel_size, stride, padding,
                                                        dilation, False, pooled=False)
    windows = _padded_windows(batched, kernel, stride, padding, dilation, size, 0.0)  # (N, C, OH, OW, kH * kW)
    n, c = batched.shape[:2]
    columns = windows.permute(0, 1, 4, 2, 3).reshape(n, c * kernel[0] * kernel[1], size[0] * size[1])
    return columns if x.ndim == 4 else columns.squeeze(0)


def fold(columns: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Tensor:
    """torch.nn.functional.fold (ATen's ``col2im``): the columns of :func:`unfold` summed back at
    the positions their windows read, (N, C, H, W) for ``output_size`` (H, W); unfold's gradient."""
    if columns.ndim not in (2, 3):
        raise ShapeError(f"fold: expected (N, C * kH * kW, L) or (C * kH * kW, L) columns, got shape {columns.shape}")
    batched = columns if columns.ndim == 3 else columns.unsqueeze(0)
    kernel = as_pair(kernel_size, "kernel_size", "fold")
    n, rows, count = batched.shape
    if rows % (kernel[0] * kernel[1]):
        raise ShapeError(f"fold: the columns' {rows} rows are not a multiple of the kernel's {kernel[0] * kernel[1]} taps")
    c = rows // (kernel[0] * kernel[1])
    shape = (n, c, *as_pair(output_size, "output_size", "fold"))
    require_floating("fold", columns.dtype)
    kernel, stride, padding, dilation, size = _geometry("fold", shape, kernel, stride, padding, dilation, False,
                                                        pooled=False)
    if count != size[0] * size[1]:
        raise ShapeError(f"fold: {count} columns, but windows of kernel_size {kernel} over {shape[2:]} make "
                         f"{size[0] * size[1]}")
    taps = batched.reshape(n, c, kernel[0] * kernel[1], *size)
    out = _spread(taps[:, :, 0], shape, kernel, stride, padding, dilation, lambda tap, offset: taps[:, :, tap])
    return out if columns.ndim == 3 else out.squeeze(0)
