"""Random draws (stax.kernels.random_draws): masks, dropout (stax.frontend.ops.nn.dropout), uniform and normal noise
(stax.rand, stax.randn). The kernels against the numpy bits at every ISA level and thread count,
the draws' statistics, and programs that draw them against the reference of the traced program
under three fusions, through the compiled call and through the wrapper."""
from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stax
from stax.frontend.ops import nn
from stax.kernels.random_draws import bernoulli, bernoulli_mask, uniform, uniform_values
from stax.errors import ShapeError, UnsupportedError
from stax.reference import evaluate
from stax.target import ISA_LEVELS, runs_here

LEVELS = [name for name in ("none", "avx2", "avx512") if runs_here(ISA_LEVELS[name])]


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 17, 100_003])
def test_the_kernel_draws_the_numpy_bits(isa, threads, n):
    for seed, stream, p in ((0, 0, 0.5), (-3, 2, 0.1), ((1 << 63) - 1, 7, 0.9)):
        out = np.full(n, True)
        bernoulli(np.array(seed, np.int64), out=out, threads=threads, p=p, stream=stream, isa=ISA_LEVELS[isa])
        np.testing.assert_array_equal(out, bernoulli_mask(seed, stream, (n,), p))


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_uniform_kernel_draws_the_numpy_values(isa, dtype):
    for threads, n in ((1, 17), (2, 100_003)):
        out = np.full(n, 7, dtype)
        uniform(np.array(-8, np.int64), out=out, threads=threads, stream=3, isa=ISA_LEVELS[isa])
        np.testing.assert_array_equal(out, uniform_values(-8, 3, (n,), dtype))
    for p in (0.25, 0.5, 0.75):  # one hash: a mask is the uniform draw below p
        np.testing.assert_array_equal(uniform_values(-8, 3, (n,), dtype) < p, bernoulli_mask(-8, 3, (n,), p))


def test_rand_and_randn_have_their_distributions_and_match_the_reference():
    n = 1 << 18
    seed = np.array(21)
    fn = stax.compile(lambda s: (stax.rand(s, (n,)), stax.randn(s, (n,), "float64"), stax.rand(s, (3,), stream=0)), seed)
    u, z, again = fn(seed)
    want = evaluate(stax.trace(lambda s: (stax.rand(s, (n,)), stax.randn(s, (n,), "float64")), seed), seed)
    np.testing.assert_array_equal(u, want[0])
    np.testing.assert_allclose(z, want[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(again, u[:3])  # the same stream, the same draws
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(z.mean()) < 5 / np.sqrt(n) and abs(z.var() - 1) < 0.02 and np.abs(z).max() < 5.8
    with pytest.raises(UnsupportedError, match="floating-point dtype"):
        stax.trace(lambda s: stax.rand(s, (3,), "int32"), seed)


def test_a_mask_is_true_with_probability_p_and_its_elements_are_uncorrelated():
    n = 1 << 20
    for p in (0.1, 0.5, 0.9):
        mask = bernoulli_mask(11, 0, (n,), p)
        assert abs(mask.mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    a, b, c = (bernoulli_mask(seed, stream, (n,), 0.5) for seed, stream in ((11, 0), (11, 1), (12, 0)))
    bound = 5 / np.sqrt(n)  # five standard errors of a correlation of independent bits
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < bound  # neighbours
    assert abs(np.corrcoef(a, b)[0, 1]) < bound  # two streams of one seed
    assert abs(np.corrcoef(a, c)[0, 1]) < bound  # one stream of two seeds


@settings(max_examples=40, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 50), st.floats(0, 1), st.floats(0, 1))
def test_masks_are_nested_in_p_and_exact_at_zero_and_one(seed, stream, p, q):
    low, high = sorted((p, q))
    small, large = (bernoulli_mask(seed, stream, (300,), x) for x in (low, high))
    assert not (small & ~large).any()  # one draw per element, compared with a higher threshold
    assert not bernoulli_mask(seed, stream, (300,), 0.0).any()
    assert bernoulli_mask(seed, stream, (300,), 1.0).all()


def test_bad_seeds_and_probabilities_are_refused():
    with pytest.raises(ShapeError, match="probability must be in"):
        bernoulli_mask(0, 0, (3,), 1.5)
    with pytest.raises(ShapeError, match="0-d int64 seed"):
        bernoulli(np.array(0, np.int32), out=np.zeros(3, bool), threads=1, p=0.5, stream=0)
    x = np.ones(4, np.float32)
    with pytest.raises(UnsupportedError, match="seed must be a traced 0-d int64"):
        stax.trace(lambda x, s: stax.bernoulli(s, (4,), 0.5), x, np.array([0]))
    with pytest.raises(UnsupportedError, match="Python number in"):
        stax.trace(lambda x, s: nn.dropout(x, -0.1, s), x, np.array(0))


def _two_dropouts(x, w, seed):
    h = nn.dropout((x @ w).relu(), 0.25, seed)
    return nn.dropout(h, 0.5, seed).sum(-1), h


@pytest.mark.parametrize("fusion", ["greedy", "none", "cpsat"])
def test_programs_with_masks_match_the_reference_and_a_new_seed_draws_new_masks(fusion):
    rng = np.random.default_rng(5)
    x, w = rng.random((64, 32), np.float32), rng.random((32, 48), np.float32)
    fn = stax.compile(_two_dropouts, x, w, np.array(0), fusion=fusion)
    outputs = {}
    for seed in (7, 8):
        args = (x, w, np.array(seed))
        got = fn(*args)
        want = evaluate(stax.trace(_two_dropouts, *args), *args)
        for have, ref in zip(got, want):
            np.testing.assert_allclose(have, ref, rtol=1e-5)
        outputs[seed] = got[1]
    # an independent look at dropout: every element is dropped or scaled by 1 / (1 - p)
    kept = outputs[7] != 0
    np.testing.assert_allclose(outputs[7][kept], (np.maximum(x @ w, 0) / 0.75)[kept], rtol=1e-5)
    assert 0.2 < 1 - kept.mean() < 0.3
    assert (kept != (outputs[8] != 0)).any()
    np.testing.assert_array_equal(fn(x, w, np.array(7))[1], outputs[7])  # same seed, same masks


def test_the_python_wrapper_draws_the_compiled_calls_masks():
    x = np.random.default_rng(6).random((40, 24), np.float32)
    compiled, pooled = (stax.compile(lambda x, s: nn.dropout(x * 2, 0.3, s), x, np.array(0), memory_plan=plan)
                        for plan in ("wrapper", "pool"))
    assert isinstance(compiled._call, types.BuiltinFunctionType)
    assert isinstance(pooled._call, types.FunctionType)  # a pooled plan runs in the Python wrapper
    np.testing.assert_array_equal(pooled(x, np.array(3)), compiled(x, np.array(3)))


def test_dropout_at_zero_one_and_in_evaluation_is_torchs():
    x = np.array([1.0, -2.0, np.inf, 0.5], np.float32)
    seed = np.array(1)
    assert stax.trace(lambda x, s: nn.dropout(x, 0.0, s), x, seed).nodes.keys() == {"arg0", "arg1"}
    assert stax.trace(lambda x, s: nn.dropout(x, 0.7, s, training=False), x, seed).nodes.keys() == {"arg0", "arg1"}
    got = stax.compile(lambda x, s: nn.dropout(x, 1.0, s), x, seed)(x, seed)
    np.testing.assert_array_equal(got, [0.0, -0.0, np.nan, 0.0])
