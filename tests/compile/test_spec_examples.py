"""The spec's examples 7.1 and 7.2 reproduced: scheduler nodes, fusion log, kernel shape.

They compile under the spec's rule, ``rule="cpu"``: the default, ``"cpu-split"``, fuses example
7.2's exp with the reductions the spec keeps it apart from."""
import numpy as np
import pytest

import stax
from stax.codegen.tuning import Tuning
from stax.measure.demo import example_7_1, example_7_2
from stax.scheduler.fusion_log import fusion_log

X = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)


def test_example_7_1_nodes_fusion_and_kernel():
    f = stax.compile(example_7_1, X, rule="cpu")
    described = f.scheduler.describe()
    for line in ["op0.writes = [MemoryDep('buf0', c0, {c0: 64})]",
                 "op0.met_dependencies = [MemoryDep('arg0', c0, {c0: 8192})]",
                 "op0.group.iteration = ((64,), (128,))",
                 "op1.writes = [MemoryDep('buf1', c0, {c0: 8192})]",
                 "op1.unmet_dependencies = [MemoryDep('buf0', c0, {c0: 64})]",
                 "op1.met_dependencies = [MemoryDep('arg0', c0, {c0: 8192})]",
                 "op1.group.iteration = ((64, 128), ())"]:
        assert line in described
    log = fusion_log(f.fusion_problem, f.fusion).splitlines()  # in the spec's words: op names
    assert "round 1: found 1 possible fusions" in log
    assert "fusing op0 with op1 (vertical, shared data 33024 bytes)" in log
    line = 13  # stax.measure.demo.example_7_1's return line, which makes both ops
    assert f"fusing sum@demo.py:{line} with div@demo.py:{line} (vertical, shared data 33024 bytes)" \
        in f.fusion_log.splitlines()  # in the user's: each op's kind and source line
    assert "round 2: found 0 possible fusions" in log
    assert "op0_op1: OuterLoopFusedSchedulerNode(SchedulerNode,SchedulerNode)" in log
    (kernel,) = f.kernels
    assert kernel.source.count("#pragma omp for") == 1 and "x0 < 64" in kernel.source
    assert kernel.source.index("// op0") < kernel.source.index("// op1")  # row sum, then the row's division
    np.testing.assert_allclose(f(X), X / X.sum(-1, keepdims=True), rtol=1e-5)


def test_example_7_2_materializes_exp_and_fuses_the_reductions_horizontally():
    f = stax.compile(example_7_2, X, rule="cpu")
    groups = {n.name: n.group for n in f.scheduler.nodes}
    assert groups == {"op0": ((8192,), ()), "op1": ((64,), (128,)), "op2": ((64,), (128,))}
    reasons = {(p.a, p.b): p.reason for p in f.fusion_problem.forbidden}
    assert reasons[("op0", "op1")].startswith("outer_loops_differ") and "depth 0" in reasons[("op0", "op1")]
    log = fusion_log(f.fusion_problem, f.fusion, verbose=True).splitlines()
    assert "fusing op1 with op2 (SAME_VARS_REDUCE, shared data 32768 bytes)" in log
    assert "round 2: found 0 possible fusions" in log
    assert any(line.startswith("cannot fuse op0 with op1: forbidden: outer_loops_differ") for line in log)
    assert [k.nodes for k in f.block_kernels] == [["op0"], ["op1", "op2"]]
    # on the CPU the two kernels are one C++ function: two parallel loops in one parallel region (8.5)
    (function,) = f.kernels
    assert function.source.count("#pragma omp parallel") == 1 and function.source.count("#pragma omp for") == 2
    s, m = f(X)
    np.testing.assert_allclose(s, np.exp(X.astype(np.float64)).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(m, np.exp(X).max(-1), rtol=1e-6)


def test_element_count_rule_fuses_what_the_cpu_rule_rejects():
    f = stax.compile(example_7_2, X, rule="gpu")
    assert not any(p.reason.startswith("outer_loops_differ") for p in f.fusion_problem.forbidden)
    assert len(f.block_kernels) == 1  # exp, sum and amax in one kernel, with exp kept in the kernel
    s, m = f(X)
    np.testing.assert_allclose(s, np.exp(X.astype(np.float64)).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(m, np.exp(X).max(-1), rtol=1e-6)


def test_default_rule_fuses_example_7_2_in_one_pass():
    """The default, ``rule="cpu-split"``, splits exp's flat loop where the row reductions' outer
    loop ends: one kernel reading X once, exp computed once per element (once per vector of a
    step of ``Tuning.accumulators`` vectors, in one stax::v_exp4, shared by the sum and the amax,
    never stored)."""
    f = stax.compile(example_7_2, X, isa="avx2")
    assert f.fusion_problem.forbidden == ()
    assert [k.nodes for k in f.block_kernels] == [["op0", "op1", "op2"]]
    assert f.modeled_traffic == X.nbytes + 2 * 64 * 4
    source = f.kernels[0].source
    assert source.count("stax::v_exp4(") == 1 and "stax::v_exp(" not in source and "_row" not in source
    assert f"y0 += {Tuning().accumulators * 8}" in source
    s, m = f(X)
    np.testing.assert_allclose(s, np.exp(X.astype(np.float64)).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(m, np.exp(X).max(-1), rtol=1e-6)


def test_unknown_rule_is_refused_by_name():
    with pytest.raises(stax.StaxError, match="rule='GPU'.*'cpu-split'"):
        stax.compile(example_7_2, X, rule="GPU")


def test_inlining_exp_instead_of_materializing_it():
    f = stax.compile(example_7_2, X, cost_model=stax.CostModel(materialize_shared_expensive=False))
    assert len(f.scheduler.nodes) == 2 and len(f.block_kernels) == 1
    s, m = f(X)
    np.testing.assert_allclose(m, np.exp(X).max(-1), rtol=1e-6)
