"""3-D convolutions (torch's ``conv3d``) as 2-D ones, and their gradients.

Tap ``t`` of a kernel of depth ``kD`` reads, at output depth ``j``, input plane
``j * sD + t * dD - pD``.  The planes the ``kD`` taps read at one output depth, stacked along the
channels, are one image of ``kD * C`` channels; those of every output depth a batch of ``N *
D_out`` images, which one 2-D convolution (:func:`stax.frontend.ops.nn.conv2d`, in the form its rule picks)
convolves with the weight's taps stacked alike: the FLOPs of the 3-D convolution in one
reduction over ``kD * C / groups * kH * kW``, each input plane copied ``kD`` times (the depth's
im2col).  The input gradient is the stacked planes' 2-D input gradient, each tap's part spread
back to the planes it read (a pad whose interior is the depth stride); the weight gradient is
the stacked planes' 2-D weight gradient.  A transposed 3-D convolution is the input gradient of
the convolution whose weight it holds.
"""
from __future__ import annotations

from typing import Any, Sequence

from stax.errors import ShapeError
from stax.frontend.ops.nn import Triple, as_triple, conv2d, conv2d_input_grad, conv2d_weight_grad
from stax.frontend.ops.padding import pad_graph
from stax.frontend.tensor import Tensor


def _geometry(stride: Any, padding: Any, dilation: Any) -> tuple[Triple, Triple, Triple]:
    return (as_triple(stride, "stride", "conv3d"), as_triple(padding, "padding", "conv3d"),
            as_triple(dilation, "dilation", "conv3d"))


def _output_depth(depth: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    out = (depth + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise ShapeError(f"conv3d: an input of depth {depth} padded by {padding} is shallower than the kernel's "
                         f"reach {dilation * (kernel - 1) + 1}")
    return out


def _stacked_planes(x: Tensor, kernel_depth: int, out_depth: int, stride: Triple, padding: Triple,
                    dilation: Triple, groups: int) -> Tensor:
    """The planes each depth tap reads at every output depth, stacked along the channels (each
    group's taps, tap-major, then its channels), as a batch of images (N * D_out, kD * C, H, W)."""
    n, c, _, h, w = x.shape
    padded = pad_graph(x, (0, 0, padding[0], 0, 0), (0, 0, padding[0], 0, 0), (0,) * 5, 0)
    reach = dilation[0] * (kernel_depth - 1) + 1
    taps = padded.unfold(2, reach, stride[0])[..., ::dilation[0]]  # (N, C, D_out, H, W, kD)
    grouped = taps.reshape(n, groups, c // groups, out_depth, h, w, kernel_depth)
    return grouped.permute(0, 3, 1, 6, 2, 4, 5).reshape(n * out_depth, kernel_depth * c, h, w)


def _stacked_weight(weight: Tensor) -> Tensor:
    """A 3-D weight (C_out, C / g, kD, kH, kW) as the 2-D one of the stacked planes (C_out, kD * C / g, kH, kW)."""
    o, per_group, kd, kh, kw = weight.shape
    return weight.permute(0, 2, 1, 3, 4).reshape(o, kd * per_group, kh, kw)


def _as_images(grad: Tensor) -> Tensor:
    """A 3-D convolution's output gradient (N, C_out, D_out, H_out, W_out) as a batch of images."""
    n, o, d, h, w = grad.shape
    return grad.permute(0, 2, 1, 3, 4).reshape(n * d, o, h, w)


def _as_volumes(images: Tensor, n: int) -> Tensor:
    """A batch of images (N * D, C, H, W), batch-major, as volumes (N, C, D, H, W)."""
    nd, c, h, w = images.shape
    return images.reshape(n, nd // n, c, h, w).permute(0, 2, 1, 3, 4)


def _unbatched(x: Tensor, op: str) -> bool:
    if x.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 5-D input (N, C, D, H, W) or a 4-D one (C, D, H, W), got shape {x.shape}")
    return x.ndim == 4


def _check_weight(weight: Tensor, op: str) -> None:
    if weight.ndim != 5:
        raise ShapeError(f"{op}: expected a 5-D weight (C_out, C / groups, kD, kH, kW), got shape {weight.shape}")


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv3d (grouped and unbatched too): one 2-D convolution of the planes
    the depth taps read, stacked along the channels (the module docstring)."""
    if _unbatched(x, "conv3d"):
        return conv3d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    _check_weight(weight, "conv3d")
    stride, padding, dilation = _geometry(stride, padding, dilation)
    out_depth = _output_depth(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    planes = _stacked_planes(x, weight.shape[2], out_depth, stride, padding, dilation, groups)
    out = _as_volumes(conv2d(planes, _stacked_weight(weight), None, stride[1:], padding[1:], dilation[1:], groups),
                      x.shape[0])
    return out if bias is None else out + bias.reshape(1, -1, 1, 1, 1)


def conv3d_input_grad(grad: Tensor, weight: Tensor, input_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1) -> Tensor:
    """d loss / d x of ``conv3d(x, weight, groups=groups)`` given ``grad`` = d loss / d output: the
    stacked planes' 2-D input gradient, each tap's part spread back along the depth to the planes
    it read."""
    _check_weight(weight, "conv3d_input_grad")
    stride, padding, dilation = _geometry(stride, padding, dilation)
    n, c, depth, h, w = input_shape
    kd, out_depth, padded_depth = weight.shape[2], grad.shape[2], depth + 2 * padding[0]
    stacked = conv2d_input_grad(_as_images(grad), _stacked_weight(weight), (n * out_depth, kd * c, h, w),
                                stride[1:], padding[1:], dilation[1:], groups)
    by_tap = stacked.reshape(n, out_depth, groups, kd, c // groups, h, w)
    spread = []
    for t in range(kd):
        tap = by_tap[:, :, :, t].permute(0, 2, 3, 1, 4, 5).reshape(n, c, out_depth, h, w)
        low = t * dilation[0]
        high = padded_depth - (low + stride[0] * (out_depth - 1) + 1)
        spread.append(pad_graph(tap, (0, 0, low, 0, 0), (0, 0, high, 0, 0), (0, 0, stride[0] - 1, 0, 0), 0))
    return sum(spread[1:], spread[0])[:, :, padding[0]:padding[0] + depth]


def conv3d_weight_grad(grad: Tensor, x: Tensor, weight_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                       dilation: Any = 1, groups: int = 1) -> Tensor:
    """d loss / d weight of ``conv3d(x, weight, groups=groups)`` given ``grad`` = d loss / d output:
    the 2-D weight gradient of the stacked planes, its channels unstacked into the kernel's depth."""
    stride, padding, dilation = _geometry(stride, padding, dilation)
    o, per_group, kd, kh, kw = weight_shape
    planes = _stacked_planes(x, kd, grad.shape[2], stride, padding, dilation, groups)
    stacked = conv2d_weight_grad(_as_images(grad), planes, (o, kd * per_group, kh, kw), stride[1:], padding[1:],
                                 dilation[1:], groups)
    return stacked.reshape(o, kd, per_group, kh, kw).permute(0, 2, 1, 3, 4)


def conv_transpose3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """torch.nn.functional.conv_transpose3d: the input gradient of the 3-D convolution whose weight
    is ``weight`` (C_in, C_out / groups, kD, kH, kW), ``output_padding`` more planes, rows and
    columns at the end."""
    if _unbatched(x, "conv_transpose3d"):
        return conv_transpose3d(x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups,
                                dilation).squeeze(0)
    _check_weight(weight, "conv_transpose3d")
    stride, padding, dilation = _geometry(stride, padding, dilation)
    extra = as_triple(output_padding, "output_padding", "conv_transpose3d")
    if x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
        raise ShapeError(f"conv_transpose3d: the input has {x.shape[1]} channels, the weight {weight.shape} "
                         f"(C_in, C_out / groups, kD, kH, kW) with groups={groups} expects {weight.shape[0]}")
    if not all(0 <= extra[d] < max(stride[d], dilation[d]) for d in range(3)):
        raise ShapeError(f"conv_transpose3d: output_padding {extra} must be smaller than the stride {stride} or "
                         f"the dilation {dilation}")
    size = [(x.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (weight.shape[2 + d] - 1) + extra[d] + 1
            for d in range(3)]
    out = conv3d_input_grad(x, weight, (x.shape[0], weight.shape[1] * groups, *size), stride, padding, dilation,
                            groups)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1, 1)
