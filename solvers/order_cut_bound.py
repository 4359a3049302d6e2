"""Lower bounds on the least peak (Definition 7.5) by a minimum cut at each step, and at the last step.

Step bound.  Fix a task v.  In any topological order let D be the tasks run before v: a down-set
(closed under predecessors) that holds every ancestor of v and no descendant of v, nor v.  A
buffer is live at v's step exactly when v produces it, or its producer is in D and it is an
output or has a user (other than its producer) outside D.  So the live bytes at v's step are
``produced(v) + resident(D)``, and ``produced(v) + min resident(D)`` over all such D is a peak
no order beats.

The minimum is a minimum s-t cut (a closure problem), with D the source side:

- each task is a node; an infinite arc ``x -> p`` for every dependency ``p -> x`` forbids a
  source side that holds x without p (D is a down-set);
- the ancestors of v are merged into the source, v and its descendants into the sink;
- an output of size b made by p is an arc ``p -> sink`` of capacity b (cut when p is in D);
- any other buffer of size b with users gets a node a_b, an arc ``p -> a_b`` of capacity b and
  infinite arcs ``a_b -> u`` to its users: a_b can be on the source side only when all its users
  are in D, and a minimum cut puts it there whenever it may, so the arc is cut exactly when the
  buffer is resident.

A cut of finite capacity is thus a down-set D of the allowed kind plus a placement of the a_b,
of capacity at least resident(D), with equality for the best placement; the minimum cut is
``min resident(D)``.  (No infinite path runs from source to sink: a predecessor of a task that
is not a descendant of v is not one either, and a_b is entered only by a finite arc.)

Last-step bound.  At the last step every output is live, and so is every other buffer the last
task reads or writes; the last task has no successor.  So ``outputs + min over sinks t of the
non-output bytes t touches`` is a peak no order beats.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import networkx as nx

from stax.problems import OrderProblem

from .order_decompose import Closure

SOURCE, SINK = ("source",), ("sink",)  # tuples: never equal to a task name


def step_bound(problem: OrderProblem, task: str, closure: Closure | None = None) -> int:
    """The least live bytes at ``task``'s step over all orders (module doc), by one minimum cut."""
    closure = closure or Closure.of(problem)
    v = closure.index[task]
    before, after = closure.ancestors[v], closure.descendants[v] | 1 << v

    def node(t: str):
        i = closure.index[t]
        return SOURCE if before >> i & 1 else SINK if after >> i & 1 else t

    net = nx.DiGraph()

    def arc(a, b, capacity: int | None) -> None:  # capacity None: infinite
        if a == b or a == SINK or b == SOURCE:
            return  # inside one side, or never cut
        if capacity is None:
            net.add_edge(a, b)
            net[a][b].pop("capacity", None)
        elif not net.has_edge(a, b):
            net.add_edge(a, b, capacity=capacity)
        elif "capacity" in net[a][b]:
            net[a][b]["capacity"] += capacity

    for p, x in problem.dependencies().edges:
        arc(node(x), node(p), None)
    produced = 0
    for buf in problem.buffers:
        if buf.size == 0:
            continue
        if buf.producer == task:
            produced += buf.size
            continue
        users = {node(u) for u in buf.users if u != buf.producer}
        if buf.is_output:
            arc(node(buf.producer), SINK, buf.size)
        elif users:
            holder = ("buffer", buf.name)
            arc(node(buf.producer), holder, buf.size)
            for u in users:
                arc(holder, u, None)
    if SOURCE not in net or SINK not in net:
        return produced  # no arc leaves the source: D = the ancestors of v holds nothing
    return produced + nx.minimum_cut_value(net, SOURCE, SINK)


def last_step_bound(problem: OrderProblem) -> int:
    """All outputs plus the fewest non-output bytes a task without successors touches (module doc)."""
    dag = problem.dependencies()
    touched = {t: 0 for t in problem.tasks if next(iter(dag.successors(t)), None) is None}
    for buf in problem.buffers:
        if not buf.is_output:
            for t in {buf.producer, *buf.users} & touched.keys():
                touched[t] += buf.size
    return sum(b.size for b in problem.buffers if b.is_output) + min(touched.values(), default=0)


def cut_lower_bound(problem: OrderProblem, order: Sequence[str], floor: int = 0,
                    deadline: float | None = None) -> int:
    """The largest of ``floor``, ``last_step_bound`` and ``step_bound`` at the steps of ``order``
    (a topological order) that could exceed it: a step's bound is at most its live bytes in
    ``order``, so steps are tried from the most live down and the search stops at the first whose
    live bytes do not exceed the bound so far (or at ``deadline``, a perf_counter time)."""
    bound = max(floor, last_step_bound(problem))
    live = problem.live_bytes(order)
    closure = Closure.of(problem)
    for step in sorted(range(len(order)), key=lambda s: -live[s]):
        if live[step] <= bound or (deadline is not None and time.perf_counter() > deadline):
            break
        bound = max(bound, step_bound(problem, order[step], closure))
    return bound
