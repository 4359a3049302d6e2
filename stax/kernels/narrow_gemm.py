"""A float32 GEMM for products of few rows by a long matrix, read in place (spec 8.5's library call,
written for the shape a convolution's GEMM form has).

A convolution's GEMM multiplies a weight of a few dozen rows (the output channels) by a column
matrix of ``batch * OH * OW`` columns.  A BLAS copies the whole column matrix into its packed
layout first, which costs about as much as the product when the rows are few.  This kernel
reads the column matrix a panel at a time: each tile of 8 rows (6 at 8 lanes) by two vectors keeps
its sums in registers over a block of ``KC`` rows of the long matrix.  With more than one row
tile, a block is first copied into a contiguous panel that the row tiles share (the long
matrix's rows alias in the cache when their length is a multiple of 4 KiB); the first row tile
of a panel prefetches the next panel's block.  A weight gradient (the output gradient times the
columns read transposed) runs as its transpose, the columns' rows times the gradient's
transpose; with few columns' rows (a stem's 3 channels times 9 taps), as dot products along
the rows of both where they lie, with no transposes.  ``python -m
experiments.bench.narrow_gemm`` times it against the BLAS.
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from stax.environment import isa_from_env
from stax.kernels.libraries import library
from stax.runtime.build import check_scratch
from stax.target import Isa

#: the kernel takes products of at most this many rows (its row tiles are re-read per panel) ...
MAX_ROWS = 64
#: ... of at least this many columns and multiply-adds (below them the BLAS's small-matrix path
#: is faster)
MIN_COLUMNS = 256
MIN_MACS = 1 << 20
#: ... at an ISA level of vectors of at least this many floats: at 8 lanes the kernel did not beat
#: OpenBLAS's AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``) on the benchmark's shapes
MIN_LANES = 16



@functools.cache
def _entries(isa: Isa) -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]:
    """The plain and the weight-gradient entry points built for ``isa``, typed so that a call
    passes plain ints (which ctypes converts fastest)."""
    built = library("narrow_gemm", isa)
    plain, by_transpose = built.stax_narrow_gemm, built.stax_narrow_gemm_bt
    for entry, sizes in ((plain, 4), (by_transpose, 3)):
        entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * sizes + [ctypes.c_int] * 2
    plain.restype = None
    by_transpose.restype = ctypes.c_int64  # 0, or minus the bytes of scratch it could not allocate
    return plain, by_transpose


_FLOAT32 = np.dtype(np.float32)


def applies(a: np.ndarray, b: np.ndarray, out: np.ndarray, transposed: tuple[bool, bool], isa: Isa) -> bool:
    """Whether ``narrow_matmul`` takes ``a @ b`` into ``out`` at ``isa``: float32 and contiguous, of a
    shape ``fits``."""
    return a.dtype is b.dtype is out.dtype is _FLOAT32 and a.flags.c_contiguous and b.flags.c_contiguous and \
        out.flags.c_contiguous and fits(a.shape, b.shape, out.shape, transposed, isa)


def fits(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...],
         transposed: tuple[bool, bool], isa: Isa) -> bool:
    """Whether the kernel takes a float32 product of these contiguous shapes at ``isa`` (vectors
    of MIN_LANES floats): ``a`` one matrix of at most MAX_ROWS rows, ``b`` stored as read, one
    matrix or ``out``'s batch of them, of at least MIN_COLUMNS columns and MIN_MACS multiply-adds;
    or a weight gradient, ``a`` (M x N, M at most MAX_ROWS and whole vectors) times ``b`` stored as
    (K x N), a convolution's columns read transposed, whose reduction N (the batch's pixels) is at
    least as long as K: a product with the roles swapped (a classifier's features times its
    32,000 classes' weights, ``x @ w.t()``) runs faster on the BLAS."""
    if transposed[0] or len(a_shape) != 2:
        return False
    m, k, n = a_shape[0], a_shape[1], out_shape[-1]
    width = isa.width
    if m > MAX_ROWS or m * k * n < MIN_MACS or width < MIN_LANES:
        return False
    if transposed[1]:
        return len(b_shape) == 2 and m % width == 0 and k >= b_shape[0]
    return len(b_shape) == len(out_shape) and b_shape[:-2] == out_shape[:-2] and n >= MIN_COLUMNS


def entry_address(gradient: bool, isa: Isa) -> int:
    """The address of the plain (or the weight gradient's) entry point built for ``isa``, which
    a compiled call calls (stax_py.h's narrow_product)."""
    return ctypes.cast(_entries(isa)[gradient], ctypes.c_void_p).value


def narrow_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int, transposed: tuple[bool, bool],
                  accumulate: bool = False, isa: Isa | None = None) -> None:
    """``out = a @ b`` (``out += a @ b`` when ``accumulate``) where ``applies``, on ``threads``
    OpenMP threads, each on a share of the batch or of the columns, by the kernel built for
    ``isa`` (None: ``STAX_ISA``, else this CPU's widest level).  A weight gradient runs
    transposed, ``out.T = b @ a.T``: the long rows of ``b`` are then the rows the kernel reads in
    place, and ``a.T`` (a few vectors wide) the matrix it streams."""
    plain, by_transpose = _entries(isa or isa_from_env())
    m, k, n = a.shape[0], a.shape[1], out.shape[-1]
    if transposed[1]:
        check_scratch(by_transpose(a.ctypes.data, b.ctypes.data, out.ctypes.data, m, n, k, threads, int(accumulate)))
    else:
        plain(a.ctypes.data, b.ctypes.data, out.ctypes.data, math.prod(out.shape[:-2]), m, n, k, threads,
              int(accumulate))
