"""Extern matmuls on the program's OpenMP team (the library calls of seed 8.5).

A multi-threaded BLAS leaves its helper threads spinning on the cores the next kernel needs, so
the wrapper holds numpy's BLAS at one thread during a call (``stax.kernels.blas_threads``).  To still
use every core, the BLAS ``gemm`` is called from every thread of an OpenMP parallel loop, each
on its share of the rows or columns (or of the batch): the team that runs the kernels is the only one.
It needs a CBLAS ``gemm`` (``stax.kernels.blas``: MKL's when installed, else numpy's OpenBLAS found
through threadpoolctl); otherwise, and for shapes it does not cover (broadcast batches), it is
``np.matmul`` on one BLAS thread.  Products of few rows by a long matrix (a convolution's weight by its columns) run
on ``stax.kernels.narrow_gemm``'s kernel instead, which reads the long matrix in place.  ``matmul_sum``
adds several products into one output, each gemm after the first accumulating into it
(``beta = 1``; a ``matmul_sum`` node of ``stax.passes.matmul_sums``).
"""
from __future__ import annotations

import ctypes
import enum
import functools
import math
from dataclasses import dataclass

import numpy as np

from stax.kernels import blas
from stax.kernels import narrow_gemm
from stax.runtime.build import build, load, native_isa

#: a matmul with fewer multiply-adds runs on the calling thread (a parallel region costs a few us)
PARALLEL_MATMUL_MIN = 1 << 16

_SOURCE = r"""
// gemm from every thread of an OpenMP team (stax/kernels/matmul.py): C = A B + beta C, row-major, contiguous.
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
    (``stax.kernels.blas``), or None when no CBLAS gemm of a known integer width is loaded."""
    found = blas.gemm(dtype)
    if found is None:
        return None
    entry = getattr(load(build(_SOURCE, native_isa())),
                    f"stax_gemm_{'f32' if dtype == 'float32' else 'f64'}_{found.integer_width}")
    entry.restype = None  # typed arguments: a call passes plain ints, which ctypes converts fastest
    entry.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_int] * 3 + \
        [ctypes.c_float if dtype == "float32" else ctypes.c_double]
    return entry, found.address


#: the dtypes with a gemm (``stax.kernels.blas``) ...
GEMM_DTYPES = ("float32", "float64")
#: ... by the dtype object (its name is slow to compute on every call)
_GEMM_DTYPES = {np.dtype(name): name for name in GEMM_DTYPES}


class Route(enum.Enum):
    """Which code computes a product (``plan_product``)."""

    EMPTY = "empty"  # nothing to multiply: the output is zeroed (or left, when accumulating)
    NARROW = "narrow"  # stax.kernels.narrow_gemm's kernel
    NARROW_GRADIENT = "narrow_gradient"  # ... its weight-gradient entry (b read transposed)
    TEAM = "team"  # the BLAS gemm from every thread of the OpenMP team
    NUMPY = "numpy"  # np.matmul on one BLAS thread (no CBLAS gemm, a broadcast batch, another layout)


@dataclass(frozen=True)
class Product:
    """How ``out = a @ b`` (``out += a @ b`` when ``accumulate``) runs: the decision
    ``parallel_matmul`` takes from the operands' shapes, dtypes and layouts, which a compiled
    call takes once, when it is generated, and replays (codegen/entry.py)."""

    route: Route
    dtype: str
    batch: int
    m: int
    n: int
    k: int
    a_step: int  # elements between the batch's matrices of a (0: one matrix for all)
    b_step: int
    transposed: tuple[bool, bool]
    threads: int
    accumulate: bool

    def addresses(self) -> tuple[int, ...]:
        """The entry points a compiled call calls: the narrow kernel's, or the team entry's and
        the BLAS gemm it calls."""
        if self.route in (Route.NARROW, Route.NARROW_GRADIENT):
            return (narrow_gemm.entry_address(self.route is Route.NARROW_GRADIENT),)
        if self.route is Route.TEAM:
            entry, gemm = _team_gemm(self.dtype)
            return ctypes.cast(entry, ctypes.c_void_p).value, gemm
        return ()


def _library_reads_in_place(b_shape: tuple[int, ...], transposed: tuple[bool, bool]) -> bool:
    """Whether the BLAS multiplies a few rows by ``b`` without packing it first, the cost the
    narrow kernel exists to avoid: MKL's small-row kernels read one matrix times one matrix in
    place, so such a product goes to the team gemm; a batch (a weight times each image) and a
    weight gradient keep the narrow kernel."""
    found = blas.gemm("float32")
    return found is not None and found.provider == "mkl" and len(b_shape) == 2 and not transposed[1]


@functools.lru_cache(maxsize=4096)
def plan_product(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: str | None,
                 contiguous: bool, threads: int, transposed: tuple[bool, bool] = (False, False),
                 accumulate: bool = False) -> Product:
    """The product of operands of these shapes into ``out_shape``: ``dtype`` is the dtype of all
    three (None when they differ), ``contiguous`` whether all three are C-contiguous; a
    ``transposed`` operand holds its matrix transposed (``w`` for ``x @ w.t()``).  The team
    gemm takes ``b`` one matrix or of ``out``'s batch, and ``a`` of that batch too or one matrix
    broadcast over it (a convolution's weight times each image's columns)."""
    (m, k), n = ((a_shape[-1], a_shape[-2]) if transposed[0] else a_shape[-2:]), out_shape[-1]
    flat = len(a_shape) == len(b_shape) == 2
    batched = len(b_shape) == len(out_shape) >= 3 and len(a_shape) in (2, len(b_shape)) and \
        a_shape[:-2] in ((), b_shape[:-2]) and b_shape[:-2] == out_shape[:-2]
    batch = 1 if flat else math.prod(out_shape[:-2])
    if math.prod(out_shape) * k < PARALLEL_MATMUL_MIN:
        threads = 1
    a_step, b_step = (0 if flat or len(a_shape) == 2 else m * k), (0 if flat else k * n)
    if math.prod(out_shape) == 0 or k == 0:  # nothing to multiply (a BLAS refuses a leading dimension of 0)
        route = Route.EMPTY
    elif dtype == "float32" and contiguous and narrow_gemm.fits(a_shape, b_shape, out_shape, transposed) and \
            not _library_reads_in_place(b_shape, transposed):
        route, batch = (Route.NARROW_GRADIENT, 1) if transposed[1] else (Route.NARROW, batch)
    elif dtype is None or not contiguous or not (flat or batched) or _team_gemm(dtype) is None:
        route = Route.NUMPY
    else:
        route = Route.TEAM
    return Product(route, dtype or "", batch, m, n, k, a_step, b_step, transposed, threads, accumulate)


def run_product(product: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``product`` on these operands (of the shapes it was planned for)."""
    route = product.route
    if route is Route.NARROW or route is Route.NARROW_GRADIENT:
        narrow_gemm.narrow_matmul(a, b, out, product.threads, product.transposed, product.accumulate)
    elif route is Route.TEAM:
        entry, gemm = _team_gemm(product.dtype)
        ta, tb = product.transposed
        entry(gemm, a.ctypes.data, b.ctypes.data, out.ctypes.data, product.batch, product.m, product.n, product.k,
              product.a_step, product.b_step, int(ta), int(tb), product.threads, 1.0 if product.accumulate else 0.0)
    elif route is Route.EMPTY:
        if not product.accumulate:
            out.fill(0)
    else:
        left, right = (x.swapaxes(-1, -2) if t else x for x, t in zip((a, b), product.transposed))
        if product.accumulate:  # no gemm to accumulate with: the product, then its sum
            out += np.matmul(left, right)
        else:
            np.matmul(left, right, out=out)


def parallel_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int,
                    transposed: tuple[bool, bool] = (False, False), accumulate: bool = False) -> None:
    """``np.matmul(a, b, out=out)``, or ``out += a @ b`` when ``accumulate``, where a
    ``transposed`` operand holds its matrix transposed, on ``threads`` OpenMP threads where
    ``plan_product`` finds a gemm for it."""
    dtype = _GEMM_DTYPES.get(out.dtype) if a.dtype is b.dtype is out.dtype else None
    contiguous = a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
    run_product(plan_product(a.shape, b.shape, out.shape, dtype, contiguous, threads, transposed, accumulate),
                a, b, out)


def matmul_sum(*operands: np.ndarray, out: np.ndarray, threads: int, transposed: tuple[bool, ...] = ()) -> None:
    """``out = a_1 @ b_1 + a_2 @ b_2 + ...`` for ``operands = (a_1, b_1, a_2, b_2, ...)``, each
    product as ``parallel_matmul``'s (``transposed`` holds one flag an operand), the first writing
    ``out`` and the others accumulating into it."""
    for i, j, flags, accumulate in product_terms("matmul_sum", len(operands), transposed):
        parallel_matmul(operands[i], operands[j], out, threads, flags, accumulate)


def product_terms(op: str, operands: int, transposed: tuple[bool, ...] = ()) \
        -> list[tuple[int, int, tuple[bool, bool], bool]]:
    """The products an extern ``op`` (matmul or matmul_sum) of ``operands`` makes, in order: the
    operands' positions, their ``transposed`` flags and whether the product accumulates."""
    flags = transposed or (False,) * operands
    pairs = range(0, operands, 2) if op == "matmul_sum" else (0,)
    return [(i, i + 1, (flags[i], flags[i + 1]), i > 0) for i in pairs]

