"""Laws of fusion (spec 7.2-7.4): any partition the validator accepts computes the same outputs
as no fusion, and Definition 7.3's modeled traffic equals the bytes the kernels really move."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import stax
from stax.reference import evaluate
from stax.scheduler.random_fusion import RandomFusion
from stax.measure.traffic import count_traffic


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def layernorm(x, w):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / (var + 1e-5).sqrt() * w


def columns_then_rows(x):
    c = x.sum(0, keepdim=True)
    y = (x / c).tanh()
    return y.amax(-1), (y * 2).sum(-1), y


def tall_columns(x):
    """Column reductions over enough rows to run as split reductions, with an epilogue."""
    return x.sum(0), x.amax(0) * 2 - x.sum(0)


def shared_exp(x):
    e = x.exp()
    return e.sum(-1), e.amax(-1), e * 3


def transposed_add(x, y):
    return (x + y.t()).relu()


PROGRAMS = {
    "softmax": (softmax, [(33, 70)]),
    "layernorm": (layernorm, [(16, 40), (40,)]),
    "columns_then_rows": (columns_then_rows, [(24, 36)]),
    "shared_exp": (shared_exp, [(12, 50)]),
    "tall_columns": (tall_columns, [(300, 21)]),
    "transposed_add": (transposed_add, [(20, 30), (30, 20)]),
}


def arrays_for(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def check_outputs(compiled, arrays):
    got = compiled(*[a.copy() for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    want = evaluate(compiled.graph, *[a.copy() for a in arrays], upcast=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(PROGRAMS)), seed=st.integers(0, 10_000))
def test_every_valid_partition_computes_the_same_outputs(name, seed):
    fn, shapes = PROGRAMS[name]
    arrays = arrays_for(shapes, seed)
    compiled = stax.compile(fn, *arrays, fusion=RandomFusion(seed=seed))
    compiled.fusion_problem.validate(compiled.fusion.partition)
    check_outputs(compiled, arrays)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("fusion", ["none", "greedy", RandomFusion(seed=7)], ids=["none", "greedy", "random"])
def test_modeled_traffic_equals_counted_traffic(name, fusion):
    fn, shapes = PROGRAMS[name]
    arrays = arrays_for(shapes, 0)
    compiled = stax.compile(fn, *arrays, fusion=fusion)
    rows = count_traffic(compiled, *arrays)
    for row in rows:
        assert (row.counted_read, row.counted_write) == (row.modeled_read, row.modeled_write), row
    assert sum(r.counted_read + r.counted_write for r in rows) == compiled.modeled_traffic


def test_greedy_fuses_and_saves_traffic_on_the_suite():
    for name, (fn, shapes) in PROGRAMS.items():
        arrays = arrays_for(shapes, 1)
        fused = stax.compile(fn, *arrays, fusion="greedy")
        unfused = stax.compile(fn, *arrays, fusion="none")
        assert fused.modeled_traffic <= unfused.modeled_traffic, name
        check_outputs(fused, arrays)
    assert len(stax.compile(softmax, *arrays_for([(33, 70)], 0)).kernels) == 1
