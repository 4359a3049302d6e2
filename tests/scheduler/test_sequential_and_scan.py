"""The sequential fusion rule (Proposition 7.3 (1)) and scan nodes (spec 7.7 end)."""
import numpy as np
import pytest

import stax
from stax.reference import evaluate
from stax.scheduler.random_fusion import RandomFusion
from stax.measure.traffic import count_traffic

MATERIALIZE = stax.CostModel(max_inline_ops=0)  # every elementwise node is a buffer: real producer/consumer pairs


def shift_1d(x):
    y = x * 2
    return y[1:] + y[:-1]


def stencil_2d(x):
    y = x.exp()
    return y[1:, 1:] + y[:-1, 1:] + y[1:, :-1]


def prefix_chain(x):
    y = x * 2
    z = y[1:] * y[:-1]
    return z[1:] - z[:-1], y


def row_stencil(x):
    y = x - x.amax(-1, keepdim=True)
    return y[:, 2:] + y[:, 1:-1] + y[:, :-2]


# row_stencil's consumer cannot join the reduction's block (Definition 7.2), so greedy picks the same blocks
FUSES_MORE = {"shift_1d", "stencil_2d", "prefix_chain"}
SHIFTED = {
    "shift_1d": (shift_1d, [(257,)]),
    "stencil_2d": (stencil_2d, [(20, 33)]),
    "prefix_chain": (prefix_chain, [(300,)]),
    "row_stencil": (row_stencil, [(9, 40)]),
}


def arrays(shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]


def check(compiled, inputs, tol=2e-5):
    got = compiled(*[a.copy() for a in inputs])
    got = got if isinstance(got, tuple) else (got,)
    want = evaluate(compiled.graph, *[a.copy() for a in inputs], upcast=True)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def allowed_pairs(compiled) -> set[frozenset[str]]:
    nodes = compiled.fusion_problem.nodes
    forbidden = compiled.fusion_problem.forbidden_set()
    return {frozenset((a, b)) for i, a in enumerate(nodes) for b in nodes[i + 1:]} - set(forbidden)


def sequential_blocks(compiled):
    return [g for k in compiled.block_kernels for g in k.generators if g.sequential_reason]


@pytest.mark.parametrize("name", sorted(SHIFTED))
def test_shifted_programs_under_both_rules(name):
    fn, shapes = SHIFTED[name]
    inputs = arrays(shapes)
    parallel = stax.compile(fn, *inputs, cost_model=MATERIALIZE)
    sequential = stax.compile(fn, *inputs, cost_model=MATERIALIZE, dependence="sequential")
    check(parallel, inputs)
    check(sequential, inputs)
    assert allowed_pairs(parallel) < allowed_pairs(sequential)  # strictly more candidate fusions
    assert sequential.modeled_traffic <= parallel.modeled_traffic
    assert not sequential_blocks(parallel)
    blocks = sequential_blocks(sequential)
    assert all("Proposition 7.3 (1)" in b.sequential_reason for b in blocks)
    if name in FUSES_MORE:
        assert blocks and len(sequential.block_kernels) < len(parallel.block_kernels)
    for kernel in sequential.block_kernels:
        if any(g.sequential_reason for g in kernel.generators):
            assert "omp for" not in kernel.source and "sequential loops:" in kernel.source
    # Definition 7.3 still prices every kernel: carried values are stored once and re-read from cache
    for row in count_traffic(sequential, *inputs):
        if row.kernel in {k.name for k in sequential.block_kernels if len(k.nodes) > 1}:
            assert (row.counted_read, row.counted_write) == (row.modeled_read, row.modeled_write), row


@pytest.mark.parametrize("seed", range(4))
def test_random_partitions_of_the_sequential_rule(seed):
    fn, shapes = SHIFTED[sorted(SHIFTED)[seed]]
    inputs = arrays(shapes, seed)
    compiled = stax.compile(fn, *inputs, cost_model=MATERIALIZE, dependence="sequential",
                            fusion=RandomFusion(seed=seed))
    check(compiled, inputs)


def test_reads_ahead_and_transposes_stay_unfused():
    def transpose(x):
        y = x * 2
        return y + y.t()
    compiled = stax.compile(transpose, *arrays([(16, 16)]), cost_model=MATERIALIZE, dependence="sequential")
    reasons = [p.reason for p in compiled.fusion_problem.forbidden]
    assert any("Proposition 7.3 (1)" in r for r in reasons)
    check(compiled, arrays([(16, 16)]))


def test_sequential_rule_is_validated():
    with pytest.raises(stax.errors.StaxError, match="dependence="):
        stax.compile(shift_1d, *arrays([(8,)]), dependence="wavefront")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape", [(37,), (6, 9), (3, 5, 7)])
def test_scans_over_every_dim_fused(shape, dtype):
    """cumsum and cumprod over every dim with a pointwise producer and consumer, vs numpy."""
    def program(x):
        y = x * 2 - 1 if dtype == "int32" else (x * 0.3).tanh() + 1
        outs = []
        for d in range(len(shape)):
            outs += [y.cumsum(d) * 3, (y.cumprod(d) + 1).abs(), y.cumsum(-1 - d, dtype="float64")]
        return tuple(outs)
    inputs = [(np.random.default_rng(1).integers(-2, 3, shape)).astype(dtype)] if dtype == "int32" else arrays([shape])
    compiled = stax.compile(program, *inputs, cost_model=MATERIALIZE)
    check(compiled, inputs, tol=1e-4)
    kinds = {compiled.fusion_problem.node_info[n]["kind"] for n in compiled.fusion_problem.nodes}
    assert "scan" in kinds
    x = inputs[0]
    y = x.astype(np.int64) * 2 - 1 if dtype == "int32" else np.tanh(x * 0.3) + 1
    got = compiled(*inputs)
    np.testing.assert_allclose(got[0], np.cumsum(y, 0) * 3, rtol=1e-4)
    assert got[0].dtype == (np.int64 if dtype == "int32" else np.float32)
    scan_blocks = [k for k in compiled.block_kernels if "scan" in k.source]
    assert any(len(k.nodes) > 1 for k in scan_blocks)  # fused with a producer or consumer


def test_bool_scans_count_in_int64():
    x = np.array([[True, False, True], [True, True, False]])
    compiled = stax.compile(lambda t: (t.cumsum(1), t.cumprod(0)), x)
    got = compiled(x)
    np.testing.assert_array_equal(got[0], np.cumsum(x, 1))
    np.testing.assert_array_equal(got[1], np.cumprod(x, 0))
    assert got[0].dtype == np.int64


def test_scan_never_fuses_across_the_carried_dim():
    def program(x):
        c = x.cumsum(1)
        return c[:, 1:] - c[:, :-1]
    inputs = arrays([(8, 12)])
    for dependence in ("parallel", "sequential"):
        compiled = stax.compile(program, *inputs, dependence=dependence)
        check(compiled, inputs, tol=1e-4)
        assert len(compiled.block_kernels) == 2


def test_blocked_parallel_scan_on_a_long_input():
    x = np.random.default_rng(2).random(200_003).astype(np.float64)
    compiled = stax.compile(lambda t: (t * 2).cumsum(0) + 1, x, threads=2)
    assert "blocked-scan" in [k.form for k in compiled.block_kernels]
    assert "omp for" in compiled.kernel_source
    np.testing.assert_allclose(compiled(x), np.cumsum(x * 2) + 1, rtol=1e-12)
    ints = np.random.default_rng(3).integers(-3, 4, 100_000).astype(np.int32)
    compiled = stax.compile(lambda t: t.cumprod(0) + t.cumsum(0), ints, threads=2)
    np.testing.assert_array_equal(compiled(ints), np.cumprod(ints.astype(np.int64)) + np.cumsum(ints))


def test_numpy_fallback():
    x = arrays([(5, 7)])[0]
    compiled = stax.compile(lambda t: (t * 2).cumsum(1), x, cost_model=stax.CostModel(native_scans=False))
    assert any(k.extern and k.extern["op"] == "cumsum" for k in compiled.kernels)
    assert "cumsum(" in compiled.wrapper_source
    np.testing.assert_allclose(compiled(x), np.cumsum(x * 2, 1), rtol=1e-6)
    empty = np.zeros((0, 4), np.float32)
    compiled = stax.compile(lambda t: t.cumprod(1), empty)  # an empty scan always takes the fallback
    assert compiled(empty).shape == (0, 4)
    counted = count_traffic(stax.compile(lambda t: (t * 2).cumsum(1), x, cost_model=stax.CostModel(native_scans=False)), x)
    assert all((r.counted_read, r.counted_write) == (r.modeled_read, r.modeled_write) for r in counted)


def _logcumsumexp_input(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values 60 apart (exp of their difference underflows float32), both infinities, a NaN, and
    a row of -inf: where shifting by the row's largest value loses the small prefixes."""
    x = (np.random.default_rng(seed).standard_normal(shape) * 30).astype(np.float32)
    flat = x.reshape(-1)
    flat[:4] = [-np.inf, -60.0, np.inf, 0.0]
    flat[-1] = np.nan
    x[..., 0, :] = -np.inf
    return x


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_logcumsumexp_is_a_scan_of_log_add_exp_along_every_dim(dim):
    """logcumsumexp against numpy's logaddexp.accumulate (in float64) fused with pointwise
    neighbours, on one and two threads and the numpy fallback: -inf prefixes stay -inf, +inf
    stays, NaN propagates, and a prefix far below the row's largest value keeps its own value."""
    x = _logcumsumexp_input((4, 5, 19), dim)
    with np.errstate(invalid="ignore"):  # numpy subtracts equal infinities before it returns them
        want = np.logaddexp.accumulate(x.astype(np.float64) * 2, axis=dim) - 1
    for options in ({"threads": 1}, {"threads": 2}, {"cost_model": stax.CostModel(native_scans=False)}):
        compiled = stax.compile(lambda t: (t * 2).logcumsumexp(dim) - 1, x, **options)
        np.testing.assert_allclose(compiled(x), want.astype(np.float32), rtol=2e-6, atol=2e-6, err_msg=str(options))


def test_logcumsumexp_blocked_on_two_threads_and_refused_for_integers():
    """A long 1-D logcumsumexp runs as the blocked scan (chunk totals combined by log-add-exp); an
    integer input is refused as torch refuses it."""
    x = np.random.default_rng(4).standard_normal(100_003).astype(np.float64) * 5
    x[:3] = [-np.inf, -800.0, -700.0]  # exp(-800) underflows float64: the first prefixes need the log-add-exp
    compiled = stax.compile(lambda t: t.logcumsumexp(0), x, threads=2)
    assert "blocked-scan" in [k.form for k in compiled.block_kernels]
    np.testing.assert_allclose(compiled(x), np.logaddexp.accumulate(x), rtol=1e-13)
    with pytest.raises(stax.UnsupportedError, match="floating"):
        stax.compile(lambda t: t.logcumsumexp(0), np.arange(5))
