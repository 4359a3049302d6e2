"""Exact solvers against brute force on small seeded instances (Definitions 7.3 and 7.5, section 7.5 pool)."""
import dataclasses
import doctest
import random

import pytest

import solvers.order.pool_cpsat
from instances.dags import fusion_problem, layered_dag, order_problem, series_parallel_dag
from solvers.brute_force import min_fusion_cost, min_peak, min_pool_size
from solvers.fusion.cpsat import CpSatFusion
from solvers.order.cpsat import CpSatOrder
from solvers.order.dp import DownSetOrder
from solvers.order.pool_cpsat import solve_order_pool, solve_pool
from stax.errors import StaxError
from stax.memory.pool import address_conflicts, max_live_bytes, plan_pool
from stax.scheduler.strategies import run_fusion, run_order

FAMILIES = {"layered": layered_dag, "sp": series_parallel_dag}


def small_dags(count: int, low: int = 3, high: int = 9):
    """``count`` seeded DAGs alternating between the families, with low..high nodes."""
    for seed in range(count):
        family = "layered" if seed % 2 else "sp"
        yield seed, FAMILIES[family](low + seed % (high - low + 1), seed)


def test_doctests():
    assert doctest.testmod(solvers.order.pool_cpsat).failed == 0


@pytest.mark.parametrize("forbidden_fraction", [0.0, 0.15, 0.4])
def test_fusion_cpsat_matches_brute_force(forbidden_fraction):
    for seed, g in small_dags(50):
        p = fusion_problem(g, seed, forbidden_fraction=forbidden_fraction)
        result = run_fusion("cpsat", p, workers=1)
        assert result.status == "optimal" and result.bound == result.cost, p.name
        assert result.cost == min_fusion_cost(p)[0], p.name
        assert p.validate(result.partition) == result.partition


def test_fusion_cpsat_respects_kernel_limits():
    for seed, g in small_dags(40, low=4):
        p = dataclasses.replace(fusion_problem(g, seed), max_nodes=2 + seed % 3, max_buffers=3 + seed % 3)
        result = CpSatFusion(workers=1).solve(p)
        assert result.status == "optimal"
        assert p.validate(result.partition) and result.cost == min_fusion_cost(p)[0], p.name


def test_fusion_cpsat_no_worse_than_its_greedy_warm_start():
    for seed, g in small_dags(20, low=6):
        p = fusion_problem(g, seed)
        result = CpSatFusion(workers=1).solve(p)
        assert result.info.stats["warm_start"]
        assert result.cost <= run_fusion("greedy", p).cost <= p.unfused_cost()


def test_order_cpsat_equals_dp_equals_brute_force():
    for seed, g in small_dags(160, high=10):
        p = order_problem(g, seed)
        exact = run_order("cpsat", p, workers=1)
        dp = run_order("dp", p)
        assert exact.status == dp.status == "optimal"
        assert exact.peak == exact.bound == dp.peak == dp.bound, p.name
        if len(p.tasks) <= 8:
            assert dp.peak == min_peak(p)[0], p.name


def test_order_solvers_with_extra_edges_and_childless_buffers():
    for seed, g in small_dags(40, low=4, high=8):
        p = order_problem(g, seed)
        rng = random.Random(seed)
        # a dead buffer (no users, not an output) and an ordering-only edge between the first and last task
        dead = dataclasses.replace(p.buffers[0], name="dead", users=(), is_output=False, size=rng.randint(1, 99))
        p = dataclasses.replace(p, buffers=p.buffers + (dead,), extra_edges=((p.tasks[0], p.tasks[-1]),))
        best = min_peak(p)[0]
        assert CpSatOrder(workers=1).solve(p).peak == DownSetOrder().solve(p).peak == best, p.name


def test_pool_cpsat_is_valid_and_optimal_on_tiny_pools():
    beats_greedy = 0
    for seed in range(120):
        rng = random.Random(seed)
        sizes = {f"b{i}": rng.randint(0, 9) for i in range(3 + seed % 5)}
        starts = {n: rng.randrange(6) for n in sizes}
        lifetimes = {n: (s, s + rng.randrange(4)) for n, s in starts.items()}
        plan = solve_pool(sizes, lifetimes, workers=1)
        assert not address_conflicts(sizes, lifetimes, plan.offsets)
        assert plan.status == "optimal" and plan.size == plan.bound == min_pool_size(sizes, lifetimes)
        assert plan.size >= max_live_bytes(sizes, lifetimes)
        beats_greedy += plan.size < plan_pool(sizes, lifetimes).size
    assert beats_greedy > 0  # the instances are not all trivial for the greedy pool


def test_pool_of_an_optimal_order():
    for seed, g in small_dags(30, low=5, high=12):
        p = order_problem(g, seed)
        order = run_order("dp", p).order
        plan = solve_order_pool(p, order, workers=1)
        sizes = {b.name: b.size for b in p.buffers}
        assert not address_conflicts(sizes, p.lifetimes(order), plan.offsets)
        assert plan.size >= p.peak(order) and plan.bound <= plan.size


def test_time_limit_reports_status_honestly():
    g = layered_dag(40, seed=7)
    fusion = run_fusion("cpsat", fusion_problem(g, 7, forbidden_fraction=0.05), time_limit=0.5, workers=1)
    order = run_order("cpsat", order_problem(g, 7), time_limit=0.5, workers=1)
    for result, value in ((fusion, fusion.cost), (order, order.peak)):
        assert result.status in ("optimal", "feasible", "heuristic")
        assert result.bound is not None and result.bound <= value
        if result.status == "optimal":
            assert result.bound == value
    if fusion.status != "optimal":
        assert fusion.gap > 0


def test_guards_refuse_with_clear_errors():
    wide = order_problem(layered_dag(40, seed=1, layers=2), 1)
    with pytest.raises(StaxError, match="down-sets.*max_states.*cpsat"):
        DownSetOrder(max_states=1000).solve(wide)
    with pytest.raises(StaxError, match="refuses 10.*fusion.cpsat"):
        min_fusion_cost(fusion_problem(layered_dag(10, 0), 0))
    with pytest.raises(StaxError, match="refuses 11.*order.dp"):
        min_peak(order_problem(layered_dag(11, 0), 0))
