"""Sums of matmuls as one accumulating extern (stax.passes.matmul_sums): which adds fold, and that the
compiled sums equal the reference evaluation of the traced program."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from tests.helpers import run_check
from stax.passes.matmul_sums import fold_matmul_sums


def ops(fn, *arrays) -> list[str]:
    return [n.op for n in fold_matmul_sums(stax.trace(fn, *arrays)).nodes.values()]


def recurrence_weight_grad(gs, xs):
    """What autograd writes for a weight used at every step: the steps' products, each transposed
    twice into the weight's layout, added one after another."""
    total = (gs[0].t() @ xs[0]).t().t()
    for t in range(1, gs.shape[0]):
        total = total + (gs[t].t() @ xs[t]).t().t()
    return total


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_recurrence_weight_gradient_is_one_accumulating_call(dtype, threads, check):
    rng = np.random.default_rng(1)
    gs, xs = rng.standard_normal((6, 16, 48)).astype(dtype), rng.standard_normal((6, 16, 40)).astype(dtype)
    assert ops(recurrence_weight_grad, gs, xs).count("matmul_sum") == 1
    assert "matmul" not in ops(recurrence_weight_grad, gs, xs)
    compiled = check(recurrence_weight_grad, gs, xs, threads=threads, rtol=1e-5, atol=1e-4)
    assert compiled.wrapper_source.count("matmul_sum(") == 1
    assert "parallel_matmul(" not in compiled.wrapper_source


def test_a_product_read_elsewhere_and_other_terms_stay_apart(check):
    """A product that another node also reads is computed once and added; terms that are no
    products (a bias, an elementwise value) are added to the sum of the rest."""
    rng = np.random.default_rng(2)
    a, b, c, bias = (rng.standard_normal(s).astype(np.float32) for s in ((8, 12), (12, 10), (8, 12), (8, 10)))

    def fn(a, b, c, bias):
        shared = a @ b
        return (bias.exp() + shared) + (c @ b + (a * 2) @ b), shared.relu()
    folded = ops(fn, a, b, c, bias)
    assert folded.count("matmul_sum") == 1 and folded.count("matmul") == 1
    check(fn, a, b, c, bias, rtol=1e-5, atol=1e-4)


def test_a_lone_product_and_integer_sums_keep_their_adds():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    graph = stax.trace(lambda a, b: a @ b + 1.0, a, b)
    assert fold_matmul_sums(graph) is graph
    ints = rng.integers(-3, 3, (4, 5)), rng.integers(-3, 3, (5, 3))
    assert "matmul_sum" not in ops(lambda a, b: a @ b + a @ b * 2, *ints)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_sums_of_products_equal_the_reference(data):
    """Random add trees over products (plain, transposed once or twice, batched) and other terms;
    some products are also returned, so they must not be folded away."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    batched = data.draw(st.booleans())
    lead = (3,) if batched else ()
    m, k, n = (int(x) for x in rng.integers(2, 9, 3))
    count = data.draw(st.integers(2, 5))
    shapes = [lead + (m, k), lead + (k, n)] * count + [lead + (m, n)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    swaps = data.draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
    returned = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    order = data.draw(st.permutations(range(count + 1)))

    def fn(*xs):
        terms, extra = [], []
        for i in range(count):
            a, b = xs[2 * i], xs[2 * i + 1]
            product = (b.transpose(-1, -2) @ a.transpose(-1, -2)) if swaps[i] == 1 else a @ b
            if swaps[i] == 1:
                product = product.transpose(-1, -2)
            elif swaps[i] == 2:
                product = product.transpose(-1, -2).transpose(-1, -2)
            terms.append(product)
            if returned[i]:
                extra.append(product)
        terms.append(xs[-1].sigmoid())
        total = terms[order[0]]
        for j in order[1:]:
            total = total + terms[j]
        return (total, *extra)
    compiled = run_check(fn, *arrays, rtol=1e-5, atol=1e-4, threads=data.draw(st.sampled_from([1, 2])))
    folded = count - sum(returned)  # the products read only by the sum
    assert ("matmul_sum(" in compiled.wrapper_source) == (folded >= 2)
    assert compiled.wrapper_source.count("parallel_matmul(") == (sum(returned) if folded >= 2 else count)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_sum_accumulates_on_the_openmp_team(dtype, monkeypatch):
    """stax.kernels.matmul.matmul_sum: the first gemm writes the output, the next ones add to it (beta = 1),
    with operands stored transposed too, wide and tall products alike, on one thread too."""
    from stax.kernels import matmul
    from stax.target import native_isa

    isa = native_isa()
    if matmul._team_gemm(dtype, isa) is None:
        pytest.skip("numpy's BLAS has no CBLAS gemm that threadpoolctl finds; np.matmul is used")
    real, calls = np.matmul, []

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(matmul.np, "matmul", counted)
    rng = np.random.default_rng(4)
    for (m, k, n), threads in itertools.product([(40, 96, 300), (256, 32, 80)], [1, 2]):
        pairs = [(rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype))
                 for _ in range(3)]
        flags = (True, False, False, True, True, True)
        stored = [np.ascontiguousarray(x.T) if t else x for x, t in zip((x for p in pairs for x in p), flags)]
        out = np.full((m, n), np.nan, dtype)
        calls.clear()
        matmul.matmul_sum(*stored, out=out, threads=threads, transposed=flags, isa=isa)
        # every product is a gemm, on one thread too: the first with beta = 0, the next ones with beta = 1
        assert not calls
        want = sum(real(a.astype(np.float64), b) for a, b in pairs)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4, err_msg=f"{m}x{k}x{n}, {threads} threads")
