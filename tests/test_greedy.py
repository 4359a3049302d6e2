"""Greedy fusion (Algorithm 7.1), its cycle test (Proposition 7.1) and the no-fusion baseline."""
import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from instances.dags import fusion_problem, layered_dag, series_parallel_dag
from stax.errors import InvalidScheduleError
from stax.memory.orders import original_order
from stax.problems import Buffer, ForbiddenPair, FusionProblem, kernel_order_problem, quotient_graph
from stax.scheduler.greedy import FusionGroups, GreedyFusion, compare_scores, score
from stax.scheduler.events import Fused, FusionKind, NotFused, WhyNoFuse
from stax.scheduler.report import fusion_log
from stax.strategy import run_fusion

FAMILIES = {"layered": layered_dag, "series-parallel": series_parallel_dag}


def example_7_1() -> FusionProblem:
    """k(x) = x / x.sum(-1, keepdim=True) on 64x128 floats: op0 is the row sum, op1 the division."""
    return FusionProblem(
        nodes=("op0", "op1"),
        buffers=(Buffer("primals_1", 32768, None, ("op0", "op1")), Buffer("buf1", 256, "op0", ("op1",)),
                 Buffer("buf2", 32768, "op1", (), is_output=True)),
        node_info={"op0": {"kind": "reduction"}, "op1": {"kind": "pointwise"}})


def test_example_7_1_fuses_op0_with_op1_scoring_33024():
    problem = example_7_1()
    assert score(FusionGroups(problem), ("op0",), ("op1",)) == (0, 32768 + 256, 2, -1)
    result = run_fusion("greedy", problem)
    assert result.partition == (("op0", "op1"),)
    assert log(result) == ["round 1: found 1 possible fusions", "fusing op0 with op1 (vertical, shared data 33024 bytes)",
                           "round 2: found 0 possible fusions"]
    assert result.cost == 32768 + 32768


def test_rounds_merge_each_group_once_and_stop_when_nothing_merges():
    problem = FusionProblem(nodes=("a", "b", "c"),
                            buffers=(Buffer("x", 8, None, ("a", "b", "c")),) +
                            tuple(Buffer(f"y{n}", 1, n, (), is_output=True) for n in "abc"))
    result = run_fusion("greedy", problem)
    assert result.partition == (("a", "b", "c"),)
    assert log(result) == ["round 1: found 3 possible fusions", "fusing a with b (horizontal, shared data 8 bytes)",
                           "round 2: found 1 possible fusions", "fusing a_b with c (horizontal, shared data 8 bytes)",
                           "round 3: found 0 possible fusions"]
    assert NotFused(("b",), ("c",), WhyNoFuse.FUSED_THIS_ROUND) in result.info.events
    assert len([line for line in log(run_fusion("greedy", problem, max_rounds=1)) if "round" in line]) == 1


def log(result) -> list[str]:
    """The rounds and merges, as the fusion log renders them."""
    return [e.text() for e in result.info.events if not isinstance(e, NotFused)]


def test_fusion_kinds_come_from_the_dependencies_not_from_node_names():
    """Nodes named n_0, n_1 (as in the shipped vsep_tree-6-0): the group n_0_n_1 once read as three nodes."""
    problem = FusionProblem(nodes=("n_0", "n_1", "n_2", "n_3"),
                            buffers=(Buffer("x", 64, None, ("n_0", "n_2")), Buffer("t", 64, "n_0", ("n_1",)),
                                     Buffer("u", 64, "n_1", ("n_3",)), Buffer("v", 4, "n_2", ("n_3",)),
                                     Buffer("y", 4, "n_3", (), is_output=True)))
    result = run_fusion("greedy", problem, max_rounds=1)
    kinds = {(e.a, e.b): e.kind for e in result.info.events if isinstance(e, Fused)}
    assert kinds == {(("n_0",), ("n_1",)): FusionKind.VERTICAL, (("n_2",), ("n_3",)): FusionKind.VERTICAL}
    second = run_fusion("greedy", problem, max_rounds=2)
    assert [e.kind for e in second.info.events if isinstance(e, Fused)][-1] is FusionKind.VERTICAL
    horizontal = FusionProblem(nodes=("n_0", "n_1"), buffers=(Buffer("x", 64, None, ("n_0", "n_1")),
                               Buffer("y_0", 4, "n_0", (), is_output=True), Buffer("y_1", 4, "n_1", (), is_output=True)))
    assert "fusing n_0 with n_1 (horizontal, shared data 64 bytes)" in fusion_log(horizontal, run_fusion("greedy", horizontal))
    assert "fusing n_0_n_1 with n_2_n_3 (vertical" in fusion_log(problem, second)


def chain(**limits) -> FusionProblem:
    """a -> b -> c with a -> c as well: fusing a with c alone would close a cycle through b."""
    return FusionProblem(nodes=("a", "b", "c"),
                         buffers=(Buffer("x", 8, None, ("a",)), Buffer("ta", 4, "a", ("b", "c")),
                                  Buffer("tb", 4, "b", ("c",)), Buffer("y", 2, "c", (), is_output=True)),
                         **limits)


@pytest.mark.parametrize("problem, params, rejection", [
    (chain(forbidden=(ForbiddenPair("a", "b", "incompatible"), ForbiddenPair("b", "c", "incompatible"))), {},
     ("a", "c", "would create a cycle (Proposition 7.1)")),
    (chain(forbidden=(ForbiddenPair("a", "b", "incompatible"),)), {}, ("a", "b", "forbidden: incompatible")),
    (chain(max_nodes=1), {}, ("a", "b", "too many nodes")),
    (chain(max_buffers=2), {}, ("a", "b", "too many buffers")),
    (chain(), {"min_shared_bytes": 5}, ("a", "b", "shared bytes below threshold")),
])
def test_every_rejection_is_named(problem, params, rejection):
    result = run_fusion("greedy", problem, **params)
    assert rejection in {(*e.a, *e.b, e.why()) for e in result.info.events if isinstance(e, NotFused)}
    assert tuple(rejection[:2]) not in result.partition
    assert f"cannot fuse {rejection[0]} with {rejection[1]}: {rejection[2]}" in fusion_log(problem, result, verbose=True)


def test_scores_compare_lexicographically_unless_sigmas_are_16x_apart():
    assert compare_scores((1, 100, 1, -5), (0, 1000, 3, 0)) > 0   # tau first
    assert compare_scores((1, 100, 1, -5), (0, 1700, 3, 0)) < 0   # 17x apart: sigma alone
    assert compare_scores((0, 10, 2, -1), (0, 10, 2, -3)) > 0     # nearer first
    assert compare_scores((1, 0, 0, 0), (0, 1, 1, 0)) < 0         # 0 against any positive sigma


def problems(max_nodes: int = 80):
    return st.builds(lambda family, n, seed: fusion_problem(FAMILIES[family](n, seed), seed),
                     st.sampled_from(sorted(FAMILIES)), st.integers(2, max_nodes), st.integers(0, 10**6))


@settings(max_examples=40, deadline=None)
@given(problems())
def test_greedy_is_valid_and_each_merge_saves_its_shared_bytes(problem):
    result = run_fusion("greedy", problem)  # validates (Definition 7.3 and the kernel limits)
    # A merge never raises Definition 7.3's cost, and saves at least sigma: every shared buffer
    # is read by one block fewer.  Hence greedy <= no fusion, and by at least the sum of sigmas.
    saved = sum(e.score[1] for e in result.info.events if isinstance(e, Fused))
    assert result.cost <= problem.unfused_cost() - saved
    assert run_fusion("greedy", problem).partition == result.partition
    assert run_fusion("none", problem).cost == problem.unfused_cost()


def kernel_peak(problem, partition) -> int:
    kernels = kernel_order_problem(problem, partition)
    return kernels.peak(original_order(kernels))


@settings(max_examples=10, deadline=None)
@given(problems(max_nodes=30))
def test_peak_guard_zero_never_raises_the_kernel_peak(problem):
    result = run_fusion("greedy", problem, max_peak_growth=0.0)
    assert kernel_peak(problem, result.partition) <= kernel_peak(problem, [(n,) for n in problem.nodes])


def picked_merges(groups: FusionGroups, picks):
    """For each pick (i, j): two current groups a and b, and the groups with them merged; the
    caller decides whether to merge them in ``groups``."""
    for i, j in picks:
        current = groups.groups()
        if len(current) < 2:
            return
        a = current[i % len(current)]
        b = [g for g in current if g != a][j % (len(current) - 1)]
        yield a, b, [g for g in current if g not in (a, b)] + [a + b]


@settings(max_examples=40, deadline=None)
@given(problems(max_nodes=40), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=40))
def test_ancestor_cycle_test_agrees_with_the_quotient_graph(problem, picks):
    groups, dag = FusionGroups(problem), problem.dag()
    for a, b, merged in picked_merges(groups, picks):
        cycle = not nx.is_directed_acyclic_graph(quotient_graph(dag, merged))
        assert groups.creates_cycle(a, b) == cycle
        if not cycle:
            groups.merge(a, b)


@settings(max_examples=40, deadline=None)
@given(problems(max_nodes=30), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=30))
def test_legality_of_a_merge_is_the_problems_validator(problem, picks):
    """Greedy's legality holds no preference: a merge is legal exactly when the partition it makes
    passes FusionProblem.validate (Definition 7.3), which every strategy's result must pass."""
    groups = FusionGroups(problem)
    for a, b, merged in picked_merges(groups, picks):
        try:
            problem.validate(merged)
            valid = True
        except InvalidScheduleError:
            valid = False
        assert (groups.why_illegal(a, b) is None) == valid
        if valid:
            groups.merge(a, b)


def test_greedy_parameters_are_recorded():
    assert GreedyFusion(min_shared_bytes=64).parameters == {"max_rounds": 10, "min_shared_bytes": 64,
                                                           "max_peak_growth": None, "window": 64}
