"""The GEMM form of a 2-D convolution (im2col), the blocked form (``stax.kernels.direct_conv``, the
columns never stored), and the rule that picks a form.

The direct form (``stax.frontend.ops.nn``) is a reduction over ``(C / groups, kH, kW)`` that fuses with its
neighbours; its generated loop does about one multiply-add per load.  The GEMM form lays the
windows out as a column matrix per group (im2col: a pointwise kernel over the padded input) and
multiplies it by the weight on the BLAS extern (spec 8.5, the library call TorchInductor makes
here)::

    cols[g, (ci, kh, kw), (n, oh, ow)] = pad(x)[n, g * C / groups + ci, oh * sh + kh * dh, ow * sw + kw * dw]
    out[g, co, (n, oh, ow)]           = sum over k of w[g, co, k] * cols[g, k, (n, oh, ow)]

The output is read back as ``(N, C_out, OH, OW)`` through a view, so the epilogue (bias, batch
norm, ReLU) is the next pointwise kernel.  The weight gradient multiplies the output gradient by
the same columns, read transposed in place (the columns of the forward are materialized once).
In the blocked form, the forward and the weight gradient are each one extern call on the padded
input (``conv2d``, ``conv2d_weight``), and neither stores columns.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from stax.frontend.tensor import Tensor
from stax.target import Isa

Pair = tuple[int, int]

#: the GEMM form needs a reduction at least this long (a depthwise 3x3 convolution reduces over 9
#: taps: its column buffer would cost more than the direct form's reduction; a 3x3 over 3 input
#: channels, 27, already runs several times faster as a GEMM, see experiments/bench/conv.py)
GEMM_MIN_DEPTH = 16
#: ... and at least this many output channels per group, the rows that reuse each column (a
#: depthwise convolution has one)
GEMM_MIN_ROWS = 2
#: ... and this many multiply-adds: a smaller convolution is one short fused kernel
GEMM_MIN_MACS = 1 << 20
#: the blocked form wants an ISA level of vectors of at least this many floats
BLOCKED_MIN_LANES = 8


class ConvForm(enum.Enum):
    """How a convolution (or one of its gradients) is computed."""

    DIRECT = "direct"  # a reduction of graph ops, fused with its neighbours
    GEMM = "gemm"  # im2col columns times the weight on the BLAS extern
    BLOCKED = "blocked"  # stax.kernels.direct_conv's extern on the padded input (stride 1, one group, float32)


@dataclass(frozen=True)
class ConvPlan:
    """The rule's decision for one convolution, with the GEMM shape it was decided on: ``rows``
    output channels per group, ``depth`` = C / groups * kH * kW, ``columns`` = N * OH * OW."""

    form: ConvForm
    groups: int
    rows: int
    depth: int
    columns: int

    @property
    def macs(self) -> int:
        return self.groups * self.rows * self.depth * self.columns


def blocked_applies(stride: Pair, dilation: Pair, groups: int, dtype: str, isa: Isa) -> bool:
    """Whether ``stax.kernels.direct_conv`` can compute the convolution: float32, stride and dilation 1,
    one group, at an ISA level with vector instructions (the blocked kernel is vector code; without
    them the BLAS is faster)."""
    return dtype == "float32" and stride == dilation == (1, 1) and groups == 1 and isa.width >= BLOCKED_MIN_LANES


def blocked_applies_in_trace(x: Tensor, stride: Pair, dilation: Pair, groups: int) -> bool:
    """``blocked_applies`` to a convolution of ``x``, at the ISA level its trace is for (``stax.trace``'s)."""
    return blocked_applies(stride, dilation, groups, x.dtype, x._tracer.isa)


def plan_conv(x_shape: tuple[int, ...], weight_shape: tuple[int, ...], out_hw: Pair, groups: int,
              form: ConvForm | None = None, blocked: bool = False) -> ConvPlan:
    """The form of the convolution of ``x_shape`` (padded) with ``weight_shape``: ``form`` when
    given, else, when its rows per group and work pass the thresholds above, BLOCKED where
    ``blocked`` (``blocked_applies``) and the kernel is wider than one tap (a pointwise
    convolution is a product read in place), GEMM elsewhere when its reduction passes
    GEMM_MIN_DEPTH too; else DIRECT.  The blocked kernel keeps no column buffer, so a short
    reduction (an MNIST stem's one input channel: 9 taps) suits it as well as a long one."""
    rows, depth = weight_shape[0] // groups, weight_shape[1] * weight_shape[2] * weight_shape[3]
    columns = x_shape[0] * out_hw[0] * out_hw[1]
    if form is None:
        large = rows >= GEMM_MIN_ROWS and groups * rows * depth * columns >= GEMM_MIN_MACS
        pointwise = tuple(weight_shape[2:]) == (1, 1)
        if blocked and not pointwise and large:  # no column buffer: a short reduction suits it too
            form = ConvForm.BLOCKED
        else:
            form = ConvForm.GEMM if large and depth >= GEMM_MIN_DEPTH else ConvForm.DIRECT
    return ConvPlan(form, groups, rows, depth, columns)


def blocked_correlate(padded: Tensor, weight: Tensor) -> Tensor:
    """The stride-1 convolution of a padded input with ``weight`` as the ``conv2d`` extern."""
    n, _, hp, wp = padded.shape
    _, _, kh, kw = weight.shape
    return padded._tracer.emit("conv2d", (padded, weight), (n, weight.shape[0], hp - kh + 1, wp - kw + 1),
                               padded.dtype)


def blocked_weight_grad(padded: Tensor, grad: Tensor) -> Tensor:
    """The weight gradient of the stride-1 convolution of a padded input whose output's gradient
    is ``grad`` as the ``conv2d_weight`` extern."""
    n, c, hp, wp = padded.shape
    return padded._tracer.emit("conv2d_weight", (padded, grad), (grad.shape[1], c, hp - grad.shape[2] + 1,
                                                                 wp - grad.shape[3] + 1), padded.dtype)


def is_pointwise(weight_shape: tuple[int, ...], stride: Pair, groups: int) -> bool:
    """A 1x1 stride-1 convolution of one group: its columns are the input itself."""
    return tuple(weight_shape[2:]) == (1, 1) and stride == (1, 1) and groups == 1


def pointwise_correlate(x: Tensor, weight: Tensor) -> Tensor:
    """A pointwise convolution: the weight ``(C_out, C)`` times each image ``(C, H * W)``, read
    in place (no column buffer), the result already ``(N, C_out, H, W)`` in memory."""
    n, c, h, w = x.shape
    return (weight.reshape(weight.shape[0], c) @ x.reshape(n, c, h * w)).reshape(n, weight.shape[0], h, w)


def pointwise_weight_grad(grad: Tensor, x: Tensor, weight_shape: tuple[int, ...]) -> Tensor:
    """d loss / d weight of a pointwise convolution: each image's output gradient ``(C_out, H * W)``
    times its input transposed (both read in place), summed over the batch."""
    n, c, h, w = x.shape
    per_image = grad.reshape(n, weight_shape[0], h * w) @ x.reshape(n, c, h * w).transpose(1, 2)
    return per_image.sum(0).reshape(tuple(weight_shape))


def columns(windows: Tensor, groups: int) -> Tensor:
    """The windows ``(N, C, OH, OW, kH, kW)`` as each group's column matrix
    ``(groups, C / groups * kH * kW, N * OH * OW)``, without the group dim when there is one group
    (one pointwise kernel over the input writes it)."""
    n, c, oh, ow, kh, kw = windows.shape
    per_group = windows.reshape(n, groups, c // groups, oh, ow, kh, kw).permute(1, 2, 5, 6, 0, 3, 4)
    return per_group.reshape((groups,) * (groups > 1) + (c // groups * kh * kw, n * oh * ow))


def _per_group(matrix: Tensor, groups: int) -> Tensor:
    """A (rows, columns) matrix of each group: without the group dim for one group."""
    return matrix[0] if groups == 1 else matrix


def gemm_correlate(windows: Tensor, weight: Tensor, groups: int) -> Tensor:
    """The convolution of the windows ``(N, C, OH, OW, kH, kW)`` with ``weight`` as one
    BLAS matmul per group, read back as ``(N, C_out, OH, OW)``."""
    n, _, oh, ow, _, _ = windows.shape
    out_channels = weight.shape[0]
    rows = _per_group(weight.reshape(groups, out_channels // groups, -1), groups)
    product = rows @ columns(windows, groups)  # (groups, C_out / groups, N * OH * OW): (C_out, N, OH, OW) in memory
    return product.reshape(out_channels, n, oh, ow).permute(1, 0, 2, 3)


def gemm_weight_grad(grad: Tensor, windows: Tensor, weight_shape: tuple[int, ...], groups: int) -> Tensor:
    """d loss / d weight: each group's output gradient ``(C_out / groups, N * OH * OW)`` times its
    columns transposed (read in place)."""
    n, _, oh, ow, _, _ = windows.shape
    out_channels = weight_shape[0]
    per_group = grad.reshape(n, groups, out_channels // groups, oh * ow).permute(1, 2, 0, 3)
    rows = _per_group(per_group.reshape(groups, out_channels // groups, n * oh * ow), groups)
    product = rows @ columns(windows, groups).transpose(-1, -2)
    return product.reshape(tuple(weight_shape))
