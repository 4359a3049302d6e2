"""Exact ordering (Definition 7.5) by the down-set programme (``downsets.least_peak``) on series segments.

The best heuristic order is the incumbent; when its peak equals a certified lower bound
(``decompose.live_set_lower_bound``) the search is skipped altogether.

``DownSetOrder`` first improves the best heuristic order window by window (``window``)
and bounds the peak from below by minimum cuts (``cut_bound``); when the two meet, the
order is proven.  Otherwise it splits the problem into series segments (``decompose``,
whose docstring proves the composition) and runs the programme on each segment that can set
the peak (``bounded_order``).  It refuses, with ``StaxError``, when a layer of some segment would exceed
``max_states`` (or the optional ``time_limit`` runs out): the number of down-sets grows
exponentially with the width of the DAG.  ``bounded_order`` returns the best order found with a
certified bound instead of refusing, and can hand such segments to CP-SAT.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from stax.errors import StaxError
from stax.scheduler.problems import OrderProblem
from stax.scheduler.strategies import OrderInfo, OrderResult, Status, run_order

from solvers.cpsat import SolverParams, run
from solvers.deadlines import search_deadline
from solvers.order.cut_bound import cut_lower_bound
from solvers.order.decompose import join, live_set_lower_bound, segment_problem, segments
from solvers.order.downsets import SearchStopped, least_peak
from solvers.order.model import OrderModel
from solvers.order.window import improve


@dataclass(frozen=True)
class SegmentAnswer:
    """One segment: the best order found, its peak, a certified lower bound, and the work done."""

    order: tuple[str, ...]
    peak: int
    bound: int
    down_sets: int = 0
    note: str = ""

    @property
    def optimal(self) -> bool:
        return self.bound == self.peak


def solve_segment(problem: OrderProblem, incumbent: tuple[str, ...], max_states: int,
                  deadline: float | None, cpsat_workers: int = 0) -> SegmentAnswer:
    """One segment: the better of ``incumbent`` and the best heuristic order, then proven or
    improved by ``least_peak`` when the live-set bound does not already prove it.  With
    ``cpsat_workers``, a segment the programme stops on (at ``max_states``) goes to CP-SAT
    (hinted with the incumbent) for what remains of the time: the programme runs as it does
    without, so CP-SAT's help never makes the answer worse."""
    heuristic = run_order("best", problem).order
    if problem.peak(heuristic) < problem.peak(incumbent):
        incumbent = heuristic
    peak, bound = problem.peak(incumbent), live_set_lower_bound(problem)
    if peak == bound:
        return SegmentAnswer(incumbent, peak, bound, 0, "heuristic order meets the live-set bound")
    try:
        order, states = least_peak(problem, incumbent, max_states, deadline)
    except SearchStopped as stop:
        if not cpsat_workers or deadline is None or time.perf_counter() >= deadline:
            return SegmentAnswer(incumbent, peak, bound, 0, str(stop))
        return cpsat_segment(problem, incumbent, bound, deadline - time.perf_counter(), cpsat_workers)
    best = problem.peak(order)
    return SegmentAnswer(order, best, best, states)


def cpsat_segment(problem: OrderProblem, incumbent: tuple[str, ...], bound: int, seconds: float,
                  workers: int) -> SegmentAnswer:
    """CP-SAT's order model (``model.OrderModel``) on a segment, hinted with ``incumbent``
    and told the certified ``bound`` (no order peaks lower): its order when better, and the
    larger of its bound and ``bound``."""
    model = OrderModel(problem)
    model.model.add(model.peak >= bound)
    model.hint(incumbent)
    solved = run(model.model, SolverParams(seconds, workers, 0))
    order, lower = incumbent, solved.bound or 0
    if solved.has_solution:
        found = model.decode(solved.solver)
        order = min(incumbent, found, key=problem.peak)
        if solved.status == "optimal":  # CP-SAT proved its order's peak the least
            lower = problem.peak(found)
    peak = problem.peak(order)
    bound = int(max(bound, min(lower, peak)))
    return SegmentAnswer(order, peak, bound, 0, "" if bound == peak else f"CP-SAT {solved.status} in {seconds:.1f} s")


#: the part of the time limit the window improvements of the first incumbent may use
IMPROVE_SHARE = 0.5


def bounded_order(problem: OrderProblem, max_states: int = 200_000, time_limit: float | None = 60.0,
                  cpsat_workers: int = 0) -> OrderResult:
    """The least-peak order ("optimal"), or the best order found ("feasible") with a certified
    lower bound ``bound``; never raises for size.  ``cpsat_workers`` > 0 lets CP-SAT finish the
    segments the down-set programme cannot (``solve_segment``).

    The best heuristic order, improved window by window (``window``, for at most
    ``IMPROVE_SHARE`` of the time limit), is the incumbent;
    the first lower bound L is the larger of the live-set bound and the cut bounds at the
    incumbent's highest steps (``cut_bound``).
    The incumbent runs the series segments one after another (every order does), so its peak is
    the largest of its segment peaks.  Only a segment whose incumbent peak exceeds L can matter:
    any other has a least peak at most L, which is at most the optimum.  Those segments are
    solved, highest first, each raising L to its proven optimum (or its own bound).  The answer
    is proven when its peak reaches L.
    """
    began = time.perf_counter()
    deadline = None if time_limit is None else search_deadline(began, time_limit)
    windows_deadline = None if time_limit is None else began + IMPROVE_SHARE * time_limit
    incumbent = improve(problem, run_order("best", problem).order, max_states=max_states, deadline=windows_deadline)
    live = problem.live_bytes(incumbent)
    bound = cut_lower_bound(problem, incumbent, live_set_lower_bound(problem), deadline)
    parts = segments(problem)
    stats = {"segments": len(parts), "largest_segment": max(map(len, parts), default=0), "solved_segments": 0,
             "down_sets": 0}
    spans, step = [], 0
    for part in parts:
        spans.append((step, step + len(part)))
        step += len(part)
    orders = [incumbent[a:b] for a, b in spans]
    peaks = [max(live[a:b], default=0) for a, b in spans]
    notes = []
    for k in sorted(range(len(parts)), key=lambda k: -peaks[k]):
        if peaks[k] <= bound:
            break
        if deadline is not None and time.perf_counter() > deadline:
            notes.append(f"time limit {time_limit:g} s reached before every segment was solved")
            break
        seg = segment_problem(problem, parts, k)
        own = seg.tasks[:len(seg.tasks) - len(parts[k])] + orders[k]  # its BEFORE task first, if any
        answer = solve_segment(seg, own, max_states, deadline, cpsat_workers)
        stats["solved_segments"] += 1
        stats["down_sets"] += answer.down_sets
        orders[k], peaks[k] = join([answer.order], [seg]), answer.peak
        bound = max(bound, answer.bound)
        if not answer.optimal:
            notes.append(answer.note)
    order = tuple(t for part in orders for t in part)
    peak = problem.peak(order)
    if peak > bound and order != incumbent:  # the segments' orders have other steps at their peaks
        bound = cut_lower_bound(problem, order, bound, deadline)
    return OrderResult(order, Status.OPTIMAL if peak == bound else Status.FEASIBLE, peak, float(bound),
                       time.perf_counter() - began, OrderInfo(note=notes[0] if notes else "", stats=stats))


class DownSetOrder:
    """Order strategy "dp": the least-peak order by the pruned down-set programme on each series
    segment (module doc).  Without ``time_limit`` it refuses with ``StaxError`` when a segment
    stays unproven (at ``max_states``); with one, it returns its best order by then, "feasible"
    with a certified bound when not proven."""

    name = "dp"

    def __init__(self, max_states: int = 200_000, time_limit: float | None = None):
        self.max_states = max_states
        self.time_limit = time_limit

    def solve(self, problem: OrderProblem) -> OrderResult:
        result = bounded_order(problem, self.max_states, self.time_limit)
        if result.status != Status.OPTIMAL and self.time_limit is None:
            raise StaxError(f"order dp: {result.info.note}; use the CP-SAT order strategy "
                            "(run_order('cpsat', problem)), solvers.order.dp.bounded_order, or raise max_states")
        return result
