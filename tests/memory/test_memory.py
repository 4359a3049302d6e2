"""Spec 7.5 in the compiled wrapper: the measured peak equals the plan's, reuse never raises it,
and reuse / in-place reuse appear exactly where the rules allow."""
import re

import numpy as np
import pytest

import stax
from stax.reference import evaluate

ORDERS = ["original", "lpmf", "bfs", "dfs", "best"]


def branches(x, y):
    a = (x * 2).exp()
    b = (y + 1).tanh()
    c = (a * b).sum(-1, keepdim=True)
    d = a - c
    e = (b * 3).amax(0, keepdim=True)
    return d * e, c


def chain(x):
    a = x.exp()
    b = a * 2
    c = b.tanh()
    return c + 1


EVERY_OP_A_BUFFER = stax.CostModel(max_inline_ops=0)  # materialize each elementwise op


def run_and_check(compiled, arrays):
    got = compiled(*[a.copy() for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, evaluate(compiled.graph, *[a.copy() for a in arrays], upcast=True)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(3)
    return [rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("reuse", [False, True])
def test_measured_peak_equals_the_plan(inputs, order, reuse):
    compiled = stax.compile(branches, *inputs, fusion="none", order=order, reuse=reuse, inplace=reuse)
    run_and_check(compiled, inputs)
    assert compiled.memory.peak == compiled.memory_plan.peak
    if not reuse:
        assert compiled.memory.peak == compiled.order.peak  # Definition 7.5's estimate, exactly
    assert compiled.memory_plan.peak <= compiled.order.peak  # reuse never raises the peak


def test_best_is_never_above_original(inputs):
    best = stax.compile(branches, *inputs, fusion="none", order="best")
    original = stax.compile(branches, *inputs, fusion="none", order="original")
    assert best.order.peak <= original.order.peak
    assert best.order.peak == min(best.order.info.candidates.values())
    report = best.memory_report
    assert report.measured is None  # not run yet
    best(*inputs)
    assert best.memory_report.measured == best.memory_plan.peak
    assert "chosen" in str(best.memory_report)


def test_inplace_reuse_in_a_chain_and_its_peak():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    compiled = stax.compile(chain, x, fusion="none", cost_model=EVERY_OP_A_BUFFER)
    assert len(re.findall(r"# reuse in place", compiled.wrapper_source)) == 3  # b, c and the output
    run_and_check(compiled, [x])
    plain = stax.compile(chain, x, fusion="none", inplace=False, reuse=False, cost_model=EVERY_OP_A_BUFFER)
    run_and_check(plain, [x])
    assert compiled.memory.peak < plain.memory.peak == plain.order.peak


def test_reuse_from_the_free_pool():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    for grouped in (False, True):  # kernels called one by one (the spec's wrapper), or sharing a region
        compiled = stax.compile(chain, x, fusion="none", inplace=False, cost_model=EVERY_OP_A_BUFFER,
                                group_kernels=grouped)
        lines = [line for line in compiled.wrapper_source.splitlines() if line.endswith("# reuse")]
        deferred = "" if not grouped else "?"  # in a shared call, the old name is deleted after the call
        pattern = rf"\s*buf\d+ = buf\d+\.reshape\(\(64, 32\)\)(; del buf\d+){deferred}  # reuse"
        assert lines and all(re.fullmatch(pattern, line) for line in lines)
        run_and_check(compiled, [x])
        assert compiled.memory.peak == compiled.memory_plan.peak <= compiled.order.peak


def test_no_reuse_of_outputs_inputs_or_other_dtypes_and_sizes():
    x = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)

    def outputs_and_casts(x):
        a = x.exp()              # an output: its storage is never given away
        b = (a * 2).double()     # another dtype
        c = b.sum(-1)            # another size
        return a, c * 2

    compiled = stax.compile(outputs_and_casts, x, fusion="none", cost_model=EVERY_OP_A_BUFFER)
    storage = compiled.memory_plan.storage
    outputs = set(compiled.program.outputs)
    for where in storage.values():
        if where.source is not None:
            assert where.source not in outputs
            assert where.source not in {i.name for i in compiled.program.inputs}
            meta = {b.name: b for b in compiled.program.buffers}
            assert meta[where.source].dtype == meta[where.name].dtype
            assert np.prod(meta[where.source].shape) == np.prod(meta[where.name].shape)
    assert "arg0.reshape" not in compiled.wrapper_source
    run_and_check(compiled, [x])


def test_pool_mode(inputs):
    compiled = stax.compile(branches, *inputs, fusion="none", memory_plan="pool")
    run_and_check(compiled, inputs)
    run_and_check(compiled, inputs)  # a second call reuses the same pool
    report = compiled.memory_report
    assert report.pool_size >= report.lower_bound
    assert compiled.memory.peak == compiled.memory_plan.peak
    with pytest.raises(stax.StaxError, match="memory_plan"):
        stax.compile(chain, inputs[0], memory_plan="arena")
