"""Candidate kernel orders for peak memory (spec 7.5, after Proposition 7.4).

The spec reorders the kernels after fusion: three heuristics each build a topological order,
the original order is the fourth candidate, each candidate's peak (Definition 7.5) is estimated
by one linear scan, and the smallest wins, so reordering is never worse than the original.

- ``original``: the given task order (if it is not topological, e.g. blocks sorted by their
  first node, the topological order closest to it: always the ready task listed first);
- ``lpmf``: least peak memory first: among ready tasks, the one whose step gives the smallest
  running peak, then the smallest net increment (allocated minus freed bytes);
- ``bfs``: ready tasks by the positions their predecessors took in the order built so far;
- ``dfs``: depth-first from every task, visiting a task's predecessors in ascending order of
  the bytes it allocates plus the bytes it reads;
- ``best``: the four above, keeping the one with the least peak (ties go to the original).

These follow the three methods of TorchInductor's ``torch/_inductor/memory.py``; ties always
fall back to the position in ``problem.tasks``, so every order is deterministic.  All orders
respect ``extra_edges``.
"""
from __future__ import annotations

import heapq
from typing import Callable

from stax.ir.dag import Dag
from stax.scheduler.problems import Buffer, OrderProblem
from stax.scheduler.strategies import OrderInfo, OrderResult, Status

Order = tuple[str, ...]


class _Facts:
    """What the heuristics need to know about an OrderProblem, computed once (a plain class: a
    frozen dataclass's generated methods slow the import, part of every warm compile)."""

    __slots__ = ("dag", "position", "allocates", "reads")

    def __init__(self, dag: Dag, position: dict[str, int], allocates: dict[str, int],
                 reads: dict[str, tuple[Buffer, ...]]):
        self.dag = dag
        self.position = position
        self.allocates = allocates  # bytes a task's outputs take
        self.reads = reads  # buffers a task reads (not its own outputs)

    @classmethod
    def of(cls, problem: OrderProblem) -> "_Facts":
        allocates = dict.fromkeys(problem.tasks, 0)
        reads: dict[str, list[Buffer]] = {t: [] for t in problem.tasks}
        for buf in problem.buffers:
            allocates[buf.producer] += buf.size
            for user in dict.fromkeys(buf.users):
                if user != buf.producer:
                    reads[user].append(buf)
        return cls(problem.dependencies(), {t: i for i, t in enumerate(problem.tasks)}, allocates,
                   {t: tuple(bs) for t, bs in reads.items()})


def original_order(problem: OrderProblem) -> Order:
    """``problem.tasks`` when it is topological, else the topological order closest to it."""
    facts = _Facts.of(problem)
    return tuple(facts.dag.topological_order(key=facts.position.__getitem__))


def least_peak_memory_first(problem: OrderProblem) -> Order:
    """Each step runs the ready task that keeps the running peak (Definition 7.5) smallest.

    During a task's step its outputs are allocated while its inputs are still live; after it,
    the non-output buffers it was the last user of (and its own unused outputs) are freed.
    """
    facts = _Facts.of(problem)
    remaining = {b.name: len({u for u in b.users if u != b.producer}) for b in problem.buffers}
    born_dead = dict.fromkeys(problem.tasks, 0)
    for buf in problem.buffers:
        if remaining[buf.name] == 0 and not buf.is_output:
            born_dead[buf.producer] += buf.size
    indegree = facts.dag.in_degrees()
    ready = [t for t in problem.tasks if indegree[t] == 0]
    live = peak = 0
    order: list[str] = []

    def freed(task: str) -> int:
        return born_dead[task] + sum(b.size for b in facts.reads[task]
                                     if not b.is_output and remaining[b.name] == 1)

    while ready:
        task = min(ready, key=lambda t: (max(peak, live + facts.allocates[t]),
                                         facts.allocates[t] - freed(t), facts.position[t]))
        ready.remove(task)
        order.append(task)
        live += facts.allocates[task]
        peak = max(peak, live)
        live -= freed(task)
        for buf in facts.reads[task]:
            remaining[buf.name] -= 1
        for succ in facts.dag.successors(task):
            indegree[succ] -= 1
            if indegree[succ] == 0:
                ready.append(succ)
    return tuple(order)


def breadth_first(problem: OrderProblem) -> Order:
    """Ready tasks by the sorted steps at which their predecessors ran (earliest first)."""
    facts = _Facts.of(problem)
    indegree = facts.dag.in_degrees()
    step: dict[str, int] = {}
    heap = [((), facts.position[t], t) for t in problem.tasks if indegree[t] == 0]
    heapq.heapify(heap)
    while heap:
        _, _, task = heapq.heappop(heap)
        step[task] = len(step)
        for succ in facts.dag.successors(task):
            indegree[succ] -= 1
            if indegree[succ] == 0:
                preds = tuple(sorted(step[p] for p in facts.dag.predecessors(succ)))
                heapq.heappush(heap, (preds, facts.position[succ], succ))
    return tuple(step)


def depth_first(problem: OrderProblem) -> Order:
    """Post-order depth-first search, visiting inputs by ascending size of the node and its inputs."""
    facts = _Facts.of(problem)

    def weight(task: str) -> tuple[int, int]:
        return facts.allocates[task] + sum(b.size for b in facts.reads[task]), facts.position[task]

    def inputs(task: str):
        return iter(sorted(facts.dag.predecessors(task), key=weight))

    done: dict[str, None] = {}
    for root in sorted(problem.tasks, key=weight):
        stack = [(root, inputs(root))] if root not in done else []
        while stack:
            task, pending = stack[-1]
            child = next((p for p in pending if p not in done), None)
            if child is None:
                stack.pop()
                done[task] = None
            else:
                stack.append((child, inputs(child)))
    return tuple(done)


class _Heuristic:
    """An order strategy made of one order function; the peak is Definition 7.5's scan."""

    name: str
    order: Callable[[OrderProblem], Order]
    parameters: dict = {}

    def __init_subclass__(cls) -> None:
        cls.__doc__ = cls.order.__doc__  # the strategy documents itself by its order function

    def solve(self, problem: OrderProblem) -> OrderResult:
        order = self.order(problem)
        return OrderResult(order, Status.HEURISTIC, peak=problem.peak(order))


class OriginalOrder(_Heuristic):
    name, order = "original", staticmethod(original_order)


class LeastPeakMemoryFirst(_Heuristic):
    name, order = "lpmf", staticmethod(least_peak_memory_first)


class BreadthFirst(_Heuristic):
    name, order = "bfs", staticmethod(breadth_first)


class DepthFirst(_Heuristic):
    name, order = "dfs", staticmethod(depth_first)


class BestOfCandidates:
    """Spec 7.5: the original order and the three heuristics; keep the least peak.

    ``info["candidates"]`` maps each candidate's name to its peak; ``info["chosen"]`` names the
    winner.  The original comes first and only a strictly smaller peak replaces it.
    """

    name = "best"
    parameters: dict = {}
    candidates: tuple[_Heuristic, ...] = (OriginalOrder(), LeastPeakMemoryFirst(), BreadthFirst(), DepthFirst())

    def solve(self, problem: OrderProblem) -> OrderResult:
        peaks: dict[str, int] = {}
        best: tuple[int, str, Order] | None = None
        for candidate in self.candidates:
            order = candidate.order(problem)
            peaks[candidate.name] = problem.peak(order)
            if best is None or peaks[candidate.name] < best[0]:
                best = (peaks[candidate.name], candidate.name, order)
        peak, chosen, order = best
        return OrderResult(order, Status.HEURISTIC, peak=peak, info=OrderInfo(candidates=peaks, chosen=chosen))
