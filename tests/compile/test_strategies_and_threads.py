"""Fusion and order strategies and fusion rules compute the same outputs, at one or more threads,
and outputs stay valid across calls from several Python threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import stax
from stax.reference import evaluate

from tests.helpers import sample


def softmax_and_friends(x, w):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    s = e / e.sum(-1, keepdim=True)
    return s, (s * w).sum(0), x.t() * 2 + w.t(), (x.sigmoid() * x).mean(-1)


@pytest.mark.parametrize("threads", [1, 2])
def test_fusion_none_and_greedy_agree(isa, threads, check):
    x, w = sample((37, 45), seed=53), sample((37, 45), seed=54)
    fused = check(softmax_and_friends, x, w, fusion="greedy", threads=threads)
    unfused = check(softmax_and_friends, x, w, fusion="none", threads=threads)
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
    f = stax.compile(softmax_and_friends, xs[0], xs[1])
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
