"""Every bound a solver reports is at most the optimum (brute force), also with sizes of 2^40 bytes
and more, where CP-SAT's double-precision bound is off by more than a unit; a proven optimum's
bound equals its value."""
import dataclasses
import random

import pytest

from instances.dags import fusion_problem, layered_dag, order_problem, series_parallel_dag
from solvers.brute_force import min_fusion_cost, min_peak
from solvers.fusion.bounds import compulsory_traffic
from stax.scheduler.problems import Buffer, FusionProblem, kernel_order_problem, task_names
from stax.scheduler.strategies import run_fusion, run_order

HUGE = (2 ** 40 + 8, 2 ** 41 + 3, 2 ** 50 + 1, 2 ** 40, 3 * 2 ** 44 + 5)


def huge_sizes(problem, seed: int):
    """``problem`` with each buffer resized to a huge size or a small one (seeded)."""
    rng = random.Random(seed)
    buffers = tuple(dataclasses.replace(b, size=rng.choice(HUGE) if rng.random() < 0.6 else rng.randint(1, 20))
                    for b in problem.buffers)
    return dataclasses.replace(problem, buffers=buffers)


def shapes(count: int):
    """Diamonds, fan-outs, chains with skip edges and random small DAGs, alternating (seeded)."""
    import networkx as nx
    for seed in range(count):
        kind = seed % 4
        if kind == 0:
            g = nx.DiGraph([("n0", "n1"), ("n0", "n2"), ("n1", "n3"), ("n2", "n3")])
        elif kind == 1:
            g = nx.DiGraph([("n0", f"n{i}") for i in range(1, 3 + seed % 4)])
        elif kind == 2:
            n = 4 + seed % 4
            g = nx.DiGraph([(f"n{i}", f"n{i + 1}") for i in range(n - 1)] + [("n0", f"n{n - 1}"), ("n1", f"n{n - 2}")])
        else:
            g = (layered_dag if seed % 8 == 3 else series_parallel_dag)(4 + seed % 5, seed)
        yield seed, g


@pytest.mark.parametrize("time_limit", [10.0, 0.01])
def test_fusion_bounds_at_most_the_optimum_with_huge_sizes(time_limit):
    for seed, g in shapes(80):
        p = huge_sizes(fusion_problem(g, seed, forbidden_fraction=0.2), seed)
        optimum = min_fusion_cost(p)[0]
        for name, params in (("cpsat", {"time_limit": time_limit, "workers": 1}), ("mwc", {})):
            r = run_fusion(name, p, **params)
            assert r.bound is None or r.bound <= optimum <= r.cost, (p.name, name, r.bound, optimum)
            if r.status == "optimal":
                assert r.bound == r.cost == optimum, (p.name, name)


def test_order_bounds_at_most_the_optimum_with_huge_sizes():
    for seed, g in shapes(80):
        p = huge_sizes(order_problem(g, seed), seed)
        optimum = min_peak(p)[0]
        for name, params in (("cpsat", {"workers": 1}), ("cpsat", {"workers": 1, "time_limit": 0.01}), ("dp", {})):
            r = run_order(name, p, **params)
            assert r.bound is not None and r.bound <= optimum <= r.peak, (p.name, name)
            if r.status == "optimal":
                assert r.bound == r.peak == optimum, (p.name, name)


def test_fusion_bound_of_the_reported_diamond():
    """A diamond whose double-precision bound was 1099511627802 over a proven optimum one lower."""
    p = FusionProblem(nodes=("a", "b", "c", "d"), buffers=(
        Buffer("x", 17, None, ("a",)), Buffer("t", 2 ** 50 + 1, "a", ("b", "c")), Buffer("u", 2 ** 41 + 3, "b", ("d",)),
        Buffer("v", 2 ** 50 + 1, "c", ("d",)), Buffer("y", 2 ** 40 + 8, "d", (), True)))
    optimum = min_fusion_cost(p)[0]
    assert optimum == 2 ** 40 + 8 + 17
    for seed in range(3):
        r = run_fusion("cpsat", p, workers=1, seed=seed)
        assert r.status == "optimal" and r.bound == r.cost == optimum


def test_compulsory_traffic_is_at_most_the_optimum():
    tight = 0
    for seed, g in shapes(60):
        p = fusion_problem(g, seed, forbidden_fraction=0.1 + 0.3 * (seed % 3))
        for problem in (p, huge_sizes(p, seed)):
            optimum = min_fusion_cost(problem)[0]
            assert compulsory_traffic(problem) <= optimum, problem.name
            tight += compulsory_traffic(problem) == optimum
    assert tight > 0


def test_task_names_never_collide():
    p = FusionProblem(nodes=("a", "b", "a_b"), buffers=(
        Buffer("t", 4, "a", ("b",)), Buffer("u", 4, "b", ("a_b",)), Buffer("y", 4, "a_b", (), True)))
    order = kernel_order_problem(p, [("a", "b"), ("a_b",)])
    assert len(set(order.tasks)) == 2 and "a_b" in order.tasks
    assert task_names([("a",), ("b", "c")]) == ["a", "b_c"]
    assert len(set(task_names([("x", "y"), ("x_y",), ("x_y#2",), ("p", "q")]))) == 4
