"""3-D convolutions (torch's ``conv3d``) as sums of 2-D ones, one per depth tap, and their
gradients.

Tap ``t`` of a kernel of depth ``kD`` reads, at output depth ``j``, input plane
``j * sD + t * dD - pD``; the planes it reads at every output depth form a batch of images
(``N * D_out`` of them), which a 2-D convolution (:func:`stax.nn.conv2d`, in the form its rule
picks) convolves with the tap's ``(kH, kW)`` kernel.  The output is the sum of the ``kD``
convolutions: the FLOPs of the 3-D convolution, each tap's planes copied once.  The input
gradient of each tap is a 2-D input gradient, spread back to the planes it read (a pad whose
interior is the depth stride); the weight gradient of each tap a 2-D weight gradient.
"""
from __future__ import annotations

from typing import Any, Sequence

from .errors import ShapeError
from .frontend import Tensor
from .nn import Triple, _pad_graph, _triple, cat, conv2d, conv2d_input_grad, conv2d_weight_grad


def _geometry(stride: Any, padding: Any, dilation: Any) -> tuple[Triple, Triple, Triple]:
    return (_triple(stride, "stride", "conv3d"), _triple(padding, "padding", "conv3d"),
            _triple(dilation, "dilation", "conv3d"))


def _output_depth(depth: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    out = (depth + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise ShapeError(f"conv3d: an input of depth {depth} padded by {padding} is shallower than the kernel's "
                         f"reach {dilation * (kernel - 1) + 1}")
    return out


def _tap_planes(x: Tensor, tap: int, out_depth: int, stride: Triple, padding: Triple, dilation: Triple) -> Tensor:
    """The input planes depth tap ``tap`` reads at every output depth, as a batch of images
    (N * D_out, C, H, W), batch-major."""
    n, c, _, h, w = x.shape
    padded = _pad_graph(x, (0, 0, padding[0], 0, 0), (0, 0, padding[0], 0, 0), (0,) * 5, 0)
    start = tap * dilation[0]
    planes = padded[:, :, start:start + stride[0] * (out_depth - 1) + 1:stride[0]]
    return planes.permute(0, 2, 1, 3, 4).reshape(n * out_depth, c, h, w)


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
    """torch.nn.functional.conv3d (grouped and unbatched too): the sum over depth taps of 2-D
    convolutions of the planes each tap reads (the module docstring)."""
    if _unbatched(x, "conv3d"):
        return conv3d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    _check_weight(weight, "conv3d")
    stride, padding, dilation = _geometry(stride, padding, dilation)
    out_depth = _output_depth(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    taps = [conv2d(_tap_planes(x, t, out_depth, stride, padding, dilation), weight[:, :, t], None, stride[1:],
                   padding[1:], dilation[1:], groups) for t in range(weight.shape[2])]
    out = _as_volumes(sum(taps[1:], taps[0]), x.shape[0])
    return out if bias is None else out + bias.reshape(1, -1, 1, 1, 1)


def conv3d_input_grad(grad: Tensor, weight: Tensor, input_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1) -> Tensor:
    """d loss / d x of ``conv3d(x, weight, groups=groups)`` given ``grad`` = d loss / d output: each
    tap's 2-D input gradient, spread back along the depth to the planes the tap read."""
    _check_weight(weight, "conv3d_input_grad")
    stride, padding, dilation = _geometry(stride, padding, dilation)
    n, c, depth, h, w = input_shape
    out_depth, padded_depth = grad.shape[2], depth + 2 * padding[0]
    images = _as_images(grad)
    spread = []
    for t in range(weight.shape[2]):
        tap = _as_volumes(conv2d_input_grad(images, weight[:, :, t], (n * out_depth, c, h, w), stride[1:],
                                            padding[1:], dilation[1:], groups), n)
        low = t * dilation[0]
        high = padded_depth - (low + stride[0] * (out_depth - 1) + 1)
        spread.append(_pad_graph(tap, (0, 0, low, 0, 0), (0, 0, high, 0, 0), (0, 0, stride[0] - 1, 0, 0), 0))
    return sum(spread[1:], spread[0])[:, :, padding[0]:padding[0] + depth]


def conv3d_weight_grad(grad: Tensor, x: Tensor, weight_shape: Sequence[int], stride: Any = 1, padding: Any = 0,
                       dilation: Any = 1, groups: int = 1) -> Tensor:
    """d loss / d weight of ``conv3d(x, weight, groups=groups)`` given ``grad`` = d loss / d output:
    each depth tap's 2-D weight gradient, stacked along the kernel's depth."""
    stride, padding, dilation = _geometry(stride, padding, dilation)
    images, out_depth = _as_images(grad), grad.shape[2]
    taps = [conv2d_weight_grad(images, _tap_planes(x, t, out_depth, stride, padding, dilation),
                               (weight_shape[0], weight_shape[1], *weight_shape[3:]), stride[1:], padding[1:],
                               dilation[1:], groups).unsqueeze(2) for t in range(weight_shape[2])]
    return taps[0] if len(taps) == 1 else cat(taps, 2)
