"""Greedy fusion (Algorithm 7.1), its window, its cycle test (Proposition 7.1) and the no-fusion baseline."""
from functools import cmp_to_key

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.studies.solver_scaling import greedy_row
from instances.dags import fusion_problem, layered_dag, local_dag, series_parallel_dag
from instances.programs import PROGRAMS
from instances.store import load
from stax.measure import demo as stax_examples
from stax.compiler import fusion_problem_of
from stax.errors import InvalidScheduleError, StaxError
from stax.frontend.tracing import trace
from stax.scheduler.orders import original_order
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, kernel_order_problem, quotient_graph
from stax.scheduler import greedy as greedy_module
from stax.scheduler.greedy import WINDOW, FusionGroups, GreedyFusion, best_first, compare_scores, score
from stax.scheduler.events import Fused, FusionKind, NotFused, Round, WhyNoFuse
from stax.scheduler.fusion_log import fusion_log
from stax.scheduler.strategies import run_fusion

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
@given(problems(max_nodes=40), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=40),
       st.sampled_from([None, 1, 3]))
def test_ancestor_cycle_test_agrees_with_the_quotient_graph(problem, picks, window):
    """The search between two groups and, with a window, the bits sharing_pairs records (within
    the window; the search beyond it), against networkx on the quotient graph."""
    groups, dag = FusionGroups(problem), problem.dag()
    for a, b, merged in picked_merges(groups, picks):
        if window is not None:
            list(groups.sharing_pairs(window))
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


# --- the window (TorchInductor's max_fusion_buffer_group_pairwise_attempts) --------------------

scores = st.tuples(st.integers(0, 1), st.sampled_from([0, 1, 2, 15, 16, 17, 100, 255, 256, 257, 4096]),
                   st.integers(0, 3), st.integers(-5, 0))


@settings(max_examples=300, deadline=None)
@given(scores, scores, scores)
def test_compare_scores_is_a_strict_total_order(s, t, u):
    """What best_first relies on: asymmetric, transitive, and 0 only between equal scores."""
    assert compare_scores(s, t) == -compare_scores(t, s)
    assert (compare_scores(s, t) == 0) == (s == t)
    if compare_scores(s, t) > 0 and compare_scores(t, u) > 0:
        assert compare_scores(s, u) > 0


@settings(max_examples=100, deadline=None)
@given(st.lists(scores, max_size=60))
def test_best_first_is_the_stable_sort_by_compare_scores(drawn):
    candidates = [(s, (f"a{i}",), (f"b{i}",)) for i, s in enumerate(drawn)]
    assert best_first(candidates) == sorted(candidates, key=lambda c: cmp_to_key(compare_scores)(c[0]), reverse=True)


@settings(max_examples=30, deadline=None)
@given(problems(max_nodes=60))
def test_a_window_covering_the_graph_is_the_unbounded_greedy(problem):
    covering = run_fusion("greedy", problem, window=len(problem.nodes))
    unbounded = run_fusion("greedy", problem, window=None)
    assert covering.partition == unbounded.partition and covering.info.events == unbounded.info.events
    huge = run_fusion("greedy", problem, window=10**18)  # wider than BITS_WINDOW_MAX: searches, records no bits
    assert huge.partition == unbounded.partition and huge.info.events == unbounded.info.events
    run_fusion("greedy", problem, window=2)  # any window's partition passes the validator


def reference_greedy(problem: FusionProblem) -> tuple[tuple[str, ...], ...]:
    """Algorithm 7.1 as the spec writes it: every pair of blocks sharing a buffer, legality by the
    problem's validator (Definition 7.3), spec 7.3's score, ten rounds.  The oracle."""
    position = {n: i for i, n in enumerate(problem.nodes)}
    reduction = {n for n in problem.nodes if problem.node_info.get(n, {}).get("kind") == "reduction"}

    def touched(block):
        return set().union(*(problem.buffers_of(n) for n in block))

    def legal(blocks, a, b):
        try:
            problem.validate([g for g in blocks if g not in (a, b)] + [a + b])
            return True
        except InvalidScheduleError:
            return False

    def seed_score(a, b):
        shared = touched(a) & touched(b)
        tau = int(bool(set(a) & reduction) == bool(set(b) & reduction))
        delta = max(abs(position[a[0]] - position[b[-1]]), abs(position[b[0]] - position[a[-1]]))
        return tau, sum(buf.size for buf in problem.buffers if buf.name in shared), len(shared), -delta

    blocks = [(n,) for n in problem.nodes]
    for _ in range(10):
        pairs = [(a, b) for i, a in enumerate(blocks) for b in blocks[i + 1:] if touched(a) & touched(b)]
        ranked = sorted(((seed_score(a, b), a, b) for a, b in pairs if legal(blocks, a, b)),
                        key=lambda c: cmp_to_key(compare_scores)(c[0]), reverse=True)
        merged = set()
        for _, a, b in ranked:
            if not merged & {a, b} and legal(blocks, a, b):
                blocks = sorted([g for g in blocks if g not in (a, b)] + [tuple(sorted(a + b, key=position.get))],
                                key=lambda g: position[g[0]])
                merged |= {a, b}
        if not merged:
            break
    return tuple(blocks)


@settings(max_examples=25, deadline=None)
@given(problems(max_nodes=18))
def test_unbounded_greedy_is_algorithm_7_1_as_written(problem):
    assert run_fusion("greedy", problem, window=None).partition == reference_greedy(problem)


def test_round_one_examines_exactly_the_sharing_pairs_within_the_window():
    """A chain whose nodes all read one input: node i pairs with the next ``window`` nodes only."""
    n, window = 40, 5
    nodes = tuple(f"v{i}" for i in range(n))
    problem = FusionProblem(nodes=nodes, buffers=(Buffer("x", 8, None, nodes),) + tuple(
        Buffer(f"t{i}", 4, nodes[i], nodes[i + 1:i + 2], is_output=i == n - 1) for i in range(n)), max_buffers=4)
    events = run_fusion("greedy", problem, window=window).info.events
    first_round = next(i for i, e in enumerate(events) if isinstance(e, Round))
    examined = [(e.a, e.b) for e in events[:first_round]] + [(e.a, e.b) for e in events[first_round + 1:]
                                                             if isinstance(e, Fused) and len(e.a) == len(e.b) == 1]
    assert all(int(b[0][1:]) - int(a[0][1:]) <= window for a, b in examined)
    rejected, candidates = first_round, events[first_round].candidates
    assert rejected + candidates == sum(min(window, n - 1 - i) for i in range(n))


@pytest.mark.parametrize("window", [0, -1, 2.5, True, "64"])
def test_a_bad_window_is_one_line_naming_it(window):
    with pytest.raises(StaxError, match=r"greedy window=.*whole number >= 1"):
        run_fusion("greedy", example_7_1(), window=window)


def test_merging_across_a_path_through_a_third_group_is_refused():
    groups = FusionGroups(chain(forbidden=(ForbiddenPair("a", "b", "incompatible"),)))
    with pytest.raises(ValueError, match="closes a cycle"):
        groups.merge(("a",), ("c",))


@settings(max_examples=40, deadline=None)
@given(problems(max_nodes=40), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=40))
def test_merges_keep_the_groups_in_a_topological_order_of_the_quotient(problem, picks):
    """Pearce and Kelly's repair: after any legal merges, the kept order is topological for D / P."""
    groups, dag = FusionGroups(problem), problem.dag()
    for a, b, _ in picked_merges(groups, picks):
        if not groups.creates_cycle(a, b):
            groups.merge(a, b)
        current = groups.groups()
        rank = {g: groups._rank[groups.pair_key(g, g)[0]] for g in current}
        quotient = quotient_graph(dag, current)
        assert all(rank[current[u]] < rank[current[v]] for u, v in quotient.edges)


def suite_problems():
    for name in sorted(PROGRAMS):
        program = PROGRAMS[name]
        yield name, fusion_problem_of(trace(program.fn, *program.inputs(16, seed=0)))
    for example in (stax_examples.example_7_1, stax_examples.example_7_2):
        yield example.__name__, fusion_problem_of(trace(example, np.zeros((64, 128), np.float32)))


@pytest.mark.parametrize("name, problem", list(suite_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_window_keeps_the_suites_and_the_seeds_partitions(name, problem):
    assert run_fusion("greedy", problem).partition == run_fusion("greedy", problem, window=None).partition


@pytest.mark.parametrize("name", ["data/models/bert-12-forward.fusion", "data/models/resnet-8-train.fusion"])
def test_the_window_keeps_whole_model_partitions(name):
    """Graphs of 276 and 195 nodes, wider than the window, whose partitions it leaves as they were."""
    problem = load(name).fusion
    assert len(problem.nodes) > WINDOW
    assert run_fusion("greedy", problem).partition == run_fusion("greedy", problem, window=None).partition


def test_a_two_thousand_node_local_graph_is_the_unbounded_greedy():
    """A seeded sample of experiments.studies.solver_scaling's wider family (its timings are there)."""
    problem = fusion_problem(local_dag(2000, 3), 3, forbidden_span=16)
    windowed = run_fusion("greedy", problem)
    assert len(windowed.partition) < len(problem.nodes) / 4
    assert windowed.partition == run_fusion("greedy", problem, window=None).partition


def test_rejections_beyond_the_cap_are_counted_not_kept(monkeypatch):
    problem = fusion_problem(layered_dag(40, 2), 2)
    full = run_fusion("greedy", problem)
    rejections = sum(isinstance(e, NotFused) for e in full.info.events)
    monkeypatch.setattr(greedy_module, "MAX_LOGGED_REJECTIONS", 5)
    capped = run_fusion("greedy", problem)
    assert capped.partition == full.partition and rejections > 5
    assert sum(isinstance(e, NotFused) for e in capped.info.events) == 5
    assert capped.info.stats == {"rejections_not_logged": rejections - 5}
    assert [e for e in capped.info.events if not isinstance(e, NotFused)] == \
        [e for e in full.info.events if not isinstance(e, NotFused)]


@settings(max_examples=30, deadline=None)
@given(problems(max_nodes=30), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=12),
       st.integers(1, 6))
def test_the_recorded_bits_answer_every_pair_within_the_window(problem, picks, window):
    groups, dag = FusionGroups(problem), problem.dag()
    for a, b, _ in picked_merges(groups, picks):
        if not groups.creates_cycle(a, b):
            groups.merge(a, b)
    list(groups.sharing_pairs(window))
    current = groups.groups()
    for i, a in enumerate(current):
        for b in current[i + 1:]:
            merged = [g for g in current if g not in (a, b)] + [a + b]
            assert groups.creates_cycle(a, b) == (not nx.is_directed_acyclic_graph(quotient_graph(dag, merged)))


@pytest.mark.parametrize("family, same", [("local", True), ("chain+shared", None)])
def test_the_scaling_rows_report_each_family(family, same):
    """experiments.studies.solver_scaling's greedy row on a small size (its figures come from the script)."""
    row = greedy_row(family, 300)
    assert row["nodes"] == 300 and 0 < row["kernels"] < 300 and row["= unbounded"] is same
    assert row["buffers"] == 301 + (family == "chain+shared") and row["peak RSS MB"] > 0
