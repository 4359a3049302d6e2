"""The kernel forms of reductions: column walks over several vectors, split column reductions
across threads, variances in every form, and small kernels that do not fork."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from stax.codegen.tuning import Tuning
from stax.errors import UnsupportedError

from tests.helpers import holds_vectors, kernel_forms, sample

DEFAULT = Tuning()
SPLIT_ROWS = DEFAULT.split_min_rows  # a column reduction over this many rows or more may split


def _column_statistics(x):
    mean = x.mean(0)
    centered = x - mean
    return mean, (centered * centered).mean(0), x.amax(0)


def test_a_pass_shares_an_internal_value_across_its_unrolled_vectors(check):
    """Example 7.2 under the default rule: exp is materialized in the kernel but read only by
    the sum and the amax of its own pass, so it stays a local (no row buffer) and the pass steps
    Tuning.accumulators vectors, each reduction reading its own vector's exp (a printer cache keyed by
    the id of a freed shifted expression once gave a later vector's amax its load of x)."""
    check = functools.partial(check, isa="avx2")
    x = sample((6, 1024), seed=130)
    compiled = check(lambda t: (t.exp().sum(-1), t.exp().amax(-1)), x, rtol=1e-6)
    source = compiled.block_kernels[0].source
    assert "_row" not in source and f"y0 += {DEFAULT.accumulators * 8}" in source


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_reductions_step_several_vectors(isa, dtype, check):
    """The outer-vector form reads Tuning.outer_vector_bytes of each row per step (one accumulator per
    vector), then single vectors, then a scalar tail: 150 columns exercise all three."""
    x = sample((37, 150), dtype, seed=59)
    compiled = check(_column_statistics, x, atol=1e-5)
    if isa != "none":
        assert kernel_forms(compiled) == ["outer-vector"]
        lanes = DEFAULT.outer_vector_bytes // (8 * np.dtype(dtype).itemsize)
        assert f"x0 += {lanes * 8}" in compiled.block_kernels[0].source


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_reductions_start_vectors_on_cache_lines(isa, dtype):
    """Rows of whole cache lines, long enough for Tuning.outer_head_min, read from an input that starts
    at each element of a line in turn: a scalar head takes the columns before the first line
    boundary (``stax::line_head``), so that the vectors read whole lines; every start agrees with
    numpy."""
    itemsize = np.dtype(dtype).itemsize
    per_line = 64 // itemsize
    rows, cols = 9, DEFAULT.outer_head_min + 16
    storage = np.empty(rows * cols + 2 * per_line, dtype)
    first = (-storage.ctypes.data % 64) // itemsize
    views = [storage[first + k:first + k + rows * cols].reshape(rows, cols) for k in range(per_line)]
    compiled = stax.compile(_column_statistics, views[0], isa=isa)
    if isa != "none":
        assert kernel_forms(compiled) == ["outer-vector"]
        assert "stax::line_head(" in compiled.block_kernels[0].source
    for k, view in enumerate(views):
        view[...] = sample((rows, cols), dtype, seed=100 + k)
        wide = view.astype(np.float64)
        expected = (wide.mean(0), ((wide - wide.mean(0)) ** 2).mean(0), wide.max(0))
        for got, want in zip(compiled(view), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"start {k} elements past a line")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_column_walk_sums_are_as_accurate_as_torchs(isa, seed):
    """``x.t().sum(-1)`` at 513 x 257 float32 (a column walk, one element per accumulator and
    step) adds blocks of Tuning.sum_block rows into partial sums, and meets torch's float32 tolerance
    (rtol 1.3e-6, atol 1e-5) against the exact sum; the plain running sum missed it on 3 and 4
    columns of seeds 1 and 2."""
    x = np.random.default_rng(seed).standard_normal((513, 257)).astype(np.float32)
    compiled = stax.compile(lambda t: t.t().sum(-1), x, isa=isa)
    np.testing.assert_allclose(compiled(x), x.astype(np.float64).sum(0), rtol=1.3e-6, atol=1e-5)
    assert f"y0_block += {DEFAULT.sum_block}" in compiled.kernel_source


def _column_reductions(a):
    """Every reduction op down the columns, with epilogues reading the combined results."""
    return a.sum(0), a.amax(0) - a.amin(0), a.sum(0) * 2 + a.amax(0)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(SPLIT_ROWS + 44, 21), (SPLIT_ROWS + 1, 3, 5), (1024, 8)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_split_column_reductions(isa, dtype, shape, threads, check):
    """Column reductions over many rows of few columns run as split reductions: one chunk of
    rows per thread (uneven where the threads do not divide the rows) reduces into partial
    results, combined column by column before the epilogue, in a vector body and a scalar tail;
    a NaN in one chunk reaches the combined sum and max.  Fewer columns than a vector walk down
    the rows in one guarded vector (Tuning.vector_tail_min)."""
    x = sample(shape, dtype, seed=140)
    if dtype.startswith("float"):
        x[SPLIT_ROWS - 3, 1] = np.nan
    compiled = check(_column_reductions, x, threads=threads, atol=1e-4)  # float32 sums of 300 terms
    guarded = isa != "none" and shape[-1] >= DEFAULT.vector_tail_min
    form = ["split-reduction" if holds_vectors(isa, math.prod(shape[1:])) else "outer-vector" if guarded else "scalar"]
    assert kernel_forms(compiled) == form
    products = check(lambda a: (a * 0.01 + 1).prod(0), sample(shape, dtype if dtype.startswith("float") else "float64",
                                                               seed=141), threads=threads)
    assert kernel_forms(products) == form


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(SPLIT_ROWS, 3 * SPLIT_ROWS), columns=st.integers(1, 40), threads=st.integers(1, 3),
       seed=st.integers(0, 1000))
def test_split_reductions_equal_numpy(rows, columns, threads, seed):
    """Whatever the rows (steps of Tuning.split_row_step and a remainder in each chunk), the columns
    (vectors and a scalar tail) and the chunks, a split reduction's results equal numpy's."""
    x = sample((rows, columns), seed=seed)
    compiled = stax.compile(_column_reductions, x, threads=threads)
    wide = x.astype(np.float64)
    for got, want in zip(compiled(x), (wide.sum(0), wide.max(0) - wide.min(0), wide.sum(0) * 2 + wide.max(0))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_wide_cached_column_reductions_keep_the_column_walk(check):
    """Columns that make enough Tuning.outer_vector_bytes strips for every thread, of an input smaller
    than Tuning.stream_min_bytes, run in the outer-vector form (there it is the faster one); rows fewer
    than Tuning.split_min_rows never split."""
    check = functools.partial(check, isa="avx2")
    wide, short = sample((SPLIT_ROWS + 44, 600), seed=142), sample((SPLIT_ROWS - 1, 8), seed=143)
    assert kernel_forms(check(lambda a: a.sum(0), wide, atol=1e-4)) == ["outer-vector"]
    assert kernel_forms(check(lambda a: a.sum(0), short, atol=1e-4)) == ["outer-vector"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, dim, threads", [
    ((7, 37), -1, 2), ((5, 300), 1, 2), ((40, 24), 0, 2), ((3, 4, 50), (0, 2), 2), ((6,), None, 2),
    ((SPLIT_ROWS + 44, 21), 0, 2), ((SPLIT_ROWS + 1, 3, 5), 0, 3), ((SPLIT_ROWS + 1, 3, 5), 0, 1)])
def test_variance_in_every_kernel_form(isa, dtype, shape, dim, threads, check):
    """Tensor.var is one m2 reduction in every kernel form: row passes (several vector
    accumulators merged by Chan's formula, lanes too, the scalar tail by Welford's update),
    column walks, split reductions (each chunk's Welford state, merged), scalar loops; on values
    around 10, where a difference of two sums of squares would lose digits."""
    x = sample(shape, dtype, low=7, high=13, seed=150)
    check(lambda a: (a.var(dim), a.var(dim, unbiased=False, keepdim=True) * 2, a.var(dim, correction=3)), x,
          threads=threads, rtol=2e-5, atol=1e-6)


def test_variance_rejects_what_torch_rejects():
    with pytest.raises(UnsupportedError, match="must be float32 or float64"):
        stax.compile(lambda a: a.var(), sample((3,), "int32"))
    with pytest.raises(UnsupportedError, match="either unbiased= or correction="):
        stax.compile(lambda a: a.var(0, unbiased=True, correction=1), sample((3, 4)))


def test_a_reduction_joins_the_earliest_pass_it_can(check):
    """A reduction that reads nothing computed since an earlier pass joins that pass: the max of
    each row shares the sum's pass although the sum's division comes between them."""
    check = functools.partial(check, isa="none")
    source = check(lambda a: (a.sum(-1) / 7, a.amax(-1)), sample((5, 9), seed=151)).block_kernels[0].source
    assert source.count("for (int64_t y0") == 1


def test_small_kernels_do_not_fork(check):
    """Algorithm 8.1 still picks the parallel loop, but a kernel with less weighted work than
    Tuning.parallel_min_work opens no parallel region: its ``omp for`` runs orphaned on one thread."""
    small = check(lambda a: a * 2 + 1, sample((64, 128), seed=62), threads=2).kernels[0].source
    assert "#pragma omp for" in small and "#pragma omp parallel" not in small
    large = check(lambda a: a * 2 + 1, sample((256, 512), seed=63), threads=2).kernels[0].source
    assert "#pragma omp for" in large and "#pragma omp parallel" in large
    exp_heavy = check(lambda a: a.exp() + 1, sample((64, 128), seed=64), threads=2).kernels[0].source
    assert "#pragma omp parallel" in exp_heavy  # 8192 iterations of exp: worth two threads
    # an rsqrt of the row's mean runs once a row (the compiler hoists it), one of each element does not
    x = sample((64, 128), seed=71)
    row_rsqrt = check(lambda a: a * ((a * a).mean(-1, keepdim=True) + 1e-6).rsqrt(), x, threads=2).kernels[0].source
    assert "#pragma omp for" in row_rsqrt and "#pragma omp parallel" not in row_rsqrt
    element_rsqrt = check(lambda a: a * ((a * a) + a.mean(-1, keepdim=True) + 1).rsqrt(), x, threads=2)
    assert "#pragma omp parallel" in element_rsqrt.kernels[0].source
