"""A blocked direct 2-D convolution (stride 1, one group), float32, on an already padded input,
and its weight gradient: the graph's ``conv2d`` and ``conv2d_weight`` externs, the blocked form
``stax.frontend.ops.conv_forms``'s rule picks for a wide convolution and its two gradients
(``python -m experiments.bench.conv`` measures it against the GEMM form and a BLAS GEMM of the
same FLOPs).

The GEMM form writes its im2col columns, ``C * kH * kW`` times the input, to memory and reads them
back.  Here the columns are never stored: an output row over the padded width is the sum, over the
taps ``(ci, kh, kw)``, of the weight's column times the padded input shifted by
``ci * HP * WP + kh * WP + kw`` (an implicit GEMM).  The same register tile as the narrow GEMM's
(``stax_sweep.h``: 8 output channels by two vectors of outputs at 16 lanes, every tap's
multiply-adds in registers) reads each shifted row from L1::

    out[n, co, oh, ow] = sum over ci, kh, kw of w[co, ci, kh, kw] * xp[n, ci, oh + kh, ow + kw]

The ``WP - OW`` outputs a row computes past ``OW`` are dropped when the tile is stored.

The weight gradient (the ``conv2d_weight`` extern) runs on the same tile, transposed: taps by
output channels, the shifted input rows broadcast and the output gradient laid over the padded
width, channels last (zeros past ``OW``), read as vectors; the reduction runs over every image's
outputs::

    dw[co, ci, kh, kw] = sum over n, oh, ow of g[n, co, oh, ow] * xp[n, ci, oh + kh, ow + kw]
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from stax.environment import isa_from_env
from stax.errors import ShapeError
from stax.kernels.libraries import library
from stax.runtime.build import check_scratch
from stax.target import Isa



@functools.cache
def _entry(isa: Isa, weight_grad: bool) -> ctypes._CFuncPtr:
    built = library("direct_conv", isa)
    entry = built.stax_direct_conv_weight_grad if weight_grad else built.stax_direct_conv
    entry.restype = ctypes.c_int64  # 0, or minus the bytes of scratch it could not allocate
    if weight_grad:  # xp, g, dw, sizes, threads
        entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 7 + [ctypes.c_int]
    else:  # xp, w, out, scale, shift, sizes, relu, threads
        entry.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7 + [ctypes.c_int] * 2
    return entry


@dataclass(frozen=True)
class DirectConv:
    """A ``conv2d`` extern, or with ``weight_grad`` a ``conv2d_weight`` one, as a compiled call
    makes it (codegen/entry.py): the entry point built for ``isa``, the shapes of the
    convolution the call was generated for (its input padded, its weight) and the convolution's
    epilogue (``stax.passes.conv_epilogues``): whether it takes a per-channel scale and shift, and a ReLU."""

    n: int
    c: int
    hp: int
    wp: int
    co: int
    kh: int
    kw: int
    threads: int
    isa: Isa
    weight_grad: bool = False
    scale: bool = False
    shift: bool = False
    relu: bool = False

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """The weight's shape for the weight gradient, else the convolution's output's."""
        return (self.co, self.c, self.kh, self.kw) if self.weight_grad else \
            (self.n, self.co, self.hp - self.kh + 1, self.wp - self.kw + 1)

    def addresses(self) -> tuple[int, ...]:
        return (ctypes.cast(_entry(self.isa, self.weight_grad), ctypes.c_void_p).value,)

    def arguments(self) -> tuple[int, ...]:
        """What the entry point takes after its arrays (three, or the convolution's five with the
        scale and the shift): the sizes, the convolution's ReLU flag, the threads."""
        sizes = (self.n, self.c, self.hp, self.wp, self.co, self.kh, self.kw)
        return (*sizes, self.threads) if self.weight_grad else (*sizes, int(self.relu), self.threads)

    def call_line(self, operands: list[str], out: str) -> str:
        """The compiled call's C++ call of the entry (``entry``) on the addresses ``operands``
        (the input, the weight or gradient, then the scale and shift it has) and ``out``."""
        x, w, *channels = (f"(const float*){a}" for a in operands)
        sizes = ", ".join(map(str, self.arguments()))
        if self.weight_grad:
            return f"stax::direct_conv_weight_grad(entry, {x}, {w}, (float*){out}, {sizes})"
        given = iter(channels)
        vectors = ", ".join(next(given) if flag else "nullptr" for flag in (self.scale, self.shift))
        return f"stax::direct_conv(entry, {x}, {w}, (float*){out}, {vectors}, {sizes})"


def _not_4d(*shapes: tuple[int, ...]) -> bool:
    return any(len(shape) != 4 for shape in shapes)


def plan_direct_conv(padded_shape: tuple[int, ...], weight_shape: tuple[int, ...], threads: int, isa: Isa, *,
                     scale: bool = False, shift: bool = False, relu: bool = False) -> DirectConv:
    """The call of a convolution of a padded input of ``padded_shape`` (N, C, HP, WP) with a
    weight of ``weight_shape`` (C_out, C, kH, kW), and the epilogue its tiles are stored through."""
    if _not_4d(padded_shape, weight_shape) or weight_shape[1] != padded_shape[1] or \
            weight_shape[2] > padded_shape[2] or weight_shape[3] > padded_shape[3]:
        raise ShapeError(f"direct_conv: a weight of shape {tuple(weight_shape)} does not fit an input of shape "
                         f"{tuple(padded_shape)} (expected (N, C, HP, WP) and (C_out, C, kH, kW): the channels "
                         "must match and the taps fit the padded image)")
    n, c, hp, wp = padded_shape
    co, _, kh, kw = weight_shape
    return DirectConv(n, c, hp, wp, co, kh, kw, threads, isa, scale=scale, shift=shift, relu=relu)


def plan_direct_conv_weight_grad(padded_shape: tuple[int, ...], grad_shape: tuple[int, ...], threads: int,
                                 isa: Isa) -> DirectConv:
    """The call of the weight gradient of a stride-1 convolution of a padded input of
    ``padded_shape`` (N, C, HP, WP) given its output's gradient of ``grad_shape`` (N, C_out, OH, OW)."""
    if _not_4d(padded_shape, grad_shape) or grad_shape[0] != padded_shape[0] or \
            not 0 < grad_shape[2] <= padded_shape[2] or not 0 < grad_shape[3] <= padded_shape[3]:
        raise ShapeError(f"direct_conv_weight_grad: a gradient of shape {tuple(grad_shape)} is not the output of a "
                         f"stride-1 convolution of an input of shape {tuple(padded_shape)} (expected (N, C, HP, WP) "
                         "and (N, C_out, OH, OW) with the same N, OH <= HP and OW <= WP)")
    n, c, hp, wp = padded_shape
    return DirectConv(n, c, hp, wp, grad_shape[1], hp - grad_shape[2] + 1, wp - grad_shape[3] + 1, threads, isa, True)


def _check(op: str, padded: np.ndarray, other: np.ndarray, out: np.ndarray, plan: DirectConv) -> None:
    """Raise a ShapeError naming what is wrong with the arrays of extern ``op``."""
    arrays = (padded, other, out)
    if any(a.dtype != np.float32 or a.ndim != 4 or not a.flags.c_contiguous for a in arrays):
        raise ShapeError(f"{op}: expected C-contiguous 4-D float32 arrays, got "
                         f"{', '.join(f'{a.dtype} {a.shape}' for a in arrays)}")
    if out.shape != plan.out_shape:
        raise ShapeError(f"{op}: the output has shape {out.shape}, expected {plan.out_shape}")


def _address(array: np.ndarray, which: str, co: int) -> int:
    """The address of the epilogue's per-channel ``which`` (scale or shift)."""
    if array.dtype != np.float32 or array.shape != (co,) or not array.flags.c_contiguous:
        raise ShapeError(f"conv2d: the epilogue's {which} must be a contiguous float32 vector of the {co} output "
                         f"channels, got {array.dtype} {array.shape}")
    return array.ctypes.data


def direct_conv(padded: np.ndarray, weight: np.ndarray, *channels: np.ndarray, out: np.ndarray, threads: int,
                scale: bool = False, shift: bool = False, relu: bool = False, isa: Isa | None = None) -> None:
    """``out`` (N, C_out, HP - kH + 1, WP - kW + 1) = the stride-1 convolution of ``padded``
    (N, C, HP, WP) with ``weight`` (C_out, C, kH, kW), all float32 and C-contiguous (the graph's
    ``conv2d`` extern), through its epilogue: times ``channels``' scale (C_out,) when ``scale``,
    plus their shift when ``shift`` (in that order), then max(0, .) when ``relu``; by the kernel
    built for ``isa`` (None: ``STAX_ISA``, else this CPU's widest level)."""
    if len(channels) != scale + shift:
        raise ShapeError(f"conv2d: {len(channels)} per-channel operands for an epilogue with "
                         f"scale={scale} and shift={shift} (one each)")
    plan = plan_direct_conv(padded.shape, weight.shape, threads, isa or isa_from_env(), scale=scale, shift=shift,
                            relu=relu)
    _check("conv2d", padded, weight, out, plan)
    given = iter(channels)
    vectors = [_address(next(given), which, plan.co) if flag else None
               for which, flag in (("scale", scale), ("shift", shift))]
    # the entries take every size: no image or output channel writes nothing, no input channel zeros
    check_scratch(_entry(plan.isa, False)(padded.ctypes.data, weight.ctypes.data, out.ctypes.data, *vectors,
                                          *plan.arguments()))


def direct_conv_weight_grad(padded: np.ndarray, grad: np.ndarray, *, out: np.ndarray, threads: int,
                            isa: Isa | None = None) -> None:
    """``out`` (C_out, C, kH, kW) = the weight gradient of the stride-1 convolution of ``padded``
    (N, C, HP, WP) whose output's gradient is ``grad`` (N, C_out, OH, OW): the sum over the images
    and outputs of the gradient times the input under each tap (the graph's ``conv2d_weight``
    extern), by the kernel built for ``isa`` (as ``direct_conv``)."""
    plan = plan_direct_conv_weight_grad(padded.shape, grad.shape, threads, isa or isa_from_env())
    _check("conv2d_weight", padded, grad, out, plan)
    check_scratch(_entry(plan.isa, True)(padded.ctypes.data, grad.ctypes.data, out.ctypes.data, *plan.arguments()))


def direct_conv2d(padded: np.ndarray, weight: np.ndarray, threads: int = 1, isa: Isa | None = None, *,
                  scale: np.ndarray | None = None, shift: np.ndarray | None = None, relu: bool = False) -> np.ndarray:
    """``direct_conv`` into a new array, through the epilogue of the given scale and shift and relu."""
    isa = isa or isa_from_env()
    out = np.empty(plan_direct_conv(padded.shape, weight.shape, threads, isa).out_shape, np.float32)
    channels = [v for v in (scale, shift) if v is not None]
    direct_conv(padded, weight, *channels, out=out, threads=threads, scale=scale is not None,
                shift=shift is not None, relu=relu, isa=isa)
    return out


def direct_conv2d_weight_grad(padded: np.ndarray, grad: np.ndarray, threads: int = 1,
                              isa: Isa | None = None) -> np.ndarray:
    """``direct_conv_weight_grad`` into a new array."""
    isa = isa or isa_from_env()
    out = np.empty(plan_direct_conv_weight_grad(padded.shape, grad.shape, threads, isa).out_shape, np.float32)
    direct_conv_weight_grad(padded, grad, out=out, threads=threads, isa=isa)
    return out
