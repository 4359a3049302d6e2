"""Padding, concatenation, normalization and 2-D convolution for traced programs
(torch.nn.functional's ``pad`` and its gradient, ``normalize``, ``conv2d`` (grouped and depthwise too) and
``conv_transpose2d``, ``torch.cat``, and the two gradients of ``conv2d`` that
``aten.convolution_backward`` returns).

A small convolution is not an extern call: it is composed of graph ops, so the lowering turns it
into a reduction over ``(c_in, kh, kw)`` with affine indices that fuses and is scheduled like
every other node (spec 6.x, 7.1).  A large one is an extern call, as TorchInductor calls a
library here: the blocked form (``stax.kernels.direct_conv``, stride 1 and one group, float32) or the
GEMM form of :mod:`stax.frontend.ops.conv_forms` (im2col columns times the weight on the BLAS extern);
``stax.frontend.ops.conv_forms.plan_conv`` decides, and ``graph.conv_plans`` records each decision.  The input is read through
``pad`` (a guarded load: the pad value where an index leaves the input) and two ``unfold``
windows; the product with the weight is inlined into the sum, so it is never materialized::

    out[n, co, oh, ow] = sum over ci, kh, kw of
                         pad(x)[n, ci, oh * sh + kh * dh, ow * sw + kw * dw] * w[co, ci, kh, kw]

The weight gradient is the same product summed over ``(n, oh, ow)``; the input gradient is a
stride-1 convolution of the output gradient, spread by the stride (``pad``'s interior zeros,
XLA's lhs dilation) and padded by ``dilation * (k - 1) - padding``, with the flipped and
transposed weight.  A grouped convolution splits the channels into (groups, C / groups): each
group's outputs sum over its own input channels only.  A transposed convolution is the input
gradient of the convolution with the same weight.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import where
from stax.frontend.ops.conv_forms import (ConvForm, ConvPlan, blocked_applies_in_trace, blocked_correlate, blocked_weight_grad, gemm_correlate,
                        gemm_weight_grad, is_pointwise, plan_conv, pointwise_correlate, pointwise_weight_grad)
from stax.frontend.ops.padding import cat, pad_graph
from stax.frontend.ops.random import bernoulli
from stax.frontend.reductions import vector_norm
from stax.frontend.shapes import as_int
from stax.frontend.tensor import Tensor

Pair = tuple[int, int]
Triple = tuple[int, int, int]


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_amounts(op: str, shape: tuple[int, ...], pad: Sequence[int], mode: str) -> tuple[list[int], list[int]]:
    """The (low, high) amounts per dim of ``pad``'s (before, after) pairs, last dim first."""
    if mode not in _PAD_MODES:
        raise UnsupportedError(f"{op}: mode {mode!r} is not supported; use one of {', '.join(_PAD_MODES)}")
    amounts = [as_int(p, f"{op}: amount") for p in pad]
    ndim = len(shape)
    if len(amounts) % 2 or len(amounts) // 2 > ndim:
        raise ShapeError(f"{op}: {list(pad)} must hold (before, after) pairs for at most the {ndim} dims of "
                         f"shape {shape}")
    if mode != "constant" and ndim not in (len(amounts) // 2 + 1, len(amounts) // 2 + 2):
        raise ShapeError(f"{op}: mode {mode!r} pads the last k dims of a tensor of k + 1 or k + 2 dims (as torch); "
                         f"{len(amounts) // 2} dims of shape {shape} cannot be padded")
    low, high = [0] * ndim, [0] * ndim
    for i in range(len(amounts) // 2):
        low[ndim - 1 - i], high[ndim - 1 - i] = amounts[2 * i], amounts[2 * i + 1]
    return low, high


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: Any = None) -> Tensor:
    """torch.nn.functional.pad: ``pad`` lists (before, after) pairs from the last dim backwards.
    ``constant`` fills with ``value`` (negative amounts crop); ``reflect`` mirrors the elements
    next to the edge (an amount below the dim's size), ``replicate`` repeats the edge element,
    ``circular`` wraps around (an amount up to the dim's size)."""
    low, high = _pad_amounts("pad", x.shape, pad, mode)
    if mode != "constant" and value is not None:
        raise UnsupportedError(f"pad: mode {mode!r} takes no value (as torch); drop value={value!r}")
    if mode == "constant":
        return pad_graph(x, low, high, [0] * x.ndim, 0 if value is None else value)
    for d in range(x.ndim):
        if low[d] or high[d]:
            x = _pad_from_edges(x, d, low[d], high[d], mode)
    return x


def pad_backward(grad: Tensor, input_shape: Sequence[int], pad: Sequence[int], mode: str) -> Tensor:
    """The gradient of ``pad(x, pad, mode)`` with respect to ``x`` given ``grad``, the gradient of
    its output: each padded element's gradient added to the element it was copied from (ATen's
    ``reflection_pad*_backward`` and ``replication_pad*_backward``)."""
    low, high = _pad_amounts("pad_backward", tuple(input_shape), pad, mode)
    expected = tuple(lo + n + hi for lo, n, hi in zip(low, input_shape, high))
    if grad.shape != expected:
        raise ShapeError(f"pad_backward: gradient of shape {grad.shape} does not match the padded shape {expected}")
    if mode == "constant":
        return pad_graph(grad, [-lo for lo in low], [-hi for hi in high], [0] * grad.ndim, 0)
    for d in reversed(range(grad.ndim)):
        if low[d] or high[d]:
            grad = _edge_grad(grad, d, low[d], high[d], mode)
    return grad


def _check_edges(x: Tensor, d: int, n: int, low: int, high: int, mode: str) -> None:
    limit = n - 1 if mode == "reflect" else n if mode == "circular" else None
    if min(low, high) < 0 or (limit is not None and max(low, high) > limit) or n == 0:
        raise ShapeError(f"pad: {mode} padding ({low}, {high}) of dimension {d} of shape {x.shape} must be "
                         f"non-negative{f' and at most {limit}' if limit is not None else ''} on a non-empty dim")


def _edge_grad(grad: Tensor, d: int, low: int, high: int, mode: str) -> Tensor:
    """The gradient of ``_pad_from_edges`` along ``d``: the middle, plus the edges' gradients
    added where ``_pad_from_edges`` took them from (each placed by ``pad`` with ``-0.0``)."""
    n = grad.shape[d] - low - high
    _check_edges(grad, d, n, low, high, mode)

    def part(start: int, stop: int) -> Tensor:
        return grad[(slice(None),) * d + (slice(start, stop),)]
    before, middle, after = part(0, low), part(low, low + n), part(low + n, low + n + high)
    if mode == "reflect":
        pieces = ((before.flip(d), 1), (after.flip(d), n - 1 - high))
    elif mode == "replicate":
        pieces = ((before.sum(d, keepdim=True), 0), (after.sum(d, keepdim=True), n - 1))
    else:
        pieces = ((before, n - low), (after, 0))
    total = middle
    for piece, start in pieces:
        if piece.shape[d]:
            edges = [0] * grad.ndim
            lows, highs = list(edges), list(edges)
            lows[d], highs[d] = start, n - start - piece.shape[d]
            total = total + pad_graph(piece, lows, highs, edges, -0.0)
    return total


def _pad_from_edges(x: Tensor, d: int, low: int, high: int, mode: str) -> Tensor:
    """Dim ``d`` of ``x`` padded by ``low`` and ``high`` elements taken from ``x`` itself (pad's
    non-constant modes), concatenated around it."""
    n = x.shape[d]
    _check_edges(x, d, n, low, high, mode)

    def part(start: int, stop: int) -> Tensor:
        return x[(slice(None),) * d + (slice(start, stop),)]
    if mode == "reflect":
        before, after = part(1, low + 1).flip(d), part(n - 1 - high, n - 1).flip(d)
    elif mode == "replicate":
        edge = list(x.shape)
        before = part(0, 1).expand(edge[:d] + [low] + edge[d + 1:])
        after = part(n - 1, n).expand(edge[:d] + [high] + edge[d + 1:])
    else:
        before, after = part(n - low, n), part(0, high)
    return cat([t for t, k in ((before, low), (x, 1), (after, high)) if k], d)


def normalize(x: Tensor, p: Any = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """torch.nn.functional.normalize: ``x`` divided by its ``p``-norm along ``dim``, at least ``eps``."""
    return x / vector_norm(x, p, dim, keepdim=True).clamp_min(eps)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """torch.cdist: the ``p``-norm distance of every row of ``x1`` (..., P, M) to every row of
    ``x2`` (..., R, M), (..., P, R), computed from the differences (torch's direct form)."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"cdist: expected (..., P, M) and (..., R, M) with the same M, got {x1.shape} and {x2.shape}")
    return vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, -1)


def cdist_backward(grad: Tensor, x1: Tensor, x2: Tensor, p: float, dist: Tensor) -> Tensor:
    """ATen's ``_cdist_backward``: the gradient of :func:`cdist` with respect to ``x1``, torch's
    at every ``p`` (0 where a distance is 0, and for p < 1 where a difference is)."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
    d = dist.unsqueeze(-1)
    if p == 0:  # zeros, as torch's (not x1 * 0, NaN where x1 is not finite)
        return x1._tracer.constant(0, x1.dtype, x1.shape)
    if p == 1:
        step = diff.sign()
    elif p == 2:
        step = where(d == 0, 0.0, diff / d)
    elif p == float("inf"):
        step = diff.sign() * (diff.abs() == d).to(diff.dtype)
    elif p < 2:
        zero = (d == 0) | (diff == 0) if p < 1 else d == 0
        step = where(zero, 0.0, diff.sign() * diff.abs() ** (p - 1) / d ** (p - 1))
    else:
        step = where(d == 0, 0.0, diff * diff.abs() ** (p - 2) / d ** (p - 1))
    return (grad.unsqueeze(-1) * step).sum(-2)


def dropout(x: Tensor, p: float, seed: Tensor, training: bool = True) -> Tensor:
    """torch.nn.functional.dropout: in training, each element zeroed with probability ``p`` and
    the rest scaled by ``1 / (1 - p)``; the mask is ``stax.bernoulli`` of ``seed``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise UnsupportedError(f"dropout: the probability must be a Python number in [0, 1], got {p!r}")
    if not training or p == 0:
        return x
    if p == 1:  # torch's: zeros, and NaN where x is not finite
        return x * 0
    return x * bernoulli(seed, x.shape, 1 - p).to(x.dtype) * (1 / (1 - p))


def as_pair(value: Any, what: str, op: str = "conv2d") -> Pair:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) == 1:  # ATen's one-element lists
        items = items * 2
    if len(items) != 2:
        raise ShapeError(f"{op}: {what} must be an int or a pair, got {value!r}")
    return as_int(items[0], f"{op}: {what}"), as_int(items[1], f"{op}: {what}")


def as_triple(value: Any, what: str, op: str) -> Triple:
    """``value`` (an int, or a sequence of one or three) as three ints, one per spatial dim of a volume."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * 3
    if len(items) == 1:  # ATen's one-element lists
        items = items * 3
    if len(items) != 3:
        raise ShapeError(f"{op}: {what} must be an int or a triple, got {value!r}")
    return tuple(as_int(item, f"{op}: {what}") for item in items)


def _check(x: Tensor, weight: Tensor, stride: Pair, padding: Pair, dilation: Pair, groups: int) -> None:
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D input (N, C, H, W) or a 3-D one (C, H, W) and a 4-D weight "
                         f"(C_out, C / groups, kH, kW), got shapes {x.shape} and {weight.shape}")
    if x.dtype != weight.dtype or not dtypes.is_floating(x.dtype):
        raise UnsupportedError(f"conv2d: input and weight must both be float32 or both float64, got {x.dtype} and "
                               f"{weight.dtype}")
    if groups < 1 or x.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
        raise ShapeError(f"conv2d: the input has {x.shape[1]} channels, the weight {weight.shape} with groups={groups} "
                         f"expects {weight.shape[1] * groups} and {weight.shape[0]} output channels divisible by "
                         f"the groups")
    if min(stride + dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"conv2d: stride {stride} and dilation {dilation} must be positive, padding {padding} "
                         "non-negative")
    for d in (0, 1):
        if x.shape[2 + d] + 2 * padding[d] < dilation[d] * (weight.shape[2 + d] - 1) + 1:
            raise ShapeError(f"conv2d: the kernel {weight.shape[2:]} (dilation {dilation}) is larger than the "
                             f"padded input {x.shape[2:]} (padding {padding})")


def conv_windows(x: Tensor, kernel: Pair, stride: Pair, dilation: Pair) -> Tensor:
    """(N, C, OH, OW, kH, kW): the input element under each kernel tap of each output point."""
    for d in (0, 1):
        x = x.unfold(2 + d, dilation[d] * (kernel[d] - 1) + 1, stride[d])
    return x[..., ::dilation[0], ::dilation[1]]


def _planned(result: Tensor, plan: ConvPlan) -> Tensor:
    """``result``, its convolution's plan recorded in the graph (``graph.conv_plans``)."""
    result._tracer.graph.conv_plans[result._name] = plan
    return result


_NOT_BLOCKED = ("{op}: the blocked form takes float32 convolutions of stride and dilation 1 and one group at an ISA "
                "level with vector instructions, not a {dtype} one of stride {stride}, dilation {dilation} and "
                "{groups} groups here; leave form= unset for the rule's choice")


def _correlate(x: Tensor, weight: Tensor, stride: Pair, dilation: Pair, groups: int = 1,
               form: ConvForm | None = None) -> Tensor:
    """The convolution of an already padded input: a sum over (C / groups, kH, kW) of the windows
    times the weight; group g's outputs read its C / groups input channels only.  The form is
    ``form``, else the one ``plan_conv`` picks."""
    windows = conv_windows(x, weight.shape[2:], stride, dilation)
    blocked = blocked_applies_in_trace(x, stride, dilation, groups)
    plan = plan_conv(x.shape, weight.shape, windows.shape[2:4], groups, form, blocked)
    if plan.form is ConvForm.BLOCKED and not blocked:
        raise UnsupportedError(_NOT_BLOCKED.format(op="conv2d", dtype=x.dtype, stride=stride, dilation=dilation,
                                                   groups=groups))
    if plan.form is ConvForm.GEMM and is_pointwise(weight.shape, stride, groups):
        return _planned(pointwise_correlate(x, weight), plan)
    if plan.form is ConvForm.BLOCKED:
        return _planned(blocked_correlate(x, weight), plan)
    return _planned(gemm_correlate(windows, weight, groups) if plan.form is ConvForm.GEMM else
                    _direct_correlate(windows, weight, groups), plan)


def _direct_correlate(windows: Tensor, weight: Tensor, groups: int) -> Tensor:
    """The direct form: the windows times the weight, summed over (C / groups, kH, kW)."""
    if groups == 1:
        return (windows.unsqueeze(1) * weight.reshape(weight.shape[:2] + (1, 1) + weight.shape[2:])).sum((2, 5, 6))
    n, c, oh, ow, kh, kw = windows.shape
    per_group = windows.reshape(n, groups, 1, c // groups, oh, ow, kh, kw)
    taps = weight.reshape(groups, weight.shape[0] // groups, weight.shape[1], 1, 1, kh, kw)
    return (per_group * taps).sum((3, 6, 7)).reshape(n, weight.shape[0], oh, ow)


def _unbatched(x: Tensor, op: str) -> bool:
    """Whether ``x`` is one (C, H, W) image, which torch convolves as a batch of one."""
    if x.ndim not in (3, 4):
        raise ShapeError(f"{op}: expected a 4-D input (N, C, H, W) or a 3-D one (C, H, W), got shape {x.shape}")
    return x.ndim == 3


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, form: ConvForm | None = None) -> Tensor:
    """torch.nn.functional.conv2d, grouped (depthwise: ``groups`` = channels) and unbatched too;
    ``form`` forces the direct or the GEMM form (default: ``stax.frontend.ops.conv_forms.plan_conv``'s rule)."""
    if _unbatched(x, "conv2d"):
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, form=form).squeeze(0)
    stride, padding, dilation = as_pair(stride, "stride"), as_pair(padding, "padding"), as_pair(dilation, "dilation")
    groups = as_int(groups, "conv2d: groups")
    _check(x, weight, stride, padding, dilation, groups)
    padded = pad_graph(x, (0, 0) + padding, (0, 0) + padding, (0,) * 4, 0)
    out = _correlate(padded, weight, stride, dilation, groups, form)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def conv2d_weight_grad(grad: Tensor, x: Tensor, weight_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                       dilation: Any = 1, groups: int = 1, *, form: ConvForm | None = None) -> Tensor:
    """d loss / d weight of ``conv2d(x, weight, groups=groups)`` given ``grad`` = d loss / d output;
    the form is the forward convolution's (or ``form``)."""
    stride, padding, dilation = as_pair(stride, "stride"), as_pair(padding, "padding"), as_pair(dilation, "dilation")
    padded = pad_graph(x, (0, 0) + padding, (0, 0) + padding, (0,) * 4, 0)
    windows = conv_windows(padded, tuple(weight_shape[2:]), stride, dilation)
    if windows.shape[2:4] != grad.shape[2:]:
        raise ShapeError(f"conv2d_weight_grad: gradient of shape {grad.shape} does not match the output of "
                         f"the convolution of {x.shape} ({windows.shape[2:4]})")
    blocked = blocked_applies_in_trace(x, stride, dilation, groups)
    plan = plan_conv(padded.shape, tuple(weight_shape), windows.shape[2:4], groups, form, blocked)
    if plan.form is ConvForm.BLOCKED and not blocked:
        raise UnsupportedError(_NOT_BLOCKED.format(op="conv2d_weight_grad", dtype=x.dtype, stride=stride,
                                                   dilation=dilation, groups=groups))
    if plan.form is ConvForm.BLOCKED:
        return _planned(blocked_weight_grad(padded, grad), plan)
    if plan.form is ConvForm.GEMM and is_pointwise(tuple(weight_shape), stride, groups):
        return _planned(pointwise_weight_grad(grad, padded, tuple(weight_shape)), plan)
    if plan.form is ConvForm.GEMM:
        return _planned(gemm_weight_grad(grad, windows, tuple(weight_shape), groups), plan)
    if groups == 1:
        return (grad.reshape(grad.shape[:2] + (1,) + grad.shape[2:] + (1, 1)) * windows.unsqueeze(1)).sum((0, 3, 4))
    n, c, oh, ow, kh, kw = windows.shape
    per_group = windows.reshape(n, groups, 1, c // groups, oh, ow, kh, kw)
    g = grad.reshape(n, groups, grad.shape[1] // groups, 1, oh, ow, 1, 1)
    return (g * per_group).sum((0, 4, 5)).reshape(tuple(weight_shape))


def _transposed_kernel(weight: Tensor, groups: int) -> Tensor:
    """The weight of the transposed convolution: flipped taps, and within each group the input and
    output channels exchanged ((C_out, C / g, ...) -> (C, C_out / g, ...))."""
    flipped = weight.flip(2, 3)
    if groups == 1:
        return flipped.transpose(0, 1)
    out, per_group, kh, kw = weight.shape
    return flipped.reshape(groups, out // groups, per_group, kh, kw).transpose(1, 2).reshape(
        groups * per_group, out // groups, kh, kw)


def conv2d_input_grad(grad: Tensor, weight: Tensor, input_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1, *, form: ConvForm | None = None) -> Tensor:
    """d loss / d x of ``conv2d(x, weight, groups=groups)`` given ``grad`` = d loss / d output (a
    transposed convolution: see the module docstring), each convolution in ``form`` or the rule's."""
    stride, padding, dilation = as_pair(stride, "stride"), as_pair(padding, "padding"), as_pair(dilation, "dilation")
    phased = _input_grad_by_phases(grad, weight, input_shape, stride, padding, groups, form) \
        if stride != (1, 1) and dilation == (1, 1) else None
    if phased is not None:
        return phased
    reach = [dilation[d] * (weight.shape[2 + d] - 1) for d in (0, 1)]
    low = [reach[d] - padding[d] for d in (0, 1)]
    high = [input_shape[2 + d] - 1 + padding[d] - (grad.shape[2 + d] - 1) * stride[d] for d in (0, 1)]
    spread = pad_graph(grad, [0, 0, *low], [0, 0, *high], [0, 0, stride[0] - 1, stride[1] - 1], 0)
    return _correlate(spread, _transposed_kernel(weight, groups), (1, 1), dilation, groups, form)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch.nn.functional.conv_transpose2d: the input gradient of the convolution whose weight is
    ``weight`` (C_in, C_out / groups, kH, kW), ``output_padding`` more rows and columns at the end."""
    if _unbatched(x, "conv_transpose2d"):
        return conv_transpose2d(x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups,
                                dilation).squeeze(0)
    stride, padding = as_pair(stride, "stride"), as_pair(padding, "padding")
    dilation, extra = as_pair(dilation, "dilation"), as_pair(output_padding, "output_padding")
    groups = as_int(groups, "conv_transpose2d: groups")
    if weight.ndim != 4 or x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
        raise ShapeError(f"conv_transpose2d: the input has {x.shape[1]} channels, the weight {weight.shape} "
                         f"(C_in, C_out / groups, kH, kW) with groups={groups} expects {weight.shape[0]}")
    if not all(0 <= extra[d] < max(stride[d], dilation[d]) for d in (0, 1)):
        raise ShapeError(f"conv_transpose2d: output_padding {extra} must be smaller than the stride {stride} or "
                         f"the dilation {dilation}")
    size = [(x.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (weight.shape[2 + d] - 1) + extra[d] + 1
            for d in (0, 1)]
    out = conv2d_input_grad(x, weight, (x.shape[0], weight.shape[1] * groups, *size), stride, padding, dilation,
                            groups)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def _input_grad_by_phases(grad: Tensor, weight: Tensor, input_shape: Sequence[int], stride: Pair,
                          padding: Pair, groups: int, form: ConvForm | None) -> Tensor | None:
    """The input gradient of a strided, undilated convolution without the spread's interior
    zeros: the padded input position ``a = q * s + r`` receives ``grad[q - m] * w[r + m * s]`` for
    ``m = 0, 1, ...``, a stride-1 convolution of the gradient with the taps ``w[r::s]`` per phase
    ``r``, computed for the positions inside the input only; the phases are interleaved by
    ``pad`` (interior ``s - 1``, ``-0.0`` elsewhere, as in ``cat``) and summed.  At stride 2 it
    computes a quarter of the spread formula's products.  None when no tap reaches the input
    (a kernel narrower than the stride), where the spread formula gives the zeros."""
    total = None
    for phase in itertools.product(*(range(min(stride[d], weight.shape[2 + d])) for d in (0, 1))):
        first = [-(-(padding[d] - phase[d]) // stride[d]) for d in (0, 1)]  # first q inside the input
        count = [-(-(padding[d] + input_shape[2 + d] - phase[d]) // stride[d]) - first[d] for d in (0, 1)]
        if min(count) <= 0:
            continue
        taps = weight[:, :, phase[0]::stride[0], phase[1]::stride[1]]
        low = [taps.shape[2 + d] - 1 - first[d] for d in (0, 1)]
        high = [count[d] + first[d] - grad.shape[2 + d] for d in (0, 1)]
        shifted = pad_graph(grad, [0, 0, *low], [0, 0, *high], [0] * 4, 0)
        values = _correlate(shifted, _transposed_kernel(taps, groups), (1, 1), (1, 1), groups, form)
        start = [first[d] * stride[d] + phase[d] - padding[d] for d in (0, 1)]
        end = [input_shape[2 + d] - start[d] - (count[d] - 1) * stride[d] - 1 for d in (0, 1)]
        placed = pad_graph(values, [0, 0, *start], [0, 0, *end], [0, 0, stride[0] - 1, stride[1] - 1], -0.0)
        total = placed if total is None else total + placed
    return total
