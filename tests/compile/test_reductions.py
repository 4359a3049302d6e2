"""Reductions compiled end to end against the numpy reference evaluator: full, along one or several
dims, keepdim, mean, prod, amax/amin and their dtypes."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.errors import UnsupportedError

from tests.helpers import sample


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions(isa, dtype, check):
    """Full reductions, last, non-last and several dims, keepdim, mean, prod, amax/amin."""
    def fn(x, y):
        out = (x.sum(), x.sum(-1), x.sum(0), x.sum((0, 2)), x.sum(1, keepdim=True), x.amax(0), x.amin(-1),
               x.amax((1, 2)), x.amin(), y.prod(-1), y.prod(0), y.prod())
        if x.is_floating_point():
            out += (x.mean(), x.mean(1), x.mean((0, 2), keepdim=True))
        return out
    if dtype.startswith("int"):
        x, y = sample((5, 17, 9), dtype, -50, 50, seed=18), sample((5, 17, 3), dtype, -2, 2, seed=19)
    else:
        x, y = sample((5, 17, 9), dtype, seed=18), sample((5, 17, 3), dtype, 0.5, 1.5, seed=19)
    check(fn, x, y)


def test_long_reductions_match_float64(isa, check):
    """float32 sums of 2**17 elements, compared with sums computed in float64 (rtol 1e-5)."""
    def fn(x, y):
        return x.sum(), x.sum(-1), y.sum(0), x.mean()
    x = sample((4, 1 << 15), "float32", 0, 1, seed=20)
    y = sample((1 << 15, 8), "float32", 0, 1, seed=21)
    check(fn, x, y, rtol=1e-5, atol=0)


def test_million_element_float32_sums_keep_six_digits(isa, check):
    """The scalar form accumulates float32 sums in double, the vector forms in 4 x W float lanes:
    a sum of 2**20 values in [0, 1) stays within 1e-6 of float64's (one float accumulator: 2e-5)."""
    x = sample((1 << 20,), "float32", 0, 1, seed=24)
    check(lambda t: (t.sum(), (t * 2).mean()), x, rtol=1e-6, atol=0)


def test_amax_amin_propagate_nan(isa, check):
    def fn(x, y):
        return x.amax(-1), x.amin(-1), x.amax(0), x.amin(0), x.amax(), x.maximum(y), x.minimum(y), x.clamp(-1, 1)
    x, y = sample((6, 37), seed=22), sample((6, 37), seed=23)
    x[1, 3] = x[2, 36] = x[4, 20] = np.nan  # in a vector body, in a tail, in the middle
    y[5, 5] = np.nan
    check(fn, x, y)


def test_row_reductions_combine_every_lane(isa, check):
    """A row's vector lanes are combined by a tree (stax_vec.h's fold_lanes): a NaN in
    any lane of any unrolled accumulator, row i's NaN at column i, reaches the row's max, min,
    sum, variance and product; the last rows, without NaN, agree with the reference."""
    x = sample((130, 128), seed=26)
    x[np.arange(128), np.arange(128)] = np.nan
    check(lambda t: (t.amax(-1), t.amin(-1), t.sum(-1), t.var(-1), (t * 0.01 + 1).prod(-1)), x)


def test_maximum_and_minimum_keep_the_generic_rule_bit_for_bit(isa):
    """The vector maximum and minimum (x86 max and min and a blend) return what the scalar rule
    ``a > b or a is NaN ? a : b`` (``<`` for the minimum) returns, bit for bit: the first
    operand's NaN with its payload, the second's, and the second of two equal zeros."""
    rng = np.random.default_rng(25)
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    a[:4], b[:4] = [0.0, -0.0, 0.0, -0.0], [-0.0, 0.0, 0.0, -0.0]
    bits_a, bits_b = a.view(np.uint32), b.view(np.uint32)
    bits_a[8], bits_b[9], bits_a[10], bits_b[10] = 0x7FC00001, 0xFFC00002, 0x7FC00003, 0x7FC00004  # NaN payloads
    a[12], b[13] = np.inf, -np.inf
    compiled = stax.compile(lambda x, y: (x.maximum(y), x.minimum(y)), a, b, isa=isa)
    high, low = compiled(a, b)
    with np.errstate(invalid="ignore"):
        want_high = np.where((a > b) | np.isnan(a), a, b)
        want_low = np.where((a < b) | np.isnan(a), a, b)
    np.testing.assert_array_equal(high.view(np.uint32), want_high.view(np.uint32))
    np.testing.assert_array_equal(low.view(np.uint32), want_low.view(np.uint32))


def test_mean_of_integers_needs_a_dtype(check):
    with pytest.raises(UnsupportedError, match="mean"):
        stax.compile(lambda a: a.mean(), sample((3, 4), "int32"))
    check(lambda a: a.mean(-1, dtype="float32"), sample((3, 4), "int32", seed=24))
