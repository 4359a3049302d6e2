"""Elementwise ops and dtypes compiled end to end (trace -> loop IR -> C++ -> run) against the numpy
reference evaluator (``check``) at every vector level this CPU runs: float math (exp and erf over
their whole range), broadcasting, integer and bool ops, casts, divisions and their rounding."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.errors import KernelError

from tests.helpers import RUNNABLE_ISAS, nonzero, run_cpp, sample


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
