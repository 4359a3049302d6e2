"""The algebraic simplification pass (stax.passes.simplify): constant powers become multiplications,
sqrt, rsqrt and reciprocal, with torch's values at the special inputs; a permute of a permute
becomes one permute, or none when they cancel."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from instances.programs import PROGRAMS
from stax.reference import evaluate
from stax.passes.simplify import MAX_MULTIPLIED_EXPONENT, simplify

try:
    import torch
except ImportError:  # the torch comparisons are skipped; the numpy ones run
    torch = None

SPECIAL = np.array([-np.inf, -3.5, -1.0, -0.0, 0.0, 1e-40, 1e-20, 0.75, 1.0, 2.0, 1e20, np.inf, np.nan], np.float32)
EXPONENTS = [0, 1, 2, 3, 4, 5, 7, 8, 31, -1, -2, -3, -7, 0.5, -0.5, 2.0, -1.0, 3.0, 2.5, -1.5, 32, -32]


def ops_after_simplify(fn, *arrays) -> list[str]:
    return [n.op for n in simplify(stax.trace(fn, *arrays)).nodes.values()]


@pytest.mark.parametrize("exponent", EXPONENTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constant_powers_match_torch_at_special_values(exponent, dtype, check):
    x = SPECIAL.astype(dtype)
    compiled = check(lambda t: t ** exponent, x, upcast=False, rtol=4e-6 * max(1, abs(exponent)), atol=0)
    multiplied = float(exponent).is_integer() and abs(exponent) < MAX_MULTIPLIED_EXPONENT
    rewritten = multiplied or exponent in (0.5, -0.5)
    assert ("v_pow" in compiled.kernel_source) != rewritten
    if torch is not None:
        want = (torch.from_numpy(x) ** exponent).numpy()
        np.testing.assert_allclose(compiled(x), want, rtol=4e-6 * max(1, abs(exponent)), atol=0, equal_nan=True)
        numbers = ~np.isnan(want)  # the signs of zeros and infinities too (a NaN's sign is not specified)
        np.testing.assert_array_equal(np.signbit(compiled(x))[numbers], np.signbit(want)[numbers])


def test_square_root_forms_follow_torch_not_c_pow():
    """torch's pow with a Python scalar 0.5 is sqrt: (-inf) ** 0.5 is NaN and (-0.0) ** 0.5 is
    -0.0 (C's pow: inf and 0.0); a tensor exponent keeps C's pow, as torch does."""
    x = np.array([-np.inf, -0.0, 4.0], np.float32)
    root = stax.compile(lambda t: (t ** 0.5, t ** -0.5), x)(x)
    np.testing.assert_array_equal(np.isnan(root[0]), [True, False, False])
    assert np.signbit(root[0][1]) and root[1][1] == -np.inf
    half = np.float32(0.5)
    tensor_exponent = stax.compile(lambda t, e: t ** e, x, np.array(half))
    assert "v_pow" in tensor_exponent.kernel_source
    c_pow = np.array([math.pow(v, 0.5) for v in x.tolist()], np.float32)
    np.testing.assert_array_equal(tensor_exponent(x, np.array(half)), c_pow)
    np.testing.assert_array_equal(evaluate(tensor_exponent.graph, x, np.array(half))[0], c_pow)
    if torch is not None:
        np.testing.assert_array_equal(tensor_exponent(x, np.array(half)),
                                      torch.pow(torch.from_numpy(x), torch.tensor(half)).numpy())


def test_powers_become_products_by_repeated_squaring():
    x = np.ones(4, np.float32)
    assert ops_after_simplify(lambda t: t ** 2, x) == ["input", "mul"]
    assert ops_after_simplify(lambda t: t ** 8, x).count("mul") == 3
    assert ops_after_simplify(lambda t: t ** 7, x).count("mul") == 4
    assert ops_after_simplify(lambda t: t ** -3, x) == ["input", "reciprocal", "mul", "mul"]
    assert ops_after_simplify(lambda t: t ** -2, x) == ["input", "mul", "reciprocal"]
    assert ops_after_simplify(lambda t: t ** 0.5, x)[-1] == "sqrt"
    assert ops_after_simplify(lambda t: t ** -0.5, x)[-1] == "rsqrt"
    assert "pow" in ops_after_simplify(lambda t: t ** 2.5, x)
    assert "pow" in ops_after_simplify(lambda t: t ** 32, x)
    assert ops_after_simplify(lambda t: t ** 1 + 1, x) == ["input", "constant", "reshape", "expand", "add"]


def test_the_traced_graph_is_left_as_it_was():
    graph = stax.trace(lambda t: t ** 3, np.ones(4, np.float32))
    before = str(graph)
    assert "pow" not in [n.op for n in simplify(graph).nodes.values()]
    assert str(graph) == before
    unchanged = stax.trace(lambda t: t.exp(), np.ones(4, np.float32))
    assert simplify(unchanged) is unchanged


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_powers_wrap_like_torch(dtype, check):
    x = np.array([-7, -2, -1, 0, 1, 2, 3, 1000, 46341], dtype)
    for exponent in (0, 1, 2, 3, 5, 11, 31):
        compiled = check(lambda t: t ** exponent, x)
        assert "v_pow" not in compiled.kernel_source
        if torch is not None:
            np.testing.assert_array_equal(compiled(x), (torch.from_numpy(x) ** exponent).numpy())


def test_integer_tensor_exponents_follow_torch_powi(check):
    """An integer to a negative integer power is 0, except for bases 1 and -1 (torch's powi)."""
    base = np.array([-3, -1, 0, 1, 2, 5, -1, 7], np.int64)
    exponent = np.array([2, -3, -1, -2, 3, 0, -4, -1], np.int64)
    compiled = check(lambda a, b: (a ** b, 2 ** b), base, exponent)
    if torch is not None:
        a, b = torch.from_numpy(base), torch.from_numpy(exponent)
        for got, want in zip(compiled(base, exponent), (a ** b, 2 ** b)):
            np.testing.assert_array_equal(got, want.numpy())


def test_an_in_place_power_and_a_power_that_is_an_output(check):
    def fn(t, u):
        u.pow_(2)
        return t ** 1, t ** 0, (t ** 1) * 2
    check(fn, SPECIAL.copy(), SPECIAL.copy())


IDIOMS = {"rmsnorm_pow": "rmsnorm", "layernorm_pow": "layernorm", "mse_pow": "mse",
          "polynomial_pow": "polynomial", "normalize_norm": "normalize"}


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_suite_idioms_compile_like_their_hand_expanded_forms(idiom):
    """No vector pow in the kernels, and as many kernels as the hand-expanded program."""
    program, hand = PROGRAMS[idiom], PROGRAMS[IDIOMS[idiom]]
    arrays = program.inputs(16, columns=24)
    ours, theirs = stax.compile(program.fn, *arrays), stax.compile(hand.fn, *arrays)
    assert "v_pow" not in ours.kernel_source
    assert len(ours.kernels) == len(theirs.kernels)
    got = ours(*arrays)
    np.testing.assert_allclose(got, theirs(*arrays), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, evaluate(ours.graph, *arrays)[0], rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(exponent=st.one_of(st.integers(-MAX_MULTIPLIED_EXPONENT + 1, MAX_MULTIPLIED_EXPONENT - 1),
                          st.sampled_from([0.5, -0.5, -1.0, 2.0, 2.5])),
       values=st.lists(st.one_of(st.floats(-1e3, 1e3), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])),
                       min_size=1, max_size=12))
def test_the_simplified_graph_computes_the_traced_one(exponent, values):
    """The law of the pass, on the reference evaluator in float64: the rewritten graph's values
    are the traced graph's (torch's pow), within the products' rounding, with the same NaNs,
    infinities and signed zeros."""
    x = np.array(values, np.float64)
    graph = stax.trace(lambda t: t ** exponent, x)
    (want,), (got,) = evaluate(graph, x), evaluate(simplify(graph), x)
    np.testing.assert_allclose(got, want, rtol=1e-14 * max(1, abs(exponent)), atol=0, equal_nan=True)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got)[numbers], np.signbit(want)[numbers])


@settings(max_examples=40, deadline=None)
@given(first=st.permutations(range(3)), second=st.permutations(range(3)), output_only=st.booleans())
def test_nested_permutes_become_one_or_none_and_compute_numpys_result(first, second, output_only):
    """x.permute(p).permute(q) is x.transpose(p[q]): one permute node, none when p[q] is the
    identity (then the output may be the input itself), with numpy's values under every fusion."""
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)

    def fn(t):
        y = t.permute(*first).permute(*second)
        return y if output_only else y * 2 + 1
    composed = tuple(first[d] for d in second)
    want = x.transpose(composed) if output_only else x.transpose(composed) * 2 + 1
    permutes = ops_after_simplify(fn, x).count("permute")
    assert permutes == (0 if composed == (0, 1, 2) else 1)
    for fusion in ("none", "greedy"):
        np.testing.assert_allclose(stax.compile(fn, x, fusion=fusion)(x), want, rtol=1e-6)


def test_a_matmul_transposed_back_and_forth_is_no_copy():
    """permute(permute(mm)) as an ATen backward graph has it (a weight gradient's output): the
    output is the matmul's own buffer, with no kernel copying it."""
    a, b = np.ones((8, 6), np.float32), np.ones((6, 5), np.float32)
    compiled = stax.compile(lambda x, y: (x @ y).t().t(), a, b)
    assert [k.form for k in compiled.kernels] == ["extern"]  # the matmul, and no copy after it
    np.testing.assert_allclose(compiled(a, b), a @ b)
