"""Series decomposition of an OrderProblem (Definition 7.5) and the unavoidable-live-set bound.

A *cut task* is comparable with every other task (each is its ancestor or its descendant).  Cut
tasks are pairwise comparable, so they form a chain ``c_1 < ... < c_m``, and they split the tasks
into *segments*: ``X_1 = anc(c_1) + c_1``, ``X_k = desc(c_{k-1}) & (anc(c_k) + c_k)``, and
``X_{m+1} = desc(c_m)``.  Every task outside the chain lies in exactly one segment.

Composition rule.  The least peak of the problem is the largest least peak of its segments,
each solved alone as ``segment_problems`` builds it, and concatenating optimal segment orders
gives an optimal order.  Proof:

1. *Orders are concatenations.*  Every topological order runs ``X_1``, then ``X_2``, ...:
   a task of ``X_k`` is an ancestor of ``c_k`` (or is ``c_k``) and a descendant of ``c_{k-1}``,
   so it runs after every task of ``X_{k-1}`` (all at or before ``c_{k-1}``) and before every
   task of ``X_{k+1}``.  Conversely a concatenation of topological orders of the segments is
   topological: an edge ``u -> v`` never goes from a later segment to an earlier one, since a
   descendant of ``c_k`` has only descendants of ``c_k`` as successors.
2. *Live bytes at a step depend on its own segment's order only.*  Take a step of ``X_k`` and a
   buffer b (live from its producer's step to its last user's step, or to the end for an
   output).  If b is produced in a later segment it is not live.  If it is produced in an
   earlier segment it is live exactly when it is an output, or has a user after ``X_k`` (then
   throughout ``X_k``), or its last user inside ``X_k`` has not yet run: a function of the order
   inside ``X_k``.  If b is produced in ``X_k`` it is live from its producer's step to the end
   of ``X_k`` when it is an output or has a user after ``X_k``, else to its last user's step.
3. The peak is therefore the maximum over segments of a quantity each segment's order controls
   alone, and a maximum of independent terms is minimized by minimizing each term.

``segment_problems`` writes segment ``X_k`` as an OrderProblem whose extra first task
``BEFORE`` produces the buffers the segment inherits: the ones from earlier segments that are
live at its first step (as outputs when live throughout).  ``BEFORE`` precedes every task by an
extra edge, and at its step only those inherited buffers are live, all of which are still live
at the next step, so it never sets the peak alone and the segment problem's peak is the peak of
item 2.  Buffers of ``X_k`` used after it become outputs.  ``tests/solvers/test_order_exact.py`` checks
the rule against brute force and the undecomposed down-set DP on hundreds of seeded graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stax.scheduler.problems import Buffer, OrderProblem

BEFORE = "<before>"


@dataclass(frozen=True)
class Closure:
    """Ancestor and descendant sets of every task as bit masks over ``tasks`` (in a topological order)."""

    tasks: tuple[str, ...]
    index: dict[str, int]
    ancestors: list[int]
    descendants: list[int]

    @classmethod
    def of(cls, problem: OrderProblem) -> "Closure":
        dag = problem.dependencies()
        tasks = tuple(dag.topological_order())
        index = {t: i for i, t in enumerate(tasks)}
        preds = [[index[p] for p in dag.predecessors(t)] for t in tasks]
        ancestors = [0] * len(tasks)
        for i in range(len(tasks)):
            for p in preds[i]:
                ancestors[i] |= ancestors[p] | 1 << p
        descendants = [0] * len(tasks)
        for i in reversed(range(len(tasks))):
            for p in preds[i]:
                descendants[p] |= descendants[i] | 1 << i
        return cls(tasks, index, ancestors, descendants)

    def cut_tasks(self) -> list[int]:
        """Indices of the tasks comparable with every other task, in their (forced) order."""
        everyone = (1 << len(self.tasks)) - 1
        return [i for i in range(len(self.tasks)) if self.ancestors[i] | self.descendants[i] | 1 << i == everyone]


def segments(problem: OrderProblem) -> list[tuple[str, ...]]:
    """The task sets ``X_1, X_2, ...`` of the module doc, each in a topological order."""
    closure = Closure.of(problem)
    found, start = [], 0
    for c in closure.cut_tasks():  # cut tasks are contiguous ends: everything before c is an ancestor
        found.append(closure.tasks[start:c + 1])
        start = c + 1
    if start < len(closure.tasks):
        found.append(closure.tasks[start:])
    return found


def segment_problems(problem: OrderProblem) -> list[OrderProblem]:
    """One OrderProblem per segment (module doc); solve each and ``join`` their orders."""
    parts = segments(problem)
    return [segment_problem(problem, parts, k) for k in range(len(parts))]


def segment_problem(problem: OrderProblem, parts: list[tuple[str, ...]], k: int) -> OrderProblem:
    """Segment ``k`` of ``parts`` (``segments(problem)``) as an OrderProblem (module doc); the
    inherited buffers live throughout it are summed into one, ``BEFORE`` + ``"/through"``."""
    part_of = {t: j for j, part in enumerate(parts) for t in part}
    part = parts[k]
    before = BEFORE
    while before in part_of:
        before += "'"
    inherited, own, through = [], [], 0
    for buf in problem.buffers:
        p = part_of[buf.producer]
        if p > k:
            continue
        later = buf.is_output or any(part_of[u] > k for u in buf.users)
        inside = tuple(u for u in buf.users if part_of[u] == k and u != buf.producer)
        if p < k and later:
            through += buf.size
        elif p < k and inside:
            inherited.append(Buffer(buf.name, buf.size, before, inside))
        elif p == k:
            own.append(Buffer(buf.name, buf.size, buf.producer, inside, later))
    if through:
        inherited.append(Buffer(before + "/through", through, before, (), True))
    extra = [(a, b) for a, b in problem.extra_edges if part_of[a] == part_of[b] == k]
    tasks: tuple[str, ...] = part
    if inherited:
        fed = {u for buf in own for u in buf.users} | {b for _, b in extra}
        extra += [(before, t) for t in part if t not in fed]
        tasks = (before, *part)
    return OrderProblem(tasks, tuple(inherited + own), tuple(extra),
                        name=f"{problem.name}[segment {k + 1}/{len(parts)}]")


def join(orders: list[tuple[str, ...]], segment_problems_: list[OrderProblem]) -> tuple[str, ...]:
    """The problem's order: the segments' orders one after another, without their ``BEFORE`` task."""
    out: list[str] = []
    for order, seg in zip(orders, segment_problems_):
        first = seg.tasks[0]
        out += [t for t in order if not (t == first and t.startswith(BEFORE))]
    return tuple(out)


def live_set_lower_bound(problem: OrderProblem) -> int:
    """A peak no order beats: the bytes that must be live at some task's step, and all outputs.

    At the step of task v, in every order, a buffer is live when its producer is v or an
    ancestor of v (it has been produced) and it is an output or one of its users is v or a
    descendant of v (it is still needed).  The largest such sum over v, and the sum of all
    outputs (live at the last step), bound the least peak from below.  This includes the bytes
    a task reads and writes at its own step (``model.step_lower_bound``).
    """
    closure = Closure.of(problem)
    n = len(closure.tasks)
    everyone = (1 << n) - 1
    exact = sum(b.size for b in problem.buffers) >= 2 ** 62  # beyond int64 sums: Python integers
    live: np.ndarray | list[int] = [0] * n if exact else np.zeros(n, dtype=np.int64)
    for buf in problem.buffers:
        if buf.size == 0:
            continue
        p = closure.index[buf.producer]
        needed = everyone if buf.is_output else 1 << p
        for u in () if buf.is_output else buf.users:
            j = closure.index[u]
            needed |= closure.ancestors[j] | 1 << j
        forced = (closure.descendants[p] | 1 << p) & needed
        if exact:
            for i in range(n):
                live[i] += buf.size * (forced >> i & 1)
        else:
            bits = np.unpackbits(np.frombuffer(forced.to_bytes((n + 7) // 8, "little"), np.uint8), bitorder="little")
            live += buf.size * bits[:n].astype(np.int64)
    outputs = sum(b.size for b in problem.buffers if b.is_output)
    return int(max([outputs, *live]))
