"""Optimal memory pool for a fixed order: dynamic storage allocation as CP-SAT (section 7.5).

Each buffer is a rectangle: its lifetime ``[start, last]`` of Definition 7.5 on the time axis
(fixed once the order is), ``[offset, offset + size)`` on the address axis (to choose).  A
``NoOverlap2D`` constraint keeps rectangles disjoint, so buffers live at a common step never
share an address; the pool size ``>= offset + size`` of every buffer is minimized.  The greedy
pool of ``stax.memory.pool`` (time and space splits) gives the hint and the upper bound, and M*
(the most bytes live at one step) the lower bound.

Example::

    >>> plan = solve_pool({"a": 4, "b": 4, "c": 2}, {"a": (0, 1), "b": (2, 3), "c": (1, 2)}, workers=1)
    >>> plan.size, plan.status
    (6, 'optimal')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ortools.sat.python import cp_model

from stax.memory.pool import Lifetimes, max_live_bytes, plan_pool
from stax.scheduler.problems import OrderProblem

from solvers.cpsat import SolverParams, run


@dataclass(frozen=True)
class PoolSolution:
    """Offsets of every buffer in one pool, the pool size, and how it was obtained.

    ``status`` is "optimal" when proven, "feasible" when time ran out (``bound`` is then the best
    lower bound), "heuristic" when CP-SAT found nothing in time and the greedy pool is returned.
    """

    offsets: dict[str, int]
    size: int
    status: str
    bound: float | None
    seconds: float


def solve_pool(sizes: Mapping[str, int], lifetimes: Lifetimes, time_limit: float = 10.0,
               workers: int = 2, seed: int = 0) -> PoolSolution:
    """The smallest pool with a fixed offset per buffer; lifetimes are inclusive step intervals."""
    greedy = plan_pool(sizes, lifetimes)
    model = cp_model.CpModel()
    pool = model.new_int_var(max_live_bytes(sizes, lifetimes), greedy.size, "pool")
    offset, times, spaces = {}, [], []
    for name, size in sizes.items():
        if size == 0:
            continue
        start, last = lifetimes[name]
        offset[name] = model.new_int_var(0, greedy.size - size, f"offset_{name}")
        model.add(offset[name] + size <= pool)
        model.add_hint(offset[name], greedy.offsets[name])
        times.append(model.new_fixed_size_interval_var(start, last - start + 1, f"life_{name}"))
        spaces.append(model.new_fixed_size_interval_var(offset[name], size, f"addr_{name}"))
    model.add_no_overlap_2d(times, spaces)
    model.minimize(pool)
    solved = run(model, SolverParams(time_limit, workers, seed))
    if not solved.has_solution:
        return PoolSolution(greedy.offsets, greedy.size, "heuristic", solved.bound_for(greedy.size), solved.seconds)
    offsets = {name: solved.solver.value(offset[name]) if name in offset else 0 for name in sizes}
    size = max((offsets[n] + s for n, s in sizes.items()), default=0)
    return PoolSolution(offsets, size, solved.status, solved.bound_for(size), solved.seconds)


def solve_order_pool(problem: OrderProblem, order: Sequence[str], **params: float) -> PoolSolution:
    """The optimal pool of an order's buffers, with lifetimes from Definition 7.5."""
    return solve_pool({b.name: b.size for b in problem.buffers}, problem.lifetimes(order), **params)
