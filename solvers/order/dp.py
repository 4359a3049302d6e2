"""Exact ordering by dynamic programming over down-sets (Serenity-style), Definition 7.5.

The bytes live while task t runs depend only on the set S of tasks run before it (a down-set:
closed under predecessors): the buffers produced in S that are outputs or still have a user
outside S, plus t's own buffers.  Hence

    best(S + t) = min over the last task t of  max(best(S), resident(S) + produced(t)),

and best(all tasks) is the least peak over all topological orders.  The programme walks the
down-sets layer by layer (by size), memoizing one entry per down-set (the least peak reaching
it: a down-set's resident bytes do not depend on the order inside it).  Tasks without
predecessors run only just before their first successor (``least_peak`` proves this loses
nothing), which keeps their interleavings out of the down-sets.

Pruning (branch and bound): an order of known peak ``upper`` (the best heuristic order) is the
incumbent, and a state whose peak already reaches ``upper`` is dropped, since every completion
of it peaks at least as high.  If no complete order survives, the incumbent is optimal.  When
``upper`` equals a certified lower bound (``order_decompose.live_set_lower_bound``) the search
is skipped altogether.

``DownSetOrder`` first improves the best heuristic order window by window (``order_window``)
and bounds the peak from below by minimum cuts (``order_cut_bound``); when the two meet, the
order is proven.  Otherwise it splits the problem into series segments (``order_decompose``,
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

from solvers.deadlines import search_deadline
from solvers.order.cut_bound import cut_lower_bound
from solvers.order.decompose import join, live_set_lower_bound, segment_problem, segments
from solvers.order.window import improve


class _Limit(StaxError):
    """A segment's programme stopped at ``max_states`` or the deadline."""


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


def least_peak(problem: OrderProblem, incumbent: tuple[str, ...], max_states: int,
               deadline: float | None) -> tuple[tuple[str, ...], int]:
    """The least-peak order (and the down-sets kept) by the pruned programme of the module doc;
    raises ``_Limit`` when a layer exceeds ``max_states`` or ``deadline`` (a perf_counter time) passes.

    Late sources.  Call a task *pinned* when it has no predecessor and every buffer it produces
    is an output or has a user other than itself (it frees nothing and holds nothing only at its
    own step).  Some optimal order runs every pinned task in a run of pinned tasks that ends at
    its first successor (or, without successors, at the end of the order); so the programme
    schedules pinned tasks only as the pending pinned predecessors of the next other task
    (the rest at the end), which removes their interleavings from the down-sets.  Proof: move a
    pinned task s from its step to just before its first successor u (to the end if none); the
    tasks in between move one step earlier.  s reads no allocated buffer, so at each of their
    steps the live set only loses s's live buffers.  At s's new step the live bytes are
    resident(D) + produced(s), D the tasks before it; every byte of resident(D + s) =
    resident(D) + produced(s) (s has no dead buffer, and all its users come at or after u) was
    live at the step of the task just before u in the old order.  Steps from u on see the same
    sets.  So the peak does not grow.  Moving pinned tasks one after another keeps the property
    for those already moved (a moved run shifts as a whole, or gains a member), and in such an
    order the run before a task t is exactly t's pinned predecessors not yet run.
    """
    tasks = problem.tasks
    n = len(tasks)
    index = {t: i for i, t in enumerate(tasks)}
    preds, succs = [0] * n, [[] for _ in range(n)]
    for a, b in problem.dag().edges:
        preds[index[b]] |= 1 << index[a]
        succs[index[a]].append(index[b])
    produced, kept = [0] * n, [0] * n  # bytes a task allocates; of those, bytes resident after its step
    freed_by: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # task -> (users mask, size) it may free
    for buf in problem.buffers:
        p = index[buf.producer]
        users = 0
        for u in buf.users:
            users |= 1 << index[u]
        users &= ~(1 << p)
        produced[p] += buf.size
        if buf.is_output or users:
            kept[p] += buf.size
        if not buf.is_output and users:
            for u in dict.fromkeys(buf.users):
                if index[u] != p:
                    freed_by[index[u]].append((users, buf.size))
    pinned = sum(1 << i for i in range(n) if not preds[i] and produced[i] == kept[i])
    at_end = [i for i in range(n) if pinned >> i & 1 and not succs[i]]
    steps = [i for i in range(n) if not pinned >> i & 1]
    upper = problem.peak(incumbent)
    start_ready = sum(1 << i for i in steps if not preds[i] & ~pinned)
    layer: dict[int, tuple[int, int, int]] = {0: (0, 0, start_ready)}  # S -> (peak, resident, ready mask)
    history: list[dict[int, tuple[int, int]]] = []  # per layer: S -> (last task, previous S)
    states = 1
    for size in range(len(steps)):
        nxt: dict[int, tuple[int, int, int]] = {}
        back: dict[int, tuple[int, int]] = {}
        for expanded, (done, (peak, held, ready)) in enumerate(layer.items()):
            if expanded % 1024 == 1023 and deadline is not None and time.perf_counter() > deadline:
                raise _Limit(f"time limit reached in layer {size + 1} of {len(steps)} of down-sets")
            todo = ready
            while todo:
                low = todo & -todo
                todo ^= low
                i = low.bit_length() - 1
                run, before = preds[i] & pinned & ~done, 0
                bits = run
                while bits:
                    b = bits & -bits
                    bits ^= b
                    before += produced[b.bit_length() - 1]
                candidate = max(peak, held + before + produced[i])
                if candidate >= upper:
                    continue
                state = done | run | low
                if state in nxt and nxt[state][0] <= candidate:
                    continue
                after = held + before + kept[i] - sum(s for users, s in freed_by[i] if not users & ~state)
                grown = ready ^ low
                for j in succs[i]:
                    if not preds[j] & ~state & ~pinned:
                        grown |= 1 << j
                nxt[state] = (candidate, after, grown)
                back[state] = (i, done)
        states += len(nxt)
        if deadline is not None and time.perf_counter() > deadline:
            raise _Limit(f"time limit reached after {size + 1} of {len(steps)} layers of down-sets")
        if len(nxt) > max_states:
            raise _Limit(f"{len(nxt)} down-sets of size {size + 1} already exceed max_states={max_states} ({n} tasks)")
        if not nxt:
            return incumbent, states  # nothing beats the incumbent: it is optimal
        history.append(back)
        layer = nxt
    full = sum(1 << i for i in range(n)) & ~sum(1 << i for i in at_end)
    if steps:
        peak, held, _ = layer[full]
        if max(peak, held + sum(produced[i] for i in at_end)) >= upper:
            return incumbent, states
    elif sum(produced[i] for i in at_end) >= upper:
        return incumbent, states
    order, state = [], full
    for back in reversed(history):
        i, previous = back[state]
        run = state & ~previous & ~(1 << i)
        order += [tasks[i]] + [tasks[j] for j in reversed(range(n)) if run >> j & 1]
        state = previous
    return tuple(reversed(order)) + tuple(tasks[i] for i in at_end), states


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
    except _Limit as stop:
        if not cpsat_workers or deadline is None or time.perf_counter() >= deadline:
            return SegmentAnswer(incumbent, peak, bound, 0, str(stop))
        return cpsat_segment(problem, incumbent, bound, deadline - time.perf_counter(), cpsat_workers)
    best = problem.peak(order)
    return SegmentAnswer(order, best, best, states)


def cpsat_segment(problem: OrderProblem, incumbent: tuple[str, ...], bound: int, seconds: float,
                  workers: int) -> SegmentAnswer:
    """CP-SAT's order model (``order_cpsat.OrderModel``) on a segment, hinted with ``incumbent``
    and told the certified ``bound`` (no order peaks lower): its order when better, and the
    larger of its bound and ``bound``."""
    from solvers.cpsat import SolverParams, run
    from solvers.order.cpsat import OrderModel
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

    The best heuristic order, improved window by window (``order_window``, for at most
    ``IMPROVE_SHARE`` of the time limit), is the incumbent;
    the first lower bound L is the larger of the live-set bound and the cut bounds at the
    incumbent's highest steps (``order_cut_bound``).
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
