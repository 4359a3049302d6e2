"""Extern matmuls on the program's OpenMP team (the library calls of spec 8.5).

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

from stax.environment import isa_from_env
from stax.kernels import blas
from stax.kernels import narrow_gemm
from stax.kernels.libraries import library
from stax.target import Isa

#: a matmul with fewer multiply-adds runs on the calling thread (a parallel region costs a few us)
PARALLEL_MATMUL_MIN = 1 << 16



@functools.cache
def _team_gemm(dtype: str, isa: Isa) -> tuple[ctypes._CFuncPtr, int] | None:
    """The team entry point for ``dtype`` built for ``isa`` and the address of the BLAS ``gemm`` it
    calls (``stax.kernels.blas``), or None when no CBLAS gemm of a known integer width is loaded."""
    found = blas.gemm(dtype)
    if found is None:
        return None
    entry = getattr(library("team_gemm", isa),
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
    call takes once, when it is generated, and replays (codegen/entry.py); its kernels are the
    ones built for ``isa``."""

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
    isa: Isa

    def addresses(self) -> tuple[int, ...]:
        """The entry points a compiled call calls: the narrow kernel's, or the team entry's and
        the BLAS gemm it calls."""
        if self.route in (Route.NARROW, Route.NARROW_GRADIENT):
            return (narrow_gemm.entry_address(self.route is Route.NARROW_GRADIENT, self.isa),)
        if self.route is Route.TEAM:
            entry, gemm = _team_gemm(self.dtype, self.isa)
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
                 contiguous: bool, threads: int, isa: Isa, transposed: tuple[bool, bool] = (False, False),
                 accumulate: bool = False) -> Product:
    """The product of operands of these shapes into ``out_shape`` by kernels built for ``isa``:
    ``dtype`` is the dtype of all three (None when they differ), ``contiguous`` whether all three
    are C-contiguous; a
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
    elif dtype == "float32" and contiguous and narrow_gemm.fits(a_shape, b_shape, out_shape, transposed, isa) and \
            not _library_reads_in_place(b_shape, transposed):
        route, batch = (Route.NARROW_GRADIENT, 1) if transposed[1] else (Route.NARROW, batch)
    elif dtype is None or not contiguous or not (flat or batched) or _team_gemm(dtype, isa) is None:
        route = Route.NUMPY
    else:
        route = Route.TEAM
    return Product(route, dtype or "", batch, m, n, k, a_step, b_step, transposed, threads, accumulate, isa)


def run_product(product: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``product`` on these operands (of the shapes it was planned for)."""
    route = product.route
    if route is Route.NARROW or route is Route.NARROW_GRADIENT:
        narrow_gemm.narrow_matmul(a, b, out, product.threads, product.transposed, product.accumulate, product.isa)
    elif route is Route.TEAM:
        entry, gemm = _team_gemm(product.dtype, product.isa)
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
                    transposed: tuple[bool, bool] = (False, False), accumulate: bool = False,
                    isa: Isa | None = None) -> None:
    """``np.matmul(a, b, out=out)``, or ``out += a @ b`` when ``accumulate``, where a
    ``transposed`` operand holds its matrix transposed, on ``threads`` OpenMP threads where
    ``plan_product`` finds a gemm for it, by kernels built for ``isa`` (None: ``STAX_ISA``, else
    this CPU's widest level)."""
    dtype = _GEMM_DTYPES.get(out.dtype) if a.dtype is b.dtype is out.dtype else None
    contiguous = a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
    run_product(plan_product(a.shape, b.shape, out.shape, dtype, contiguous, threads, isa or isa_from_env(),
                             transposed, accumulate), a, b, out)


def matmul_sum(*operands: np.ndarray, out: np.ndarray, threads: int, transposed: tuple[bool, ...] = (),
               isa: Isa | None = None) -> None:
    """``out = a_1 @ b_1 + a_2 @ b_2 + ...`` for ``operands = (a_1, b_1, a_2, b_2, ...)``, each
    product as ``parallel_matmul``'s (``transposed`` holds one flag an operand), the first writing
    ``out`` and the others accumulating into it."""
    isa = isa or isa_from_env()
    for i, j, flags, accumulate in product_terms("matmul_sum", len(operands), transposed):
        parallel_matmul(operands[i], operands[j], out, threads, flags, accumulate, isa)


def product_terms(op: str, operands: int, transposed: tuple[bool, ...] = ()) \
        -> list[tuple[int, int, tuple[bool, bool], bool]]:
    """The products an extern ``op`` (matmul or matmul_sum) of ``operands`` makes, in order: the
    operands' positions, their ``transposed`` flags and whether the product accumulates."""
    flags = transposed or (False,) * operands
    pairs = range(0, operands, 2) if op == "matmul_sum" else (0,)
    return [(i, i + 1, (flags[i], flags[i + 1]), i > 0) for i in pairs]

