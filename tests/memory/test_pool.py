"""Memory pool planning (spec 7.5): no two buffers live together share an address; size >= M*."""
import doctest

from hypothesis import given, settings
from hypothesis import strategies as st

import stax.memory.pool
from instances.dags import layered_dag, order_problem, series_parallel_dag
from stax.memory.pool import address_conflicts, max_live_bytes, plan_order_pool, plan_pool
from stax.scheduler.strategies import run_order


def test_doctests():
    assert doctest.testmod(stax.memory.pool).failed == 0


def check(sizes, lifetimes):
    plan = plan_pool(sizes, lifetimes)
    assert set(plan.offsets) == set(sizes)
    assert all(0 <= plan.offsets[n] and plan.offsets[n] + sizes[n] <= plan.size for n in sizes)
    assert address_conflicts(sizes, lifetimes, plan.offsets) == []
    assert plan.size >= plan.lower_bound == max_live_bytes(sizes, lifetimes)
    return plan


buffers = st.lists(st.tuples(st.integers(0, 64), st.integers(0, 30), st.integers(0, 10)), max_size=40)


@settings(max_examples=100, deadline=None)
@given(buffers)
def test_random_lifetimes_get_a_conflict_free_pool_no_smaller_than_m_star(specs):
    sizes = {f"b{i}": size for i, (size, _, _) in enumerate(specs)}
    lifetimes = {f"b{i}": (start, start + length) for i, (_, start, length) in enumerate(specs)}
    check(sizes, lifetimes)


def test_disjoint_lifetimes_share_one_address():
    plan = check({"a": 8, "b": 4, "c": 8}, {"a": (0, 1), "b": (2, 2), "c": (3, 5)})
    assert set(plan.offsets.values()) == {0} and plan.size == 8


def test_pool_on_random_kernel_orders_reports_its_gap_to_m_star():
    rows = []
    for seed in range(6):
        for family in (layered_dag, series_parallel_dag):
            problem = order_problem(family(60, seed), seed)
            order = run_order("best", problem).order
            plan = plan_order_pool(problem, order)
            check({b.name: b.size for b in problem.buffers}, problem.lifetimes(order))
            assert plan.lower_bound == problem.peak(order)
            rows.append(plan.size / plan.lower_bound)
    print(f"pool size / M* over {len(rows)} instances: mean {sum(rows) / len(rows):.3f}, max {max(rows):.3f}")
