"""Kernel orders of spec 7.5: every heuristic is topological and deterministic; best <= original."""
import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from instances.dags import layered_dag, order_problem, series_parallel_dag
from stax.scheduler.orders import breadth_first, depth_first, least_peak_memory_first, original_order
from stax.scheduler.problems import Buffer, OrderProblem
from stax.scheduler.strategies import run_order

STRATEGIES = ("original", "lpmf", "bfs", "dfs", "best")
FAMILIES = {"layered": layered_dag, "series-parallel": series_parallel_dag}


def with_extra_edges(problem: OrderProblem, seed: int, count: int) -> OrderProblem:
    """Add ordering-only edges that follow the task numbering (which is topological)."""
    rng = random.Random(seed)
    tasks = problem.tasks
    pairs = [tuple(sorted(rng.sample(range(len(tasks)), 2))) for _ in range(count)]
    return dataclasses.replace(problem, extra_edges=tuple((tasks[i], tasks[j]) for i, j in pairs))


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(20, 200), st.integers(0, 10**6), st.integers(0, 30))
def test_every_order_is_topological_deterministic_and_best_is_no_worse(family, n, seed, extra):
    problem = with_extra_edges(order_problem(FAMILIES[family](n, seed), seed), seed, extra)
    results = {name: run_order(name, problem) for name in STRATEGIES}  # run_order validates
    for name in STRATEGIES:
        assert run_order(name, problem).order == results[name].order
    best = results["best"]
    assert best.info.candidates == {name: results[name].peak for name in STRATEGIES[:-1]}
    assert best.peak == min(best.info.candidates.values()) <= results["original"].peak
    assert results["original"].order == problem.tasks


def fork() -> OrderProblem:
    """r feeds two branches a -> a2 and b -> b2, each with one big intermediate."""
    return OrderProblem(tasks=("r", "a", "b", "a2", "b2"), buffers=(
        Buffer("x", 1, "r", ("a", "b")), Buffer("A", 100, "a", ("a2",)), Buffer("B", 100, "b", ("b2",)),
        Buffer("ya", 1, "a2", (), is_output=True), Buffer("yb", 1, "b2", (), is_output=True)))


def test_lpmf_finishes_a_branch_before_starting_the_next():
    problem = fork()
    assert problem.peak(problem.tasks) == 1 + 100 + 100
    assert least_peak_memory_first(problem) == ("r", "a", "a2", "b", "b2")
    best = run_order("best", problem)
    assert best.peak == 102 and best.info.chosen != "original"


def test_bfs_and_dfs_on_small_graphs():
    two_chains = OrderProblem(tasks=("a", "b", "c", "d"), buffers=(
        Buffer("ta", 1, "a", ("d",)), Buffer("tb", 1, "b", ("c",))))
    assert breadth_first(two_chains) == ("a", "b", "d", "c")  # d's input ran first
    join = OrderProblem(tasks=("big", "small", "c"), buffers=(
        Buffer("t1", 100, "big", ("c",)), Buffer("t2", 1, "small", ("c",))))
    assert depth_first(join) == ("small", "big", "c")  # lighter input first


def test_best_keeps_the_original_on_ties():
    chain = OrderProblem(tasks=("a", "b"), buffers=(Buffer("t", 4, "a", ("b",)),))
    assert run_order("best", chain).info.chosen == "original"


def test_original_order_repairs_a_non_topological_listing():
    problem = OrderProblem(tasks=("b", "a", "c"), buffers=(Buffer("t", 1, "a", ("b",)),))
    assert original_order(problem) == ("a", "b", "c")
