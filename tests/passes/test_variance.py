"""One-pass variances (``stax.passes.variance``): the two-pass form of a program becomes an m2
reduction where its second pass would re-read memory, and only the exact pattern does; the
result equals the reference evaluation of the program as written."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from instances.programs import batchnorm_stats, layernorm
from stax.codegen.tuning import Tuning

SPLIT_MIN_ROWS = Tuning().split_min_rows
from tests.helpers import run_check

EVERY_SIZE = stax.CostModel(cached_pass_bytes=0)  # the rewrite whatever the size


def reductions(compiled) -> list[str]:
    return [b.reduction for b in compiled.program.buffers if getattr(b, "reduction", None)]


def offset(shape, seed: int) -> np.ndarray:
    """Values around 10, where the sum of squares minus the squared sum would lose digits."""
    return (np.random.default_rng(seed).standard_normal(shape) + 10).astype(np.float32)


def test_large_column_statistics_take_one_pass():
    """Batch-norm statistics of an input larger than cached_pass_bytes: the sum of squared
    deviations is an m2 reduction, in the mean's pass (one kernel, a split reduction)."""
    compiled = run_check(batchnorm_stats, offset((8192, 16), 1), rtol=1e-5, isa="avx2")
    assert sorted(reductions(compiled)) == ["m2", "sum"]
    assert [k.form for k in compiled.block_kernels] == ["split-reduction"]


def test_cached_passes_keep_the_program_as_written():
    """Layer norm's rows and small column statistics keep both passes, and so does every
    variance with cached_pass_bytes=None."""
    x = offset((64, 128), 2)
    assert "m2" not in reductions(run_check(layernorm, x, np.ones(128, np.float32), np.zeros(128, np.float32),
                                            atol=1e-5))
    assert "m2" not in reductions(run_check(batchnorm_stats, offset((64, 16), 3)))
    assert "m2" not in reductions(run_check(batchnorm_stats, offset((8192, 16), 4),
                                            cost_model=stax.CostModel(cached_pass_bytes=None)))


@pytest.mark.parametrize("fn", [
    lambda x: ((x - x.mean(0)) ** 2).mean(0),
    lambda x: ((x - x.mean(0, keepdim=True)) ** 2).sum(0, keepdim=True),
    lambda x: (x - x.mean(-1, keepdim=True)).square().sum(-1),
    lambda x: ((x - x.mean((0, 1), keepdim=True)) ** 2).mean((0, 1)),
], ids=["mean", "keepdim", "rows", "all"])
def test_every_spelling_of_the_pattern_is_rewritten(fn):
    run = run_check(fn, offset((33, 20), 5), cost_model=EVERY_SIZE, rtol=1e-5, atol=1e-5)
    assert "m2" in reductions(run)


@pytest.mark.parametrize("fn", [
    lambda x: ((x - x.mean(1, keepdim=True)) ** 2).sum(0),  # deviations from another dim's mean
    lambda x: ((x - x.amax(0)) ** 2).sum(0),  # from a max
    lambda x: ((x - x.sum(0) / 7) ** 2).sum(0),  # divided by another count
    lambda x: ((x - x.mean(0)) ** 3).sum(0),  # cubed
    lambda x: ((x - x.mean(0)) * (x + 1 - x.mean(0))).sum(0),  # two different factors
    lambda x: ((x.exp() - x.mean(0)) ** 2).sum(0),  # another tensor deviating from x's mean
], ids=["other-dim", "max", "count", "cube", "product", "other-tensor"])
def test_only_the_pattern_is_rewritten(fn):
    run = run_check(fn, offset((33, 20), 6) / 10, cost_model=EVERY_SIZE, rtol=1e-5, atol=1e-5)
    assert "m2" not in reductions(run)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 2 * SPLIT_MIN_ROWS), columns=st.integers(1, 40), threads=st.integers(1, 3),
       seed=st.integers(0, 1000))
def test_one_pass_column_variance_equals_numpy(rows, columns, threads, seed):
    """Whatever the shape and the chunks, the one-pass statistics equal numpy's two-pass ones."""
    x = offset((rows, columns), seed)
    mean, var = stax.compile(batchnorm_stats, x, cost_model=EVERY_SIZE, threads=threads)(x)
    wide = x.astype(np.float64)
    np.testing.assert_allclose(mean, wide.mean(0), rtol=1e-6)
    np.testing.assert_allclose(var, wide.var(0), rtol=2e-4, atol=1e-6)


def test_a_variance_over_one_element_is_zero_or_nan_as_torch():
    """One element deviates from its mean by x - x: 0 when it is finite, NaN for an infinity or a
    NaN (torch's var and std of [-inf] are NaN); the one-element reduction was the constant 0."""
    x = np.array([[np.nan, 2.0, np.inf, -np.inf, -3.0]], np.float32)
    want = np.array([np.nan, 0.0, np.nan, np.nan, 0.0], np.float32)
    var, std, var_of_pair = stax.compile(
        lambda t: (t.var(0, unbiased=False), t.std(0, unbiased=False), stax.var_mean(t, 0, unbiased=False)[0]), x)(x)
    for got in (var, std, var_of_pair):
        np.testing.assert_array_equal(got, want)
