"""The guarded last vector of a strip-mined loop (``Emission.guarding_tail``), integer division
by a literal, and the vector ops on 8-byte lanes (wider than a register at avx512): each against
the numpy reference at every ISA level this CPU runs."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.frontend.ops import nn
from stax.frontend.ops import pooling
from stax.codegen.tuning import Tuning
from stax.target import ISA_LEVELS

from tests.helpers import run_check, run_cpp, sample

DEFAULT = Tuning()


def _guarded(isa: str, n: int) -> bool:
    """Whether a loop of ``n`` points along the vector variable ends in a guarded vector."""
    width = ISA_LEVELS[isa].width
    return isa != "none" and n % width >= DEFAULT.vector_tail_min


def _rows(t):
    """Rows of 14 of a wider input (not flattened into one loop) with a compare and a select, and
    the max down their columns (the outer-vector form)."""
    row = t[:, :, 1:15]
    return row * 2 + 1, stax.where(row > 1, row, -row), row.amax(0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_rows_shorter_than_a_vector_end_in_a_guarded_vector(isa, dtype, check):
    """Rows of 14 (shorter than an avx512 vector, 8 + 6 at avx2) read with loads and written with
    stores of the first lanes only: the element after each row holds a NaN or the extreme
    integer, which a lane past the end would carry into the max."""
    x = sample((5, 3, 16), dtype, seed=1)
    x[:, :, 15] = np.nan if dtype.startswith("float") else np.iinfo(dtype).max
    compiled = check(_rows, x)
    if _guarded(isa, 14):
        assert "stax::vload_first(" in compiled.kernel_source and "stax::vstore_first(" in compiled.kernel_source


@pytest.mark.parametrize("width", [14, 7, 28, 5])
def test_max_pooling_and_its_gradient_over_short_rows(isa, width, check):
    """MaxPool2d(2) with its indices over 2 * width columns: stride-2 reads of the first lanes
    (``vload_first_strided``), the window's argmax as int64 lanes, and its // 2 and % 2 by a
    literal divisor; ties and NaNs inside the windows.  Its gradient, fused with the ReLU's, runs
    in the interleaved form, whose last vector stores the first points' two phases."""
    x = sample((4, 3, 2 * width, 2 * width), "float32", seed=width)
    x[:, :, ::3, ::2] = 0.25
    x[0, 0, 1, 1] = np.nan
    compiled = check(lambda t: pooling.max_pool2d(t.relu(), 2, return_indices=True), x)
    if _guarded(isa, width):
        assert "stax::vload_first_strided<2>(" in compiled.kernel_source
    # the gradient at indices anywhere in each window, masked by the ReLU's
    rng = np.random.default_rng(width)
    rows, columns = np.meshgrid(2 * np.arange(width), 2 * np.arange(width), indexing="ij")
    taps = rng.integers(0, 2, (2, 4, 3, width, width))
    indices = ((rows + taps[0]) * 2 * width + columns + taps[1]).astype(np.int64)
    grad = sample((4, 3, width, width), "float32", seed=width + 1)

    def gradient(t, g, i):
        return stax.where(t > 0, pooling.max_pool2d_backward(g, t, 2, 2, 0, 1, False, i), 0.0)
    compiled = check(gradient, x, grad, indices)
    if _guarded(isa, width):
        assert "stax::vstore_interleaved_first(" in compiled.kernel_source


def test_padded_reads_in_a_guarded_vector(isa, check):
    """A padded row (its own guard) read by a guarded last vector: both guards hold lane by lane."""
    x = sample((6, 3, 10), "float32", seed=3)
    compiled = check(lambda t: nn.pad(t, [2, 2]) * 3 - 1, x)
    if _guarded(isa, 14):
        assert "stax::LaneGuard" in compiled.kernel_source


def test_a_guarded_vector_stops_at_a_possible_division_by_zero(isa, check):
    """An integer division by a loaded divisor keeps the scalar tail: a lane past the end would
    divide by whatever it read and could raise the kernel's error flag for nothing."""
    x = sample((5, 3, 16), "int32", seed=4)
    y = (np.abs(sample((5, 3, 16), "int32", seed=5)) + 1).astype(np.int32)
    compiled = check(lambda a, b: a[:, :, 1:15] // b[:, :, 1:15], x, y)
    assert "vstore_first" not in compiled.kernel_source


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_division_by_a_literal(isa, dtype, check):
    """//, % and trunc division by positive literals (powers of two and others) of both signs'
    dividends, extremes included: the constant-divisor forms agree with the flagged division.
    A negative literal takes the flagged division."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(6).integers(info.min, info.max, (7, 37), dtype=dtype, endpoint=True)
    x[0, :4] = [info.min, info.max, 0, info.min + 1]

    def program(t):
        outputs = []
        for c in (1, 2, 3, 7, 8, 100):
            outputs += [t // c, t % c, t.div(c, rounding_mode="trunc")]
        return tuple(outputs) + (t // -3, t % -4)
    compiled = check(program, x)
    assert "int_floordiv_by<" in compiled.kernel_source and "int_mod_by<" in compiled.kernel_source


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_eight_byte_lanes_compare_select_and_reduce(isa, dtype, check):
    """Comparisons, selects, max and min of 8-byte lanes (two registers a vector at avx512, split
    into halves), NaNs propagating through max and min."""
    x, y = sample((9, 70), dtype, seed=7), sample((9, 70), dtype, seed=8)
    if dtype == "float64":
        x[2, 5] = np.nan
        y[3, 6] = np.nan

    def program(a, b):
        return (a < b, a == b, a != b, stax.where(a >= b, a, b * 2), a.maximum(b), a.minimum(b),
                a.amax(-1), a.amin(0), (a > 0).to(dtype) * b)
    check(program, x, y)


def test_rows_of_every_length_below_two_vectors(isa):
    """A row of each length from 1 to 2W + 1: the guarded vector, or scalar points below
    Tuning.vector_tail_min, cover each point once."""
    width = ISA_LEVELS[isa].width
    x = sample((3, 2 * width + 2), "float32", seed=9)
    for n in range(1, 2 * width + 2):
        run_check(lambda t, n=n: (t[:, :n] * 2).exp(), x, isa=isa, rtol=1e-6)


_GUARDED_LOADS = r"""
#include "stax_vec.h"
#include <cstdio>
#include <random>
// vload_guarded against the lane-by-lane definition, for random guards (steps -2 to 2, of every
// sign of offset) and strides 1 to 3, float and 8-byte lanes: prints the mismatches
template <int S, typename T> int trial(std::mt19937_64& rng, const T* p) {
  std::uniform_int_distribution<int64_t> offset(-2 * STAX_W, 2 * STAX_W), step(-2, 2), bound(0, 3 * STAX_W);
  const int count = 1 + int(rng() % 2);
  stax::LaneGuard g[2];
  for (int k = 0; k < count; ++k) g[k] = {offset(rng), step(rng), bound(rng)};
  const stax::vec<T> got = count == 1 ? stax::vload_guarded<S>(p, T(-7), {g[0]}) : stax::vload_guarded<S>(p, T(-7), {g[0], g[1]});
  int wrong = 0;
  for (int i = 0; i < STAX_W; ++i) {
    bool ok = true;
    for (int k = 0; k < count; ++k) ok = ok && g[k].e + g[k].c * i >= 0 && g[k].e + g[k].c * i < g[k].n;
    wrong += got[i] != (ok ? p[i * S] : T(-7));
  }
  return wrong;
}
int main() {
  std::mt19937_64 rng(11);
  float f[4 * STAX_W];
  double d[4 * STAX_W];
  int64_t q[4 * STAX_W];
  for (int i = 0; i < 4 * STAX_W; ++i) f[i] = float(i), d[i] = i + 0.5, q[i] = 3 * i;
  int wrong = 0;
  for (int t = 0; t < 20000; ++t)
    wrong += trial<1>(rng, f) + trial<2>(rng, f) + trial<3>(rng, f) + trial<1>(rng, d) + trial<2>(rng, d)
             + trial<1>(rng, q) + trial<2>(rng, q);
  std::printf("%d\n", wrong);
}
"""


def test_guarded_loads_read_exactly_the_lanes_their_guards_allow(isa, tmp_path):
    """stax::vload_guarded (a masked load of the lanes where every guard holds, an interval of
    lanes) against the lane-by-lane definition of a guarded load, on 140,000 random guards."""
    assert run_cpp(_GUARDED_LOADS, isa, tmp_path).strip() == "0"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_row_reductions_end_in_a_guarded_vector(isa, dtype, check):
    """Reductions along rows of 10 and 21 (a vector's remainder at avx512 and avx2) whose last
    vector adds the op's identity past the row's end (``first_lanes_or``); the elements after
    each row are NaN or the extreme integers, which a lane past the end would carry into the
    results.  Softmax keeps its exp row in a scratch row, whose last vector is guarded too."""
    x = sample((6, 3, 24), dtype, seed=12)
    x[:, :, 21:] = np.nan if dtype.startswith("float") else np.iinfo(dtype).max
    x[:, :, 10] = np.nan if dtype.startswith("float") else np.iinfo(dtype).min

    def program(t):
        short, long = t[:, :, :10], t[:, :, :21]
        outputs = (short.sum(-1), short.amax(-1), long.amin(-1), long.prod(-1) if dtype.startswith("float") else long.sum(-1))
        return outputs + ((long.softmax(-1), (short * 0.5).exp().sum(-1)) if dtype.startswith("float") else ())
    compiled = check(program, x, rtol=1e-5)
    if _guarded(isa, 10) or _guarded(isa, 21):
        assert "stax::first_lanes_or(" in compiled.kernel_source
