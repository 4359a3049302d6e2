"""Every exact strategy keeps its time limit: given 1 s on a graph it cannot solve in 1 s, it
returns its best answer, not proven, within 1.25 s; and every status is honest (a "feasible"
answer's value is at least its bound, an "optimal" one's equals it), checked against brute
force on small seeded graphs at tiny limits."""
import time

import pytest

from instances.dags import fusion_problem, layered_dag, order_problem, series_parallel_dag
from solvers.brute_force import min_fusion_cost, min_peak
from stax.scheduler.strategies import run_fusion, run_order

LIMIT, SLACK = 1.0, 1.25
FUSION = [("cpsat", {"workers": 1}), ("cpsat", {"workers": 1, "decompose": False}), ("mwc", {})]
ORDER = [("cpsat", {"workers": 1}), ("cpsat", {"workers": 1, "decompose": False}), ("dp", {})]


def assert_honest(status: str, value: int, bound: float | None) -> None:
    if status == "optimal":
        assert bound == value
    if bound is not None:
        assert bound <= value


def timed(run, strategy, problem, **params):
    began = time.perf_counter()
    result = run(strategy, problem, **params)
    return result, time.perf_counter() - began


@pytest.mark.parametrize("strategy,params", FUSION, ids=["cpsat", "cpsat-undecomposed", "mwc"])
def test_fusion_strategy_returns_at_its_limit(strategy, params):
    """An 80-node layered DAG of one piece: CP-SAT cannot build and prove its model in 1 s, nor
    mwc its relaxation.  (A first small call loads the modules, which the limit does not cover.)"""
    run_fusion(strategy, fusion_problem(layered_dag(4, 0), 0), time_limit=LIMIT, **params)
    p = fusion_problem(layered_dag(80, 1), 1, forbidden_fraction=0.2)
    result, seconds = timed(run_fusion, strategy, p, time_limit=LIMIT, **params)
    assert seconds <= SLACK * LIMIT, (strategy, params, seconds)
    assert result.status == "feasible" and result.info.note, (strategy, params, result.status)
    assert_honest(result.status, result.cost, result.bound)
    assert result.cost <= p.unfused_cost()


@pytest.mark.parametrize("strategy,params", ORDER, ids=["cpsat", "cpsat-undecomposed", "dp"])
def test_order_strategy_returns_at_its_limit(strategy, params):
    """The order problem of an 80-task layered DAG: too wide for the down-set programme, too
    large for CP-SAT to prove in 1 s."""
    run_order(strategy, order_problem(layered_dag(4, 0), 0), time_limit=LIMIT, **params)
    p = order_problem(layered_dag(80, 1), 1)
    result, seconds = timed(run_order, strategy, p, time_limit=LIMIT, **params)
    assert seconds <= SLACK * LIMIT, (strategy, params, seconds)
    assert result.status == "feasible" and result.info.note, (strategy, params, result.status)
    assert_honest(result.status, result.peak, result.bound)


def small_graphs(count: int):
    for seed in range(count):
        yield seed, (layered_dag if seed % 2 else series_parallel_dag)(4 + seed % 5, seed)


@pytest.mark.parametrize("limit", [0.02, 5.0])
def test_statuses_are_honest_against_brute_force(limit):
    """At any limit: bound <= optimum <= value, and "optimal" only when value == bound == optimum."""
    for seed, g in small_graphs(24):
        fusion, order = fusion_problem(g, seed, forbidden_fraction=0.15), order_problem(g, seed)
        for problem, optimum, run, strategies in ((fusion, min_fusion_cost(fusion)[0], run_fusion, FUSION),
                                                  (order, min_peak(order)[0], run_order, ORDER)):
            for strategy, params in strategies:
                r = run(strategy, problem, time_limit=limit, **params)
                value = r.cost if run is run_fusion else r.peak
                assert (r.bound or 0) <= optimum <= value, (problem.name, strategy, params)
                assert r.status != "optimal" or value == optimum, (problem.name, strategy, params)
                assert_honest(r.status, value, r.bound)
