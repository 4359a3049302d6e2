"""Extern matmuls on the program's OpenMP team (the library calls of seed 8.5).

A multi-threaded BLAS leaves its helper threads spinning on the cores the next kernel needs, so
the wrapper holds numpy's BLAS at one thread during a call (``stax.blas_threads``).  To still
use every core, the BLAS ``gemm`` is called from every thread of an OpenMP parallel loop, each
on its share of the rows or columns (or of the batch): the team that runs the kernels is the only one.
It needs a CBLAS ``gemm`` (``stax.blas``: MKL's when installed, else numpy's OpenBLAS found
through threadpoolctl); otherwise, and for shapes it does not cover (broadcast batches), it is
``np.matmul`` on one BLAS thread.  Products of few rows by a long matrix (a convolution's weight by its columns) run
on ``stax.narrow_gemm``'s kernel instead, which reads the long matrix in place.  ``matmul_sum``
adds several products into one output, each gemm after the first accumulating into it
(``beta = 1``; a ``matmul_sum`` node of ``stax.matmul_sums``).
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import blas, narrow_gemm
from .runtime import build, load, native_isa

#: a matmul with fewer multiply-adds runs on the calling thread (a parallel region costs a few us)
PARALLEL_MATMUL_MIN = 1 << 16

_SOURCE = r"""
// gemm from every thread of an OpenMP team (stax/matmul.py): C = A B + beta C, row-major, contiguous.
#include <cstdint>
template <typename I, typename T>
using gemm_fn = void (*)(int, int, int, I, I, I, T, const T*, I, const T*, I, T, T*, I);

// A (m x k) is stored as k x m when ta, B (k x n) as n x k when tb (a transposed operand read in place).
// A batch shorter than the team splits each product into `threads` parts along its wider side: its
// rows when m >= n, else its columns (a weight of few rows times a convolution's long column matrix
// would otherwise be read once a part).
template <typename I, typename T>
static void team_gemm(void* fn, const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n, int64_t k,
                      int64_t a_step, int64_t b_step, int ta, int tb, int threads, T beta) {
  auto gemm = reinterpret_cast<gemm_fn<I, T>>(fn);
  const int64_t parts = batch >= threads ? 1 : threads;
  const bool by_rows = m >= n;
  const int64_t side = by_rows ? m : n;
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t task = 0; task < batch * parts; ++task) {
    const int64_t p = task / parts, lo = side * (task % parts) / parts, hi = side * (task % parts + 1) / parts;
    if (hi <= lo) continue;
    // rows lo..hi of A (columns of its stored k x m when ta), or columns lo..hi of B (rows of its n x k when tb)
    const T* a_part = a + p * a_step + (by_rows ? (ta ? lo : lo * k) : 0);
    const T* b_part = b + p * b_step + (by_rows ? 0 : (tb ? lo * k : lo));
    T* c_part = c + p * m * n + (by_rows ? lo * n : lo);
    // CblasRowMajor; CblasNoTrans (111) or CblasTrans (112)
    gemm(101, ta ? 112 : 111, tb ? 112 : 111, I(by_rows ? hi - lo : m), I(by_rows ? n : hi - lo), I(k), T(1), a_part,
         I(ta ? m : k), b_part, I(tb ? k : n), beta, c_part, I(n));
  }
}
#define STAX_GEMM(name, I, T) \
  extern "C" void name(void* fn, const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t n, int64_t k, \
                       int64_t a_step, int64_t b_step, int ta, int tb, int threads, T beta) { \
    team_gemm<I, T>(fn, a, b, c, batch, m, n, k, a_step, b_step, ta, tb, threads, beta); }
STAX_GEMM(stax_gemm_f32_i32, int32_t, float)
STAX_GEMM(stax_gemm_f64_i32, int32_t, double)
STAX_GEMM(stax_gemm_f32_i64, int64_t, float)
STAX_GEMM(stax_gemm_f64_i64, int64_t, double)
"""


@functools.cache
def _team_gemm(dtype: str) -> tuple[ctypes._CFuncPtr, int] | None:
    """The team entry point for ``dtype`` and the address of the BLAS ``gemm`` it calls
    (``stax.blas``), or None when no CBLAS gemm of a known integer width is loaded."""
    found = blas.gemm(dtype)
    if found is None:
        return None
    entry = getattr(load(build(_SOURCE, native_isa())),
                    f"stax_gemm_{'f32' if dtype == 'float32' else 'f64'}_{found.integer_width}")
    entry.restype = None  # typed arguments: a call passes plain ints, which ctypes converts fastest
    entry.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_int] * 3 + \
        [ctypes.c_float if dtype == "float32" else ctypes.c_double]
    return entry, found.address


#: the dtypes with a team gemm, by the dtype object (its name is slow to compute on every call)
_GEMM_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def parallel_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int,
                    transposed: tuple[bool, bool] = (False, False), accumulate: bool = False) -> None:
    """``np.matmul(a, b, out=out)`` for contiguous operands, or ``out += a @ b`` when
    ``accumulate``, where a ``transposed`` operand holds its matrix transposed (``w`` for
    ``x @ w.t()``); on ``threads`` OpenMP threads when the BLAS is reachable and ``b`` is one
    matrix or has ``out``'s batch (``a`` has it too, or is one matrix broadcast over the batch: a
    convolution's weight times each image's columns)."""
    left, right = (x.swapaxes(-1, -2) if t else x for x, t in zip((a, b), transposed))
    flat = b.ndim == 2 and a.ndim == 2
    batched = b.ndim == out.ndim >= 3 and a.ndim in (2, b.ndim) and a.shape[:-2] in ((), b.shape[:-2]) and \
        b.shape[:-2] == out.shape[:-2]
    m, k, n = left.shape[-2], left.shape[-1], out.shape[-1]
    if out.size == 0 or k == 0:  # nothing to multiply (a BLAS refuses a leading dimension of 0)
        if not accumulate:
            out.fill(0)
        return
    name = _GEMM_DTYPES.get(out.dtype)
    team = _team_gemm(name) if name else None
    if out.size * k < PARALLEL_MATMUL_MIN:
        threads = 1
    if narrow_gemm.applies(a, b, out, transposed):
        narrow_gemm.narrow_matmul(a, b, out, threads, transposed, accumulate)
        return
    if team is None or not (flat or batched) or not all(x.flags.c_contiguous for x in (a, b, out)) or \
            a.dtype != out.dtype or b.dtype != out.dtype:
        if accumulate:  # no gemm to accumulate with: the product, then its sum
            out += np.matmul(left, right)
        else:
            np.matmul(left, right, out=out)
        return
    entry, gemm = team
    batch = 1 if flat else math.prod(out.shape[:-2])
    entry(gemm, a.ctypes.data, b.ctypes.data, out.ctypes.data, batch, m, n, k,
          0 if flat or a.ndim == 2 else m * k, 0 if flat else k * n, int(transposed[0]), int(transposed[1]), threads,
          1.0 if accumulate else 0.0)


def matmul_sum(*operands: np.ndarray, out: np.ndarray, threads: int, transposed: tuple[bool, ...] = ()) -> None:
    """``out = a_1 @ b_1 + a_2 @ b_2 + ...`` for ``operands = (a_1, b_1, a_2, b_2, ...)``, each
    product as ``parallel_matmul``'s (``transposed`` holds one flag an operand), the first writing
    ``out`` and the others accumulating into it."""
    flags = transposed or (False,) * len(operands)
    for i in range(0, len(operands), 2):
        parallel_matmul(operands[i], operands[i + 1], out, threads, (flags[i], flags[i + 1]), accumulate=i > 0)


#: the extern ops of the graph (``stax.graph.EXTERN_OPS``) and the calls that run them
EXTERN_CALLS = {"matmul": parallel_matmul, "matmul_sum": matmul_sum}
