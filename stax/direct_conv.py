"""A blocked direct 2-D convolution (stride 1, one group), float32, on an already padded input:
the graph's ``conv2d`` extern, the blocked form ``stax.conv_gemm``'s rule picks for a wide
convolution and its input gradient (``python -m experiments.bench_conv`` measures it against the
GEMM form and a BLAS GEMM of the same FLOPs).

The GEMM form writes its im2col columns, ``C * kH * kW`` times the input, to memory and reads them
back.  Here the columns are never stored: an output row over the padded width is the sum, over the
taps ``(ci, kh, kw)``, of the weight's column times the padded input shifted by
``ci * HP * WP + kh * WP + kw`` (an implicit GEMM).  The same register tile as the narrow GEMM's
(``stax_sweep.h``: 8 output channels by two vectors of outputs at 16 lanes, every tap's
multiply-adds in registers) reads each shifted row from L1::

    out[n, co, oh, ow] = sum over ci, kh, kw of w[co, ci, kh, kw] * xp[n, ci, oh + kh, ow + kw]

The ``WP - OW`` outputs a row computes past ``OW`` are dropped when the tile is stored.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from .errors import ShapeError
from .runtime import Isa, build, load, native_isa

_SOURCE = r"""
#include <cstring>
#include <memory>
#include "stax_sweep.h"
constexpr int64_t PANEL = 2 * STAX_W;  // outputs a tile computes along the padded width

// xp (n, c, hp, wp) padded, w (co, c, kh, kw), out (n, co, hp - kh + 1, wp - kw + 1)
extern "C" void stax_direct_conv(const float* xp, const float* w, float* out, int64_t n, int64_t c, int64_t hp,
                                 int64_t wp, int64_t co, int64_t kh, int64_t kw, int threads) {
  if (n <= 0 || co <= 0) return;  // no output (the last image's copy below needs an image)
  const int64_t oh = hp - kh + 1, ow = wp - kw + 1, plane = hp * wp, image = c * plane, taps = c * kh * kw;
  const int64_t columns = oh * wp, panels = (columns + PANEL - 1) / PANEL;
  std::unique_ptr<int64_t[]> shift(new int64_t[taps]);
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) shift[(ci * kh + a) * kw + b] = ci * plane + a * wp + b;
  // panel t reads the image up to t * PANEL + PANEL + kw - 2 + (c - 1) * plane + (kh - 1) * wp: the
  // last image's panels that would read past it read a copy of it with zeros after it instead
  const int64_t slack = PANEL + kw, room = plane - (kh - 1) * wp - PANEL - kw + 2;
  const int64_t tail = panels - std::min(panels, room > 0 ? (room + PANEL - 1) / PANEL : 0);
  std::unique_ptr<float[]> last;
  if (tail > 0) {
    last.reset(new float[image + slack]());
    std::memcpy(last.get(), xp + (n - 1) * image, image * sizeof(float));
  }
  const int64_t* offsets = shift.get();
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (int64_t task = 0; task < n * panels; ++task) {
    const int64_t img = task / panels, j = task % panels * PANEL;
    const float* x = img == n - 1 && task % panels >= panels - tail ? last.get() : xp + img * image;
    // the panel's outputs as runs along output rows: (offset in the tile, offset in a channel, length)
    int64_t runs[PANEL + 2][3], count = 0;
    for (int64_t col = j, end = std::min(j + PANEL, columns); col < end;) {
      const int64_t r = col / wp, q = col - r * wp;
      if (q < ow) {
        const int64_t length = std::min(ow - q, end - col);
        runs[count][0] = col - j, runs[count][1] = r * ow + q, runs[count++][2] = length;
      }
      col += wp - q;
    }
    alignas(64) float tile[stax::SWEEP_ROWS * PANEL];
    for (int64_t m0 = 0, mr; m0 < co; m0 += mr) {
      mr = stax::tile_rows(co, m0);
      stax::sweep_rows<2>(mr, w + m0 * taps, taps, [=](int64_t p) { return x + j + offsets[p]; }, tile, PANEL, taps,
                          false);
      for (int64_t i = 0; i < mr; ++i) {
        float* channel = out + (img * co + m0 + i) * oh * ow;
        for (int64_t k = 0; k < count; ++k)
          std::memcpy(channel + runs[k][1], tile + i * PANEL + runs[k][0], runs[k][2] * sizeof(float));
      }
    }
  }
}
"""


@functools.cache
def _entry(isa: Isa) -> ctypes._CFuncPtr:
    entry = load(build(_SOURCE, isa)).stax_direct_conv
    entry.restype = None
    entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 7 + [ctypes.c_int]
    return entry


@dataclass(frozen=True)
class DirectConv:
    """A ``conv2d`` extern as a compiled call makes it (codegen/entry.py): the entry point built
    for this CPU and the shapes the call was generated for."""

    n: int
    c: int
    hp: int
    wp: int
    co: int
    kh: int
    kw: int
    threads: int

    def addresses(self) -> tuple[int, ...]:
        return (ctypes.cast(_entry(native_isa()), ctypes.c_void_p).value,)

    def arguments(self) -> tuple[int, ...]:
        """The sizes the entry point takes after its three arrays."""
        return self.n, self.c, self.hp, self.wp, self.co, self.kh, self.kw, self.threads


def plan_direct_conv(padded_shape: tuple[int, ...], weight_shape: tuple[int, ...], threads: int) -> DirectConv:
    """The call of a convolution of a padded input of ``padded_shape`` (N, C, HP, WP) with a
    weight of ``weight_shape`` (C_out, C, kH, kW)."""
    if len(padded_shape) != 4 or len(weight_shape) != 4 or weight_shape[1] != padded_shape[1] or \
            weight_shape[2] > padded_shape[2] or weight_shape[3] > padded_shape[3]:
        raise ShapeError(f"direct_conv: a weight of shape {tuple(weight_shape)} does not fit an input of shape "
                         f"{tuple(padded_shape)} (expected (N, C, HP, WP) and (C_out, C, kH, kW): the channels "
                         "must match and the taps fit the padded image)")
    n, c, hp, wp = padded_shape
    co, _, kh, kw = weight_shape
    return DirectConv(n, c, hp, wp, co, kh, kw, threads)


def direct_conv(padded: np.ndarray, weight: np.ndarray, *, out: np.ndarray, threads: int,
                isa: Isa | None = None) -> None:
    """``out`` (N, C_out, HP - kH + 1, WP - kW + 1) = the stride-1 convolution of ``padded``
    (N, C, HP, WP) with ``weight`` (C_out, C, kH, kW), all float32 and C-contiguous (the graph's
    ``conv2d`` extern)."""
    arrays = (padded, weight, out)
    if any(a.dtype != np.float32 or a.ndim != 4 or not a.flags.c_contiguous for a in arrays):
        raise ShapeError("direct_conv: expected C-contiguous float32 arrays (N, C, HP, WP), (C_out, C, kH, kW) and "
                         f"the output, got {', '.join(f'{a.dtype} {a.shape}' for a in arrays)}")
    plan = plan_direct_conv(padded.shape, weight.shape, threads)
    want = (plan.n, plan.co, plan.hp - plan.kh + 1, plan.wp - plan.kw + 1)
    if out.shape != want:
        raise ShapeError(f"direct_conv: the output has shape {out.shape}, the convolution {want}")
    # the entry takes every size: no image or output channel writes nothing, no input channel zeros
    _entry(isa or native_isa())(padded.ctypes.data, weight.ctypes.data, out.ctypes.data, *plan.arguments())


def direct_conv2d(padded: np.ndarray, weight: np.ndarray, threads: int = 1, isa: Isa | None = None) -> np.ndarray:
    """``direct_conv`` into a new array."""
    out = np.empty((padded.shape[0], weight.shape[0], padded.shape[2] - weight.shape[2] + 1,
                    padded.shape[3] - weight.shape[3] + 1), np.float32) if padded.ndim == weight.ndim == 4 \
        else np.empty(0, np.float32)
    direct_conv(padded, weight, out=out, threads=threads, isa=isa)
    return out
