"""The compiler end to end (trace -> loop IR -> C++ -> run) against the numpy reference evaluator.

Every test compiles real kernels with gcc (cached by source hash in ``STAX_CACHE_DIR``), runs them
and compares outputs and in-place updated inputs with ``stax.reference.evaluate`` (``check`` in
conftest.py).  The ISA level is chosen with ``isa=``: ``avx2`` and ``none`` run here (plus
``avx512`` on a CPU that has it); ``avx512`` is always at least built.  Several ops share one
program where they can, to keep the number of distinct builds small.
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from stax.frontend.ops import nn
from stax.codegen.kernel import without_final_barrier
from stax.frontend.ops.conv_forms import ConvForm
from stax.codegen.tuning import Tuning
from stax.compiler import Options, compile_graph
from stax.errors import BuildError, CallError, KernelError, ShapeError, StaxError, UnsupportedError
from stax.measure.demo import example_7_1
from stax.reference import evaluate
from stax.runtime import build as runtime
from stax.runtime.build import ISA_LEVELS, _cpu_flags, compile_flags

from tests.helpers import run_check, run_cpp

DEFAULT = Tuning()
SPLIT_ROWS = DEFAULT.split_min_rows  # a column reduction over this many rows or more may split
HAS_AVX512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= _cpu_flags()
RUNNABLE_ISAS = ["avx2", "none"] + (["avx512"] if HAS_AVX512 else [])


def sample(shape, dtype: str = "float32", low: float = -3, high: float = 3, seed: int = 0) -> np.ndarray:
    """Deterministic random values of ``dtype`` in ``[low, high]`` (bool: a fair coin)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(int(low), int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def nonzero(shape, dtype: str, seed: int) -> np.ndarray:
    """Values of both signs bounded away from zero (divisors)."""
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random(shape) < 0.5, -1, 1)
    if dtype.startswith("int"):
        return (sign * rng.integers(1, 6, shape)).astype(dtype)
    return (sign * rng.uniform(0.5, 3, shape)).astype(dtype)


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    """A vector level this CPU runs; ``check`` compiles for it."""
    return request.param


# --- elementwise ops and dtypes -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_unary(isa, dtype, check):
    def fn(x, y):
        return (x.log(), x.sqrt(), x.rsqrt(), x.reciprocal(), x.log1p(), y.exp(), y.sigmoid(), y.tanh(),
                y.erf(), y.expm1(), y.sin(), y.cos(), y.abs(), -y, y.relu())
    x, y = sample((7, 33), dtype, 0.1, 4, seed=1), sample((7, 33), dtype, seed=2)
    check(fn, x, y, atol=1e-6)


def test_float32_exp_over_its_whole_range(isa, check):
    """stax::exp_float (stax_vec.h) against float64's exp rounded to float32: within 2.5e-7
    relative (the function's 1.85e-7 and the reference's rounding) and one unit of 2**-149, and
    exact on 0, infinity and NaN, in vector bodies, their guarded last vectors and the none level's
    scalar loops; sigmoid is built on it."""
    x = np.linspace(-110, 95, 20011, dtype=np.float32)
    x[[3, 500, 7001, 20010]] = [-np.inf, np.inf, np.nan, -0.0]
    got = check(lambda t: t.exp(), x, rtol=2.5e-7, atol=2 ** -149)(x)
    check(lambda t: (t * 0.1).sigmoid(), x, rtol=1e-6, atol=0)
    assert got[3] == 0 and np.isposinf(got[500]) and np.isnan(got[7001]) and got[20010] == 1
    assert np.array_equal(np.isinf(got), np.exp(x.astype(np.float64)) > np.finfo(np.float32).max)


def test_float32_exp_of_an_unrolled_step_equals_the_one_vector_exp(isa, check):
    """A row pass steps Tuning.accumulators vectors and tests its exps' range once per step
    (stax::v_exp4): over exp's whole range, with special values, with steps wholly inside the
    range, wholly outside it and mixed (a shuffled row), its results equal the flat loop's
    one-vector exp bit for bit."""
    values = np.linspace(-110, 95, 3 * 4096, dtype=np.float32)
    values[[5, 700, 4100, 9000]] = [-np.inf, np.inf, np.nan, -0.0]
    x = np.stack([values[:4096], values[4096:8192], values[8192:],
                  np.random.default_rng(7).permutation(values)[:4096]])
    zeros = np.zeros_like(x)
    row_pass = check(lambda t, z: t.exp() + z.sum(-1, keepdim=True), x, zeros, rtol=2.5e-7, atol=2 ** -149)
    flat = stax.compile(lambda t: t.exp(), x.ravel(), isa=isa)
    if isa != "none":
        assert row_pass.kernels[0].source.count("stax::v_exp4(") == 1
        assert "v_exp4" not in flat.kernels[0].source
    np.testing.assert_array_equal(row_pass(x, zeros), flat(x.ravel()).reshape(x.shape))


def test_float32_erf_over_its_whole_range(isa, check):
    """stax::erf_float (a rational fit, stax_vec.h) against float64's erf rounded to float32:
    within 5e-7 relative wherever the result is normal, exact at +-0, +-infinity (+-1) and NaN,
    and 1 from |x| = 4 on, in vector bodies, guarded last vectors and scalar loops alike."""
    special = np.float32([np.inf, -np.inf, np.nan, -0.0, 0.0])
    x = np.concatenate([special, np.linspace(-6, 6, 20011, dtype=np.float32),
                        np.float32([1e-30, -3e-39, 4.0, 3.99999, -4.5]), special])  # body and tail
    got = check(lambda t: t.erf(), x, rtol=5e-7, atol=2 ** -149)(x)
    for at in (got[:5], got[-5:]):
        assert np.array_equal(at[:2], [1, -1]) and np.isnan(at[2])  # +-infinity, NaN
        assert np.signbit(at[3]) and at[3] == 0 and not np.signbit(at[4])  # -0.0, 0.0
    assert np.all(np.abs(got[np.abs(x) >= 4]) == 1)


def test_a_broadcast_negative_zero_keeps_its_sign(isa):
    """stax::splat puts -0.0 in every lane as -0.0 (0 + s, as it once was, makes it 0.0)."""
    x = sample((3, 37), low=0.5, high=2, seed=72)
    assert np.all(np.signbit(stax.compile(lambda a: a * -0.0, x, isa=isa)(x)))
    row = np.float32([-0.0, -0.0, 1.0])[:, None]
    np.testing.assert_array_equal(stax.compile(lambda a, b: a * b, x, row, isa=isa)(x, row), x * row)
    assert np.array_equal(np.signbit(stax.compile(lambda a, b: a * b, x, row, isa=isa)(x, row)), np.signbit(x * row))


def test_a_division_by_a_loop_invariant_divisor_multiplies_by_its_reciprocal(isa, check):
    """stax::div_invariant: x / d for a float32 divisor the same along the vector loop (a row's
    value, a constant) is x * (1 / d) corrected by two fused multiply-adds, numpy's quotient bit
    for bit for every divisor, normal or not (zero, subnormal, huge, infinite, NaN), and for tiny,
    huge and special x; a divisor that changes along the loop divides."""
    normal = np.float32([1.0, -2.5, 7.0, 1e-30, 6e37])
    extreme = np.float32([3e-39, 1e-45, 2e38, -3.4e38, 0.0, -0.0, np.inf, -np.inf, np.nan])
    x = sample((normal.size + extreme.size, 37), seed=70)  # 37 columns: vectors and a guarded last one
    x[:, :3] = [0.0, np.inf, np.nan]
    x[:, 3:6] = [-0.0, 1e-38, 3e38]
    d = np.concatenate([normal, extreme])[:, None]
    compiled = check(lambda a, b: a / b, x, d, rtol=0, atol=0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        got, want = compiled(x, d), x / d
    assert np.array_equal(got.view(np.int32), want.view(np.int32)), "not the quotient bit for bit"
    by_constant = check(lambda a: a / 3.0, x, rtol=0, atol=0)
    elementwise = check(lambda a, b: a / b, x, nonzero(x.shape, "float32", seed=71))
    if isa != "none":
        assert "stax::div_invariant(" in compiled.kernel_source and "stax::div_invariant(" in by_constant.kernel_source
        assert "div_invariant" not in elementwise.kernel_source


_DIVISIONS = r"""
#include "stax_vec.h"
#include <cstdio>
#include <random>
// div_invariant against the division, bit for bit: random x of every exponent (and, in most
// trials, of exponents where the multiply-add path runs) by random normal d; prints the
// mismatches and how many vectors were inside the multiply-add path's ranges
int main() {
  std::mt19937 rng(5);
  long wrong = 0, corrected = 0;
  float xs[STAX_W];
  for (long t = 0; t < 400000; ++t) {
    const uint32_t d_bits = (rng() & 0x807FFFFF) | (uint32_t(t % 2 ? 110 + rng() % 35 : 1 + rng() % 253) << 23);
    float d;
    std::memcpy(&d, &d_bits, 4);
    bool inside = true;
    for (int i = 0; i < STAX_W; ++i) {
      uint32_t b = rng();
      if (t % 4) b = (b & 0x807FFFFF) | (uint32_t(100 + rng() % 60) << 23);
      std::memcpy(&xs[i], &b, 4);
      const float q = xs[i] / d;
      inside = inside && std::fabs(q) >= 0x1p-79f && std::fabs(q) < 0x1p79f && std::fabs(d) >= 0x1p-20f &&
               std::fabs(d) < 0x1p20f;
    }
    corrected += inside;
    const stax::vec<float> got = stax::div_invariant(stax::vload(xs), stax::splat(d));
    for (int i = 0; i < STAX_W; ++i) {
      const float want = xs[i] / d;
      wrong += std::memcmp(&got[i], &want, 4) != 0 && !(want != want && got[i] != got[i]);
    }
  }
  std::printf("%ld %ld\n", wrong, corrected);
}
"""


@pytest.mark.parametrize("isa", [level for level in RUNNABLE_ISAS if level != "none"])
def test_the_reciprocal_division_is_the_division_bit_for_bit(isa, tmp_path):
    """stax::div_invariant against IEEE division on 400,000 random vectors: no quotient differs,
    and most vectors took the multiply-add path (not only the division fallback)."""
    wrong, corrected = map(int, run_cpp(_DIVISIONS, isa, tmp_path).split())
    assert wrong == 0 and corrected > 100_000


def _indent_of_line_with(source: str, text: str) -> tuple[int, int]:
    """The indentation of the first line holding ``text`` and of the first loop opened after it."""
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if text in line)
    loop = next(line for line in lines[at:] if line.lstrip().startswith("for ("))
    return len(lines[at]) - len(lines[at].lstrip()), len(loop) - len(loop.lstrip())


def test_a_value_invariant_along_the_vector_loop_is_computed_before_it(isa, check):
    """A row's value of an int64 index, cast and compared, and its exp, the same at every point of
    a row pass's vector loop (a sum's), run once before the loop (gcc redid the int64 vector's cast lane by
    lane at every step); an integer division by a row's value, which may set the error flag, stays
    in the loop, and so does what is computed from it; the results are the reference's either way."""
    x = sample((6, 37), seed=73)  # 37 columns: vectors and a guarded last one
    rows = sample((6, 1), seed=74)
    index = np.int64([[0], [3], [-100], [5], [3], [1]])
    hoisted = check(lambda a, r, i: (a * (r * 2.0).exp() + (i != -100).float() * (i.int() == 3).float()).sum(-1),
                    x, rows, index)
    numerator, divisor = sample((6, 1), "int64", -50, 50, seed=75), np.int64([[3], [-2], [7], [1], [5], [9]])
    kept = check(lambda a, n, d: (a * (n // d).float()).sum(-1), x, numerator, divisor)
    if isa != "none":
        before, loop = _indent_of_line_with(hoisted.kernel_source, "stax::v_exp(")
        assert before == loop, hoisted.kernel_source
        inside, loop = _indent_of_line_with(kept.kernel_source, "int_floordiv(")
        assert inside > loop, kept.kernel_source
    bad = divisor.copy()
    bad[4] = 0
    with pytest.raises(KernelError, match="division by zero"):
        kept(x, numerator, bad)


def test_a_select_between_one_value_is_that_value():
    """``where(c, v, v)`` prints as ``v`` (a gather's index clamped where it is in bounds)."""
    from stax.codegen.exprs import BodyPrinter, PrintState
    from stax.ir.loops import Load, Op
    from stax.ir.indexing import Index
    lines: list[str] = []
    printer = BodyPrinter(True, lambda ld: f"stax::vload({ld.buffer} + y0)", lines, "", PrintState())
    value, condition = Load("x", Index.var("y0"), "float32"), Load("c", Index.var("y0"), "bool")
    same = printer(Op("where", (condition, value, value), "float32"))
    assert not any("select" in line for line in lines) and lines[-1] == f"auto {same} = {printer(value)};", lines


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_binary_broadcast_and_scalars(isa, dtype, check):
    def fn(x, y, row, col):
        return (x + y, x - y, x * y, x / y, x // y, x % y, x.maximum(y), x.minimum(y),
                x < y, x <= y, x > y, x >= y, x == y, x != y,
                x + 2.5, 3 - x, 2 / y, x * row, x - col, row + col,
                x.abs() ** 0.5, x ** 2, y ** -1, x ** 3, 2 ** x,
                x.clamp(min=-1, max=1), x.clamp(min=0.5), stax.where(x > 0, x, y), x.where(x < y, 0.0))
    x, y = sample((7, 33), dtype, seed=3), nonzero((7, 33), dtype, seed=4)
    y[0, :5] = x[0, :5]  # equal elements for == and !=
    row, col = sample((33,), dtype, seed=5), sample((7, 1), dtype, seed=6)
    check(fn, x, y, row, col)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_ops(isa, dtype, check):
    """Integer // and % round toward negative infinity (Python and torch), also for negative operands."""
    def fn(a, b):
        return (a + b, a - b, a * b, a // b, a % b, a // 3, a % -3, 7 // b, -7 % b, a.maximum(b), a.minimum(b),
                a < b, a <= b, a > b, a >= b, a == b, a != b, a.abs(), -a, a.relu(), a ** 2, a ** 3,
                a.clamp(min=-2, max=5), a / b, a.exp(), a.float(), a.bool(), stax.where(a > b, a, b), a + 1.5)
    a, b = sample((5, 19), dtype, -20, 20, seed=7), nonzero((5, 19), dtype, seed=8)
    check(fn, a, b)


def test_bool_ops(isa, check):
    def fn(p, q, x, y):
        return (p & q, p | q, ~p, p == q, p != q, p + q, p * q, p.int(), p.float(), p.long(),
                stax.where(p, x, y), p.logical_and(q), p.logical_or(q), p.logical_not(), p.sum(), p.sum(-1),
                p.amax(-1), p.amin(0), p.amax())
    p, q = sample((6, 21), "bool", seed=9), sample((6, 21), "bool", seed=10)
    x, y = sample((6, 21), seed=11), sample((6, 21), seed=12)
    check(fn, p, q, x, y)


def test_casts(isa, check):
    """Float -> int truncates toward zero; anything -> bool is ``!= 0``, as numpy and torch."""
    def fn(x, d, i, l, p):
        return (x.int(), x.long(), x.double(), x.bool(), d.float(), d.int(), i.long(), i.double(), i.bool(),
                l.int(), l.float(), p.int(), p.double(), x.to("int64"), i.to("float64") + 0.5)
    x = sample((4, 37), "float32", -100, 100, seed=13)
    x[0, :3] = 0
    d = sample((4, 37), "float64", -100, 100, seed=14)
    i = sample((4, 37), "int32", -1000, 1000, seed=15)
    i[1, :4] = 0
    l = sample((4, 37), "int64", -1000, 1000, seed=16)
    p = sample((4, 37), "bool", seed=17)
    check(fn, x, d, i, l, p)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_float_an_integer_cannot_hold_casts_to_its_minimum(isa, check, dtype):
    """NaN, infinities and out-of-range floats cast to int32 and int64 give the type's minimum,
    as numpy's astype on x86; a C++ cast of them is undefined, and cast back to a float the
    compiler folded it into a truncation that kept NaN."""
    special = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -1e19, 2.5, -2.5, 0.0]
    x = np.resize(np.array(special, dtype), (3, 37))
    with np.errstate(invalid="ignore"):
        check(lambda a: (a.int(), a.long(), a + a.int(), a + a.long()), x)


def test_a_negative_fraction_cast_to_an_integer_and_back_is_a_positive_zero(isa, check):
    """An integer has no negative zero: ``x.long().float()`` of -0.3 is +0.0, so dividing by it
    gives +inf.  The compiler folds ``float(int64(x))`` into ``trunc(x)``, which is -0.0."""
    x = np.resize(np.array([-0.3, -0.9, 0.4, -1.5, 2.0, -0.0], np.float32), (3, 37))
    with np.errstate(divide="ignore"):
        check(lambda a: (1 / a.long().float(), 1 / a.int().double(), 2.0 / a.long()), x)


def test_method_aliases_compositions_and_inplace_variants(isa, check):
    """The torch spellings that the front end composes from the core ops, and every in-place form."""
    def fn(x, y, m, a, b, u, v, w):
        out = (x.softmax(-1), x.log_softmax(0), x.square(), x.masked_fill(m, -1.5), x.clamp_min(0.2), x.clamp_max(0.1),
               x.clip(-0.5, 0.5), x.sub(y, alpha=2), x.add(y, alpha=0.5), x.div(y, rounding_mode="floor"), x.T * 1,
               x.swapaxes(0, 1).flatten(), x.view(-1) + 0, x.reshape_as(x.t()) * 1, y.expand_as(x) * 1,
               a.type_as(x), x.max(), x.min(), x.max(y), x.min(y), m.any(), m.all(-1), m.any(0, keepdim=True),
               x.subtract(y), x.multiply(y), x.divide(y), x.true_divide(y), x.negative(), a.remainder(b), 5 - a,
               m.square(), 2.0 ** y)
        u.sub_(y).div_(2).pow_(2).clamp_(max=3).masked_fill_(m, 0).exp_().relu_().sqrt_()
        u -= 1
        u *= 2
        u /= 3
        u **= 2
        v.fill_(4).zero_().add_(x.sum())
        a //= b
        a %= 4
        w.log1p_()
        return out
    x, y = sample((6, 11), seed=80), nonzero((6, 11), "float32", seed=81)
    m = sample((6, 11), "bool", seed=82)
    a, b = sample((6, 11), "int32", -30, 30, seed=83), nonzero((6, 11), "int32", seed=84)
    check(fn, x, y, m, a, b, sample((6, 11), seed=85), sample((6, 11), seed=86), sample((6, 11), "float32", 0, 2, seed=87))


# --- reductions -----------------------------------------------------------------------------------

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


# --- views and layouts ----------------------------------------------------------------------------

def test_views(isa, check):
    def fn(x, z):
        return (x.t() + 1, x.transpose(0, 1).reshape(-1), x.t().reshape(5, 12) * 2, x[::2, 1::3], x[1], x[..., -1],
                x.unsqueeze(0).expand(3, 6, 10) + z, z.permute(1, 0, 2) * 2, z.permute(2, 0, 1).reshape(10, 18),
                x.reshape(2, 3, 10).sum(1), x[:, None, :].expand(6, 4, 10).sum(-1), x.unsqueeze(-1).squeeze(-1) - 1,
                z[:, 1:5:2].sum(0), x.t()[2:9:3, ::2] * z[1, :3, 1:2])
    x, z = sample((6, 10), seed=25), sample((3, 6, 10), seed=26)
    check(fn, x, z)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strided_reads_in_vector_loops(isa, dtype, check):
    """Reads every 2nd, 3rd and 4th element (``stax::vload_strided``; every 5th stays scalar),
    in bodies and tails, in a row sum, and padded (a guarded strided read, tested lane by lane);
    the generated code uses the strided vector loads at vector ISA levels."""
    def fn(x, y):
        padded = nn.pad(y, (1, 1))
        return (x[:, :82:2] + x[:, 1::2], x[:, ::3] * 2, x[:, 1::4].sum(-1), x[:, ::5] - 1,
                padded[:, ::2][:, :20] + y[:, :20])
    x, y = sample((5, 83), dtype, seed=80), sample((5, 41), dtype, seed=81)
    compiled = check(fn, x, y)
    if isa != "none":
        source = compiled.kernel_source
        assert all(f"stax::vload_strided<{s}>" in source for s in (2, 3, 4)), source
        assert "vload_strided<5>" not in source and "vload_guarded<2>" in source, source


def test_non_contiguous_inputs(isa, check):
    """Inputs passed with their own strides: a transposed array and a strided slice."""
    def fn(a, b):
        return a * 2 + 1, a.sum(-1), a.sum(0), a + b, (a * b).amax(-1)
    base = sample((23, 9), seed=27)
    a = base.T
    b = sample((9, 46), seed=28)[:, ::2]
    compiled = check(fn, a, b)
    assert compiled.program.inputs[0].strides == (1, 9)
    assert compiled.program.inputs[1].strides == (46, 2)


def test_flipped_offset_and_broadcast_inputs(isa, check):
    """Negative strides, a slice that starts inside the buffer, and a stride-0 (broadcast) input."""
    def fn(f, o, b, y):
        return f * 2, f.sum(-1), f.sum(0), o + 1, o.reshape(-1) * 3, b + y, (b * y).sum(0)
    f = sample((5, 37), seed=60)[::-1, ::-1]
    o = sample((5, 40), seed=61)[1:, 3:]
    b = np.broadcast_to(sample((37,), seed=62), (4, 37))
    compiled = check(fn, f, o, b, sample((4, 37), seed=63))
    assert compiled.program.inputs[0].strides == (-37, -1)
    assert compiled.program.inputs[2].strides == (0, 1)


TAIL_SIZES = (1, 7, 17, 33, 127)


def test_tails(isa, check):
    """Sizes that are not multiples of the vector width (16 or 8): vector body plus a guarded last
    vector or (fewer than Tuning.vector_tail_min points) a scalar tail, in rows, columns and flat
    loops; one program per ISA level, one input per size."""
    def fn(*xs):
        return tuple(y for x in xs for y in (x * 2 + 1, x.exp(), x.sum(-1), x.sum(0), x.amax(-1),
                                             x / x.sum(-1, keepdim=True)))
    compiled = check(fn, *(sample((3, n), seed=n) for n in TAIL_SIZES))
    assert {i.shape[-1] for i in compiled.program.inputs} == set(TAIL_SIZES)


def test_size_zero_and_one_dims(isa, check):
    def fn(x, e, one, col):
        return (e + 1, e.sum(0), e.sum(1), e.prod(0), e.sum(), e.mean(0),
                one * 3, one.sum(), one.amax(0), col.sum(0), col + x[:1], x.sum(1, keepdim=True) + col)
    x, e = sample((9, 5), seed=29), sample((0, 5), seed=30)
    one, col = sample((1, 1), seed=31), sample((9, 1), seed=32)
    check(fn, x, e, one, col)


def test_amax_over_empty_dim_raises():
    with pytest.raises(ShapeError, match="size 0"):
        stax.compile(lambda e: e.amax(0), sample((0, 5)))


def _normalizations(x, w, z):
    col = x / x.sum(0)  # column sums: outer-vector, then a pointwise kernel
    centered = x - x.mean(-1, keepdim=True)
    layernorm = centered * ((centered ** 2).mean(-1, keepdim=True) + 1e-5).rsqrt() * w
    e = (x - x.amax(0)).exp()
    return (col, layernorm, e / e.sum(0), z - z.sum(1, keepdim=True), z.sum(1) + z.amax(1),
            z / z.sum((0, 2), keepdim=True), x.t() / x.t().sum(-1, keepdim=True), x.sum(-1).sum().amax(),
            x.sum() + x, sum(((x * i).sin() for i in range(30)), x))


@pytest.mark.parametrize("fusion", ["greedy", "none"])
def test_reductions_feeding_pointwise(isa, fusion, check):
    """Normalizations over rows, columns, middle and several dims, fused or not; a long inlined
    chain (materialized past ``max_inline_ops``)."""
    x, w, z = sample((37, 45), seed=64), sample((45,), seed=65), sample((5, 37, 9), seed=66)
    check(_normalizations, x, w, z, fusion=fusion, atol=1e-4)  # x.sum() cancels: float32 error ~1e-5


def test_outputs_that_alias_inputs_or_each_other(isa, check):
    """Returning an input, a view of it, an updated input, and one value twice gives fresh arrays."""
    def fn(x, y):
        y.add_(1)
        return x, x.t(), x[1:], y, x * 2, x * 2
    x = sample((4, 9), seed=67)
    outs = stax.compile(fn, x, x, isa=isa)(x, x.copy())
    assert not any(np.shares_memory(o, x) for o in outs)
    check(fn, x, sample((4, 9), seed=68))


def test_float_division_by_zero_and_pow_edge_cases(isa, check):
    """Float // and % by zero give inf/NaN as torch; x ** 0 is 1; 0 ** -1 is inf."""
    def fn(x, z, a):
        return x // z, x % z, x / z, x ** 0, a ** 0, x.abs() ** -0.5, (x * 0) ** -1, a.maximum(-2 ** 63)
    x, z = sample((3, 17), seed=69), np.zeros((3, 17), np.float32)
    check(fn, x, z, sample((3, 17), "int64", -9, 9, seed=70))


# --- extern matmul --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul(isa, dtype, check):
    """2-D and batched matmul (extern calls) with pointwise producers and consumers around them."""
    def fn(a, b, bias, batch, t):
        return ((a @ b + bias).relu(), batch @ b, (a * 2).matmul(t.t()), (batch.exp() @ b).sum(-1))
    a, b = sample((7, 5), dtype, seed=33), sample((5, 3), dtype, seed=34)
    bias, batch = sample((3,), dtype, seed=35), sample((4, 7, 5), dtype, seed=36)
    t = sample((3, 5), dtype, seed=37)
    check(fn, a, b, bias, batch, t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_on_the_openmp_team_equals_numpy(dtype, monkeypatch):
    """stax.kernels.matmul.parallel_matmul calls the BLAS gemm from every thread of an OpenMP loop (rows of
    one matrix, or of its columns when it is wider than tall, or the batch), also with operands
    stored transposed; shapes it does not cover (a broadcast batch, small products) are np.matmul's."""
    from stax.kernels import matmul

    rng = np.random.default_rng(40)
    cases = [((300, 70), (70, 90)), ((3, 50, 64), (64, 40)), ((5, 64, 33), (5, 33, 48)), ((1, 130, 64), (1, 64, 7)),
             ((2, 3, 40, 20), (2, 3, 20, 30)), ((4, 40, 20), (1, 20, 30)), ((6, 5), (5, 4)),
             ((30, 64), (64, 300)), ((1, 20, 64), (1, 64, 130))]
    for (shape_a, shape_b), transposed in itertools.product(cases, [(False, False), (True, False), (False, True),
                                                                     (True, True)]):
        a, b = rng.standard_normal(shape_a).astype(dtype), rng.standard_normal(shape_b).astype(dtype)
        stored = [np.ascontiguousarray(x.swapaxes(-1, -2)) if t else x for x, t in zip((a, b), transposed)]
        out = np.full(np.matmul(a, b).shape, np.nan, dtype)
        matmul.parallel_matmul(*stored, out=out, threads=2, transposed=transposed)
        np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{shape_a} @ {shape_b}, transposed {transposed}")
    if matmul._team_gemm(dtype) is None:
        pytest.skip("numpy's BLAS has no CBLAS gemm that threadpoolctl finds; np.matmul is used")
    monkeypatch.setattr(matmul.np, "matmul", None)  # the team path must not fall back
    for (m, n), transposed in itertools.product([(256, 80), (40, 300)], [(False, False), (True, True)]):
        a, b = rng.standard_normal((m, 96)).astype(dtype), rng.standard_normal((96, n)).astype(dtype)
        stored = [np.ascontiguousarray(x.T) if t else x for x, t in zip((a, b), transposed)]
        out = np.full((m, n), np.nan, dtype)
        matmul.parallel_matmul(*stored, out=out, threads=2, transposed=transposed)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4, err_msg=f"{m}x{n} {transposed}")


def test_a_transpose_that_several_products_take_on_the_right_is_stored_once(check):
    """``x_t @ w.t()`` at every step of a recurrence: BLAS runs a few rows times an operand stored
    transposed well below its rate (experiments.bench.gemm_layouts), so ``w.t()`` is stored once
    and every product reads it as it is; one product keeps reading ``w`` in place, transposed."""
    xs, w = sample((4, 8, 16), seed=41), sample((24, 16), seed=42)
    shared = check(lambda xs, w: sum((xs[t] @ w.t()).tanh() for t in range(4)), xs, w)
    assert shared.wrapper_source.count("parallel_matmul(") == 4
    assert "transposed=" not in shared.wrapper_source
    single = check(lambda xs, w: (xs[0] @ w.t()).tanh(), xs, w)
    assert single.wrapper_source.count("transposed=(False, True)") == 1


def test_extern_matmuls_run_blas_on_one_thread_and_restore_it():
    """Helper BLAS threads left spinning after a matmul would take the next kernel's cores: the
    wrapper runs with one BLAS thread, set once for the whole call whatever its externs, and the
    caller's setting comes back after the call, also when calls nest."""
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from stax.kernels.blas_threads import one_blas_thread

    def blas_threads() -> set[int]:  # a sequential MKL (stax.kernels.blas's, when installed) has no threads to set
        return {lib["num_threads"] for lib in ThreadpoolController().info()
                if lib["user_api"] == "blas" and lib.get("threading_layer") != "sequential"}

    a, b = sample((64, 32), seed=38), sample((32, 16), seed=39)
    compiled = stax.compile(lambda x, y: (x @ y).relu() @ y.t(), a, b)
    assert compiled.wrapper_source.count("parallel_matmul(") == 2
    assert compiled.wrapper_source.count("with one_blas_thread():") == 1
    with threadpool_limits(limits=2, user_api="blas"):
        if not blas_threads():
            pytest.skip("numpy has no BLAS library that threadpoolctl can see")
        with one_blas_thread():
            assert blas_threads() == {1}
            with one_blas_thread():
                assert blas_threads() == {1}
            assert blas_threads() == {1}
        assert blas_threads() == {2}
        np.testing.assert_allclose(compiled(a, b), np.maximum(a @ b, 0) @ b.T, rtol=1e-5, atol=1e-5)
        assert blas_threads() == {2}


# --- in-place updates -----------------------------------------------------------------------------

def test_inplace_updates_are_visible(isa, check):
    def fn(x, y, z, row):
        old = x * 1
        x.add_(y)
        y.mul_(2)
        z.copy_(x + old)
        x.add_(row)
        return old + x, y.sum(-1)
    x, y, z = (sample((5, 19), seed=s) for s in (38, 39, 40))
    row = sample((19,), seed=41)
    check(fn, x, y, z, row)


def test_inplace_update_of_transposed_input(isa, check):
    def fn(x, y):
        x.mul_(y)
        return x.sum(0)
    x = sample((12, 5), seed=42).T
    check(fn, x, sample((5, 12), seed=43))


def test_inplace_reads_transposed_old_value(check):
    """The new value of ``x`` reads the old one at other indices: no element may see a new value."""
    def fn(x):
        x.copy_((x * 1).t() + 1)
        x.add_(x.sum(0))
        return x * 1
    check(fn, sample((8, 8), seed=44))


# --- errors at call time --------------------------------------------------------------------------

def test_integer_division_by_zero_raises_and_recovers(isa):
    f = stax.compile(lambda a, b: (a // b, a % b, (a // b).sum(0)), sample((4, 21), "int32", seed=45),
                     sample((4, 21), "int32", seed=46), isa=isa)
    a, b = sample((4, 21), "int32", -9, 9, seed=47), nonzero((4, 21), "int32", seed=48)
    bad = b.copy()
    bad[3, 20] = 0  # in the tail
    with pytest.raises(KernelError, match="division by zero"):
        f(a, bad)
    q, r, _ = f(a, b)  # the error flag was cleared
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    bad[3, 20], bad[0, 1] = 1, 0  # in a vector body
    with pytest.raises(KernelError):
        f(a, bad)


def test_call_mismatches_raise_call_error():
    x = sample((6, 8), seed=49)
    f = stax.compile(lambda a, b: a + b, x, x)
    with pytest.raises(CallError, match=r"argument b has strides \(1, 6\)"):
        f(x, np.asfortranarray(x))
    with pytest.raises(CallError, match="argument b has shape"):
        f(x, x[:, :4])
    with pytest.raises(CallError, match="argument a has dtype float64"):
        f(x.astype("float64"), x)
    with pytest.raises(CallError, match="argument b must be a numpy array"):
        f(x, [1.0])
    with pytest.raises(CallError, match=r"2 arrays \(a, b\)"):
        f(x)
    np.testing.assert_allclose(f(x, x), x + x)  # still usable


def test_inplace_on_read_only_array_raises():
    x = sample((3, 4), seed=50)
    f = stax.compile(lambda a: a.add_(1), x)
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(CallError, match="argument a is updated in place but is read-only"):
        f(ro)


# --- kernel forms, ISA levels, strategies, threads -------------------------------------------------

def _forms(compiled) -> list[str]:
    return [k.form for k in compiled.block_kernels]


def _holds_vectors(isa: str, *extents: int) -> bool:
    """Whether every extent holds at least one vector at this level (W lanes: 8 at avx2, 16 at
    avx512): a register tile needs W rows and W columns, a split reduction W columns."""
    return isa != "none" and min(extents) >= ISA_LEVELS[isa].width


def _transposed_form(isa: str, shape) -> str:
    """The form of a block reading a transposed operand of ``shape``'s last two extents."""
    return "scalar" if isa == "none" else "tiled-vector" if _holds_vectors(isa, *shape[-2:]) else "tiled"


def test_kernel_forms(check):
    x, y = sample((40, 24), seed=51), sample((24, 40), seed=52)
    assert _forms(check(lambda a: a * 2 + 1, x, isa="avx2")) == ["vector"]
    assert _forms(check(lambda a: a.sum(-1), x, isa="avx2")) == ["vector"]
    assert _forms(check(lambda a: a.sum(0), x, isa="avx2")) == ["outer-vector"]
    assert _forms(check(lambda a, b: a + b.t(), x, y, isa="avx2")) == ["tiled-vector"]
    assert _forms(check(lambda a, m: a * m.t(), x, sample((24, 40), "bool", seed=53), isa="avx2")) == ["tiled"]
    assert _forms(check(lambda a: a * 2 + 1, x, isa="none")) == ["scalar"]
    assert _forms(check(lambda a: a.sum(0), x, isa="none")) == ["scalar"]


def test_a_row_and_a_column_reduction_of_one_tensor_keep_apart(check):
    """A layer norm's backward sums each row of a tensor and its weight gradient each column: in
    one loop nest one of them reads along the vector loop with a stride, and the block ran scalar.
    The fusion problem forbids the pair (``read_orders_differ``), and both run vectorized.  Rows
    shorter than 16 vectorize across outputs instead, and there the pair may still fuse."""
    def rows_and_columns(a):
        return a.sum(-1), (a * 2).sum(0)

    def reasons(compiled):
        return {p.reason.split(":")[0] for p in compiled.fusion_problem.forbidden}
    wide = check(rows_and_columns, sample((256, 256), seed=57), rtol=1e-4, atol=1e-3, isa="avx2")
    assert "read_orders_differ" in reasons(wide) and "scalar" not in _forms(wide), _forms(wide)
    narrow = check(rows_and_columns, sample((256, 8), seed=58), rtol=1e-4, atol=1e-4, isa="avx2")
    assert "read_orders_differ" not in reasons(narrow)


def test_a_column_reduction_and_a_pointwise_node_over_its_rows_keep_apart(check):
    """A column sum and a pointwise node of the same tensor (a layer norm's weight gradient and
    its input gradient): in the reduction's loop nest the pointwise node walks the rows along the
    inner loop and the sum walks the columns, and their block ran scalar.  The pair is forbidden
    (``read_orders_differ``) and both run vectorized."""
    compiled = check(lambda a: (a.sum(0), a * 3), sample((256, 256), seed=59), rtol=1e-4, atol=1e-3, isa="avx2")
    assert any(p.reason.startswith("read_orders_differ") for p in compiled.fusion_problem.forbidden)
    assert "scalar" not in _forms(compiled), _forms(compiled)


def test_vectors_read_the_heads_of_attention_through_their_divisions(isa, check):
    """Attention's heads put back into rows: the output's last variable ``v`` reads its head as
    ``v // 64`` and its element as ``v % 64``.  A vector of W lanes that starts at a multiple of
    W never crosses a head, so it loads W consecutive elements (``indexing.lane_step``); before,
    such a block ran in scalar tiles.  Concatenated heads (a QKV gradient) add a guard on
    ``v // 256``, the same for every lane, or on ``v`` itself, tested lane by lane."""
    q, k = sample((4, 32, 64), seed=61), sample((2, 32, 64), seed=62)
    vector = ["scalar"] if isa == "none" else ["vector"]
    heads = check(lambda q: q.permute(1, 0, 2).reshape(32, 256) * 2, q)
    assert _forms(heads) == vector
    assert bool(re.search(r"stax::vload\(in_ptr0 \+ [^;]*% 64", heads.source)) == (isa != "none")
    both = check(lambda q, k: stax.frontend.ops.nn.cat([q.permute(1, 0, 2).reshape(32, 256),
                                           k.permute(1, 0, 2).reshape(32, 128)], 1), q, k)
    assert _forms(both) == vector


def test_register_tiles_take_the_outer_variable_the_transposed_reads_walk(isa, check):
    """A permutation that also moves a dim shorter than a vector (a QKV gradient's ``(L, B, 3,
    E)`` from ``(3, B, E, L)``): the transposed read is contiguous along ``L``, two loops above
    the last one, and the dim before the last has 2 points.  The outer loops are reordered so
    that ``L`` comes before the last one, and W x W register tiles take them (was scalar tiles)."""
    k = sample((2, 4, 64, 48), seed=63)
    compiled = check(lambda k: k.permute(3, 1, 0, 2) * 2, k)
    assert _forms(compiled) == [{"none": "scalar", "avx2": "tiled-vector", "avx512": "tiled-vector"}[isa]]


def test_a_residual_sum_of_a_transposed_tensor_is_stored_for_its_row_reductions(isa, check):
    """``y = x + t.t() * 2``, read by two row reductions (an MLP-Mixer's token mixing added back,
    then normalized): inlined, every reduction walked ``t`` across its rows and ran scalar.  It
    is stored once (``Lowering._reads_crossed_layouts``), in register tiles, not in the
    reductions' loop nest (``needs_tiles``), and the reductions read its rows as vectors."""
    def fn(x, t):
        y = x + t.transpose(-1, -2) * 2
        return y.sum(-1), y.amax(-1)
    compiled = check(fn, sample((64, 32), seed=68), sample((32, 64), seed=69), rtol=1e-5, atol=1e-5)
    assert any(p.reason.startswith("needs_tiles") for p in compiled.fusion_problem.forbidden)
    assert sorted(_forms(compiled)) == (["scalar", "scalar"] if isa == "none" else ["tiled-vector", "vector"])


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_permutations_with_short_dims_match_numpy(data):
    """Random permutations of tensors mixing dims of 2 or 3 points with dims that hold vectors,
    times two, at every vector level this CPU runs: whatever loop order, tile or vector form
    the kernel takes (``Tiles.loop_order`` reorders the outer loops), numpy's result."""
    shape = tuple(data.draw(st.lists(st.sampled_from([2, 3, 16, 24]), min_size=3, max_size=4), label="shape"))
    order = tuple(data.draw(st.permutations(range(len(shape))), label="order"))
    x = sample(shape, seed=64)
    for isa in RUNNABLE_ISAS:
        run_check(lambda t: t.permute(order) * 2, x, isa=isa, threads=data.draw(st.sampled_from([1, 2]), label="threads"))


@pytest.mark.parametrize("stride, q, dtype", [(2, 21, "float32"), (3, 20, "float64"), (2, 8, "float32")])
def test_interleaved_form_runs_the_phases_of_a_strided_input_gradient(isa, check, stride, q, dtype):
    """A stride-s convolution's input gradient reads its last variable v as v // s and v % s:
    the interleaved form computes each phase v % s and interleaves the phases in registers
    (whole vectors of q = v // s, then scalar points of each phase; 8 q's are scalar points
    only at both widths, 21 and 20 leave a tail at both)."""
    def fn(g, w, x):
        gx = nn.conv2d_input_grad(g, w, x.shape, stride, 1, form=ConvForm.DIRECT)
        return gx.where(x > 0, 0.0) * 2
    x = sample((2, 3, 5, stride * q), dtype, seed=54)
    w = sample((4, 3, 3, 3), dtype, seed=55)
    g = sample((2, 4, (5 + 2 - 3) // stride + 1, (stride * q + 2 - 3) // stride + 1), dtype, seed=56)
    forms = _forms(check(fn, g, w, x, rtol=1e-5, atol=1e-5))
    assert ("interleaved" in forms) == (isa != "none"), forms


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", [(2, 8, 8), (3, 19, 21), (1, 70, 133)])
def test_transposed_reads_in_register_tiles(isa, dtype, shape, check):
    """W x W tiles with the transposed operand transposed in registers, in blocks, and scalar
    nests for the rows and columns past the last whole tile (none when the sizes divide)."""
    x, y = sample(shape, dtype, seed=60), sample((shape[0], shape[2], shape[1]), dtype, seed=61)
    compiled = check(lambda a, b: a * 2 + b.transpose(1, 2) - b.transpose(1, 2) * a, x, y)
    assert _forms(compiled) == [_transposed_form(isa, shape)]
    if _holds_vectors(isa, *shape[1:]):
        source = compiled.block_kernels[0].source
        assert "stax::transpose(" in source
        tails = any(n % ISA_LEVELS[isa].width for n in shape[1:])  # rows or columns past the last whole tile
        assert bool(re.search(r"int64_t x\d = [1-9]", source)) == tails


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", [(2, 8, 8), (3, 19, 21), (1, 70, 133), (2, 150, 72)])
def test_transposed_reads_in_strips(isa, dtype, shape, check):
    """Over a large transposed input the register tiles run in strips of ``Tuning.strip_rows`` rows, the
    strip's transposed reads into the per-thread buffer first, then its rows streamed, with
    non-temporal stores and a fence; with tails, batches, several strips and both thread counts
    (here at small sizes: strips of 16 rows whatever the input's size and the strips' number,
    every output streamed)."""
    small = Tuning(stream_min_bytes=1, strip_rows=16, strips_per_thread=0)
    x, y = sample(shape, dtype, seed=62), sample((shape[0], shape[2], shape[1]), dtype, seed=63)
    for threads in (1, 2):
        compiled = check(lambda a, b: a * 2 + b.transpose(1, 2) - b.transpose(1, 2) * a, x, y, threads=threads,
                         tuning=small)
        assert _forms(compiled) == [_transposed_form(isa, shape)]
        if _holds_vectors(isa, *shape[1:]):
            source = compiled.block_kernels[0].source
            assert "stax::thread_scratch(" in source
            assert "stax::vstore_stream(out_ptr0" in source and source.rstrip().count("stax::store_fence();") == 1


def test_a_transposed_input_of_stream_size_runs_in_strips(isa):
    """At Tuning.stream_min_bytes (2048 x 2048 float32) the strips are the default, and agree with numpy;
    an input as large in too few strips for the threads (64 rows), or with rows too long for
    the strip buffers, keeps the blocks."""
    rng = np.random.default_rng(64)
    x, y = (rng.random((2048, 2048), dtype=np.float32) for _ in range(2))
    compiled = stax.compile(lambda a, b: a + b.t(), x, y, threads=2, isa=isa)
    np.testing.assert_array_equal(compiled(x, y), x + y.T)
    few_rows = [rng.random(shape, dtype=np.float32) for shape in ((64, 65536), (65536, 64))]
    few = stax.compile(lambda a, b: a + b.t(), *few_rows, threads=2, isa=isa)
    long_rows = [rng.random(shape, dtype=np.float32) for shape in ((512, 32768), (32768, 512))]
    long = stax.compile(lambda a, b: a + b.t(), *long_rows, threads=2, isa=isa)
    np.testing.assert_array_equal(few(*few_rows), few_rows[0] + few_rows[1].T)
    if isa != "none":
        source = compiled.block_kernels[0].source
        assert "stax::thread_scratch(" in source
        assert "stax::vstore_stream(out_ptr0" in source and "stax::store_fence();" in source
        assert "thread_scratch" not in few.block_kernels[0].source + long.block_kernels[0].source


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_register_tiles_start_on_the_transposed_operands_lines(isa, dtype):
    """A transposed operand whose rows are whole cache lines, long enough for Tuning.outer_head_min,
    starting at each element of a line in turn: the tiles start where its rows start a line,
    after scalar head rows (``stax::line_head``), and end in scalar tail rows and columns; every
    start agrees with numpy."""
    itemsize = np.dtype(dtype).itemsize
    per_line = 64 // itemsize
    rows, cols = DEFAULT.outer_head_min + 16, 21
    storage = np.empty(rows * cols + 2 * per_line, dtype)
    first = (-storage.ctypes.data % 64) // itemsize
    transposed = [storage[first + k:first + k + rows * cols].reshape(cols, rows) for k in range(per_line)]
    x = sample((rows, cols), dtype, seed=120)
    compiled = stax.compile(lambda a, b: a * 2 + b.t(), x, transposed[0], isa=isa)
    if isa != "none":
        assert _forms(compiled) == ["tiled-vector"]
        assert "stax::line_head(" in compiled.block_kernels[0].source
    for k, y in enumerate(transposed):
        y[...] = sample((cols, rows), dtype, seed=121 + k)
        np.testing.assert_array_equal(compiled(x, y), x * 2 + y.T, err_msg=f"start {k} elements past a line")


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
        assert _forms(compiled) == ["outer-vector"]
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
        assert _forms(compiled) == ["outer-vector"]
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
    form = ["split-reduction" if _holds_vectors(isa, math.prod(shape[1:])) else "outer-vector" if guarded else "scalar"]
    assert _forms(compiled) == form
    products = check(lambda a: (a * 0.01 + 1).prod(0), sample(shape, dtype if dtype.startswith("float") else "float64",
                                                               seed=141), threads=threads)
    assert _forms(products) == form


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
    assert _forms(check(lambda a: a.sum(0), wide, atol=1e-4)) == ["outer-vector"]
    assert _forms(check(lambda a: a.sum(0), short, atol=1e-4)) == ["outer-vector"]


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


def _softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("columns", [2048, 2051])
def test_large_row_outputs_stream_past_the_caches(columns, check):
    """An output of Tuning.stream_min_bytes or more written by a row pass takes non-temporal stores (rows
    of 2051 floats start misaligned three times in four: those stores fall back to plain ones) and
    a fence, and the later passes prefetch the next row: the values still match the reference."""
    check = functools.partial(check, isa="avx2")
    x = sample((DEFAULT.stream_min_bytes // (4 * 2048), columns), seed=58)
    source = check(_softmax, x, threads=2).block_kernels[0].source
    assert "stax::vstore_stream(out_ptr0" in source and "stax::store_fence();" in source
    assert "__builtin_prefetch(in_ptr0" in source
    small = check(_softmax, x[:64], threads=2).block_kernels[0].source
    assert "vstore_stream" not in small and "store_fence" not in small
    for text in (source, small):  # the region's closing barrier is the only one after the last loop
        assert re.search(r"#pragma omp for schedule\(dynamic, \d+\) nowait", text) and "#pragma omp barrier" not in text


def test_loops_with_an_expensive_op_per_streamed_element_prefetch_their_large_rows_ahead(check):
    """A vector loop computing at least one expensive op per element of each large contiguous row
    it streams prefetches those rows Tuning.prefetch_ahead_bytes ahead (a one-pass row reduction, a
    pointwise loop; not a small row broadcast along the rows); one sqrt over four streams, or
    inputs below Tuning.stream_min_bytes, do not; the values match the reference."""
    check = functools.partial(check, isa="avx2")
    rows = DEFAULT.stream_min_bytes // (4 * 2048)
    x, bias = sample((rows, 2048), seed=65), sample((2048,), seed=66)
    ahead = f" + {DEFAULT.prefetch_ahead_bytes // 4}"  # elements ahead, then the cache line's offset in a step

    def prefetches(source: str) -> list[str]:
        return [line.strip() for line in source.splitlines() if "__builtin_prefetch" in line]

    def exp_sum_amax(a):
        e = a.exp()
        return e.sum(-1), e.amax(-1)

    one_pass = prefetches(check(exp_sum_amax, x, threads=2).block_kernels[0].source)
    assert one_pass and all(line.startswith("__builtin_prefetch(in_ptr0") and ahead in line for line in one_pass)
    pointwise = prefetches(check(lambda a, b: (a + b).erf(), x, bias, threads=2).block_kernels[0].source)
    assert len(pointwise) == 1 and ahead in pointwise[0] and "in_ptr0 + 2048*x0 + x1" in pointwise[0]
    four_streams = [x, x + 1, x + 2, x + 3]
    assert not prefetches(check(lambda a, b, c, d: (a + b + c + d).sqrt(), *four_streams).block_kernels[0].source)
    assert not prefetches(check(exp_sum_amax, x[:64], threads=2).block_kernels[0].source)


def test_scratch_rows_live_on_the_stack_up_to_a_size_and_on_the_heap_beyond(check):
    """A scratch row of at most Tuning.stack_array_max_bytes is a stack array, a longer one a heap
    array; both compute the reference's values, also on a thread other than the main one."""
    columns = DEFAULT.stack_array_max_bytes // 4
    on_stack = check(_softmax, sample((4, columns), seed=67), threads=2)
    assert f"stax::stack_array<float, {columns}> buf1_row;" in on_stack.block_kernels[0].source
    on_heap = check(_softmax, sample((4, columns + 4), seed=68), threads=2)
    assert "std::unique_ptr<float[]> buf1_row" in on_heap.block_kernels[0].source
    x = sample((4, columns), seed=69)
    results = []
    worker = threading.Thread(target=lambda: results.append(on_stack(x)))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(results[0], on_stack(x))


def test_a_region_ends_without_a_barrier_of_its_own_only_where_nothing_follows_its_last_loop():
    loop = ["#pragma omp for", "for (int64_t x0 = 0; x0 < 64; x0 += 1)", "{", "    f(x0);", "}"]
    assert without_final_barrier(["{", *("    " + line for line in loop), "}"])[1] == "    #pragma omp for nowait"
    followed = loop + ["g();"]  # g may read what other threads wrote in the loop
    assert without_final_barrier(followed) == followed
    fenced = ["#pragma omp for nowait", *loop[1:], "stax::store_fence();", "#pragma omp barrier"]
    assert without_final_barrier(fenced) == fenced[:-1]
    single = loop + ["#pragma omp single", "{", "    g();", "}"]
    assert without_final_barrier(single) == single


def _softmax_and_friends(x, w):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    s = e / e.sum(-1, keepdim=True)
    return s, (s * w).sum(0), x.t() * 2 + w.t(), (x.sigmoid() * x).mean(-1)


@pytest.mark.parametrize("threads", [1, 2])
def test_fusion_none_and_greedy_agree(isa, threads, check):
    x, w = sample((37, 45), seed=53), sample((37, 45), seed=54)
    fused = check(_softmax_and_friends, x, w, fusion="greedy", threads=threads)
    unfused = check(_softmax_and_friends, x, w, fusion="none", threads=threads)
    assert len(fused.block_kernels) < len(unfused.block_kernels)
    pragmas = "\n".join(k.source for k in fused.block_kernels if k.form != "extern")
    assert ("#pragma omp for" in pragmas) == (threads > 1)  # Algorithm 8.1's parallel loops
    regions = [line for line in pragmas.splitlines() if "#pragma omp parallel" in line]
    assert all(f"num_threads({threads})" in line for line in regions)
    for a, b in zip(fused(x, w), unfused(x, w)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def _several_kernels(x, y):
    e = x.exp()
    return e.sum(-1), e.amax(-1), e * 2, y.t() + 1, (x * 2).sum(0), y.reshape(x.shape).tanh() + x


@pytest.mark.parametrize("order", ["original", "lpmf", "bfs", "dfs"])
def test_every_kernel_order_computes_the_same(order, check):
    # the spec's rule keeps the flat pointwise loops out of the row reductions' kernel, which leaves
    # kernels to order (the default, "cpu-split", fuses all but the column sum into one)
    compiled = check(_several_kernels, sample((24, 40), seed=56), sample((40, 24), seed=57), order=order,
                     rule="cpu", atol=1e-5)
    assert len(compiled.block_kernels) >= 3


def test_gpu_rule_fuses_by_element_count(check):
    """``rule="gpu"`` fuses nodes whose loops do not nest (one flat loop, indices by // and %)."""
    compiled = check(_several_kernels, sample((24, 40), seed=56), sample((40, 24), seed=57), rule="gpu", atol=1e-5)
    assert len(compiled.block_kernels) < len(check(_several_kernels, sample((24, 40), seed=56),
                                             sample((40, 24), seed=57), fusion="none").block_kernels)


def test_outputs_stay_valid_across_calls_and_threads():
    """Buffers the wrapper recycles never alias an output the caller still holds, also when
    several Python threads call one compiled function (the kernels run without the GIL)."""
    xs = [sample((64, 96), seed=s) for s in range(6)]
    f = stax.compile(_softmax_and_friends, xs[0], xs[1])
    expected = [evaluate(f.graph, x, x, upcast=True) for x in xs]
    held = [f(x, x) for x in xs]
    failures = []

    def work(i: int) -> None:
        for _ in range(10):
            for got, want in zip(f(xs[i], xs[i]), expected[i]):
                if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    failures.append(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for outs, want in zip(held, expected):
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_a_cached_library_is_found_without_asking_sysconfig_and_a_new_python_misses(monkeypatch):
    """A cache hit keys the Python by its version and installation, never by the headers'
    directory, which only a build asks sysconfig for; another Python's version misses."""
    fn, x = (lambda a: a * 3 - 1), sample((5, 9), seed=70)
    stax.compile(fn, x)

    def no_sysconfig():
        raise AssertionError("a cache hit asked sysconfig for the Python headers")

    monkeypatch.setattr(runtime, "_python_include", no_sysconfig)
    np.testing.assert_allclose(stax.compile(fn, x)(x), x * 3 - 1, rtol=1e-6)
    monkeypatch.setattr(runtime.sys, "version", "3.99.0 (another build)")
    with pytest.raises(AssertionError, match="asked sysconfig"):
        stax.compile(fn, x)


def test_avx512_builds():
    """The AVX-512 level compiles, and runs where the CPU has it; elsewhere a call says so."""
    x, w = sample((37, 45), seed=53), sample((37, 45), seed=54)
    compiled = compile_graph(stax.trace(_softmax_and_friends, x, w), Options(fusion="greedy", isa="avx512"))
    assert "vector" in _forms(compiled)
    assert "-DSTAX_W=16" in compile_flags(ISA_LEVELS["avx512"])
    if HAS_AVX512:
        for a, b in zip(compiled(x, w), evaluate(compiled.graph, x, w, upcast=True)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    else:  # a call would end the process on an illegal instruction: it is refused
        with pytest.raises(CallError, match="compiled for avx512, which this CPU does not have .* isa='avx2'"):
            compiled(x, w)


def test_a_level_the_cpu_lacks_is_refused_at_the_call(cpu_without_avx512):
    """Kernels built for avx512 on a CPU without it are built and readable; their call raises a
    CallError that names the level to use, instead of ending the process on an illegal instruction."""
    x = sample((37, 45), seed=55)
    compiled = stax.compile(lambda a: a.exp() / a.exp().sum(-1, keepdim=True), x, isa="avx512")
    assert compiled.isa.name == "avx512" and "stax::v_exp" in compiled.kernels[0].source
    with pytest.raises(CallError, match="compiled for avx512, which this CPU does not have .* isa='avx2'"):
        compiled(x)


def test_unknown_isa_level_raises(monkeypatch):
    monkeypatch.setenv("STAX_ISA", "sse9")
    with pytest.raises(StaxError, match="STAX_ISA='sse9' is not a level"):
        stax.compile(lambda a: a + 1, sample((3,)))


def test_a_cache_directory_that_cannot_be_made_is_named(monkeypatch, tmp_path):
    (tmp_path / "a file").write_text("")
    for where, reason in ((tmp_path / "a file", "File exists"), (tmp_path / "a file" / "below", "Not a directory")):
        monkeypatch.setenv("STAX_CACHE_DIR", str(where))
        with pytest.raises(BuildError, match=f"the kernel cache {re.escape(str(where))} cannot be made \\({reason}\\)"):
            stax.compile(lambda a: a + 1, sample((3,)))


@pytest.mark.parametrize("threads", ["0", "-2", "two", "1.5", ""])
def test_a_bad_thread_count_in_the_environment_is_named(monkeypatch, threads):
    monkeypatch.setenv("STAX_THREADS", threads)
    with pytest.raises(StaxError, match=f"STAX_THREADS={threads!r} is not a number of threads"):
        stax.compile(lambda a: a + 1, sample((3,)))
    monkeypatch.setenv("STAX_THREADS", " 1 ")
    assert "#pragma omp parallel" not in stax.compile(lambda a: a + 1, sample((1 << 17,))).kernel_source


_BUILD_SCRIPT = """
import numpy as np, stax
x = np.arange(96, dtype=np.float32).reshape(8, 12)
f = stax.compile(lambda a: (a * 3 + 1).sum(-1), x)
print(f.library_path)
assert np.allclose(f(x), (x * 3 + 1).sum(-1))
"""


def test_concurrent_builds_share_the_cache(tmp_path):
    """Two processes that build the same kernels into an empty cache both succeed and agree."""
    env = {**os.environ, "STAX_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert results[0][0] == results[1][0]
    assert not list(tmp_path.rglob("*.tmp"))


# --- the spec's listing 7.1 -----------------------------------------------------------------------

@pytest.mark.parametrize("level,width", [("avx512", 16), ("avx2", 8)])
def test_example_7_1_reads_like_listing_7_1(level, width):
    """One kernel: a parallel outer loop of 64 rows, a vector row sum kept in the kernel, then a
    vector division of the same row; buffer names as the wrapper allocates them."""
    x = sample((64, 128), seed=55)
    compiled = compile_graph(stax.trace(example_7_1, x), Options(isa=level))
    assert [k.nodes for k in compiled.block_kernels] == [["op0", "op1"]]
    src = compiled.block_kernels[0].source
    assert compiled.block_kernels[0].form == "vector"
    assert 'extern "C" void cpp_fused_op0_op1(const float* in_ptr0, float* out_ptr0, int64_t* err)' in src
    assert re.search(r"#pragma omp for schedule\(dynamic, 8\)\n\s*for \(int64_t x0 = 0; x0 < 64; x0 \+= 1\)", src)
    assert src.count("#pragma omp for") == 1
    op0, op1 = src.split("// op1\n")
    # op0: vector accumulators of W lanes over the row, combined at the end (Proposition 8.1)
    step = int(re.search(r"for \(int64_t y0 = 0; y0 < 128; y0 \+= (\d+)\)", op0).group(1))
    assert step % width == 0 and all(f"in_ptr0 + 128*x0 + y0 + {k})" in op0 for k in range(width, step, width))
    assert "stax::vload(in_ptr0 + 128*x0 + y0)" in op0
    assert re.search(r"tmp_acc0 = stax::r_sum\(tmp_acc0, stax::hreduce_sum<float>\(", op0)
    # op1: the division of the same row by its sum, W floats at a time, stored contiguously
    assert f"for (int64_t y0 = 0; y0 < 128; y0 += {width})" in op1
    assert "stax::vload(in_ptr0 + 128*x0 + y0)" in op1
    assert "stax::splat<float>(tmp_acc0)" in op1
    assert re.search(r"stax::vstore\(out_ptr0 \+ 128\*x0 \+ y0, tmp\d+\);", src)
    assert "// in_ptr0=arg0, out_ptr0=buf1" in src
    assert "cpp_fused_op0_op1(arg0, buf1)" in compiled.wrapper_source
    if level == "avx2" or HAS_AVX512:
        np.testing.assert_allclose(compiled(x), x / x.sum(-1, keepdims=True), rtol=1e-5)


def test_example_7_1_before_fusion():
    """Without fusion: the row sum writes buf0 (64 floats) and the division reads it; each kernel
    has its own ``omp for`` over the 64 rows or the 8192 flat elements."""
    x = sample((64, 128), seed=55)
    compiled = compile_graph(stax.trace(example_7_1, x), Options(fusion="none", isa="avx512"))
    assert [k.name for k in compiled.block_kernels] == ["cpp_fused_op0", "cpp_fused_op1"]
    row_sum, division = (k.source for k in compiled.block_kernels)
    assert re.search(r"#pragma omp for schedule\(dynamic, \d+\)\n\s*for \(int64_t x0 = 0; x0 < 64; x0 \+= 1\)", row_sum)
    assert "stax::vload(in_ptr0 + 128*x0 + y0 + 16)" in row_sum
    assert "for (int64_t x1 = 0; x1 < 128; x1 += 16)" in division
    assert "out_ptr0[x0] = tmp_acc0;" in row_sum
    assert "// in_ptr0=arg0, out_ptr0=buf0" in row_sum
    assert "// in_ptr0=arg0, in_ptr1=buf0, out_ptr0=buf1" in division
    assert "buf0 = empty_float32_64x1()\n    live += 256" in compiled.wrapper_source
    assert "live -= 256; del buf0" in compiled.wrapper_source


def test_a_transposed_matmul_operand_is_read_in_place(check):
    """``x @ w.t()`` and ``g.t() @ x`` hand BLAS the stored matrices with a transpose flag: no
    kernel copies ``w.t()`` or ``g.t()``, and a column sum of ``g`` fused beside it stays a
    plain reduction."""
    def fn(x, w, g):
        return x @ w.t(), g.t() @ x, g.sum(0)
    x, w, g = sample((64, 48), seed=41), sample((32, 48), seed=42), sample((64, 40), seed=43)
    compiled = check(fn, x, w, g, rtol=1e-5, atol=1e-5)
    externs = [k.extern for k in compiled.block_kernels if k.extern]
    assert sorted(e["attrs"].get("transposed") for e in externs) == [(False, True), (True, False)], externs
    assert len(compiled.block_kernels) == 3, [k.nodes for k in compiled.block_kernels]


def test_a_reshaped_matmul_operand_is_stored_before_its_other_readers(check):
    """A weight gradient's operand ``x = f(a, b).permute(1, 0, 2).reshape(64, 64)``, whose
    bias gradient ``x.sum(0)`` reads it too: the permute is stored once, at its own shape (BLAS
    reads it reshaped in place), before the sum is lowered, so that the sum loads the stored
    rows instead of computing ``f`` again through the permute (``b``'s transposed read)."""
    def fn(a, b, w):
        x = (a * 2 + b.transpose(-1, -2)).permute(1, 0, 2).reshape(64, 64)
        return x.sum(0), x.t() @ w
    a, b, w = sample((2, 64, 32), seed=65), sample((2, 32, 64), seed=66), sample((64, 16), seed=67)
    compiled = check(fn, a, b, w, rtol=1e-5, atol=1e-5)
    program = stax.lowering.lower(compiled.graph)
    total = next(buf for buf in program.buffers if getattr(buf, "reduction", None) == "sum")
    (read,) = {ld.buffer for ld in stax.ir.loops.loads(total.body)}
    assert next(buf for buf in program.buffers if buf.name == read).shape == (64, 2, 32), total.body


def test_matmul_operands_read_through_two_views_and_computed_transposes(check):
    """A recurrent cell's pattern: ``h @ w.t()`` forward and ``g @ w.t().t()`` backward read ``w``
    in place (with and without the transpose flag; no kernel copies it), and ``(a * b).t() @ h``,
    the weight gradient of a computed gate, stores ``a * b`` in its own layout (a vector kernel
    fused with its sibling ``a - b`` and the bias gradient's column sum), which BLAS reads
    transposed, instead of a transposed store that only fuses as a scalar loop."""
    def fn(w, h, g, a, b):
        wt = w.t()
        return h @ wt, g @ wt.t(), (a * b).t() @ h, (a - b).t() @ h, (a * b).sum(0)
    w, h, g = sample((96, 64), seed=44), sample((32, 64), seed=45), sample((32, 96), seed=46)
    a, b = sample((32, 96), seed=47), sample((32, 96), seed=48)
    compiled = check(fn, w, h, g, a, b, rtol=1e-5, atol=1e-5)
    externs = [k.extern for k in compiled.block_kernels if k.extern]
    assert sorted(e["attrs"].get("transposed", (False, False)) for e in externs) == \
        [(False, False), (False, True), (True, False), (True, False)], externs
    assert all("arg0" not in k.params for k in compiled.kernels if not k.extern)  # w is never copied
    generated = [k for k in compiled.block_kernels if not k.extern]
    assert {k.form for k in generated} <= {"vector", "outer-vector"}, [(k.nodes, k.form) for k in generated]
