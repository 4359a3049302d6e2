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

Group bound.  Given a set G of tasks, in every order some w in G runs after the rest of G, so
at w's step D holds G - {w} too: the live bytes there are at least the same minimum cut with
G - {w} (and its ancestors) merged into the source, and the least of these over w in G (a w that
has a descendant in G is never last) is a peak no order beats.  G = one task is the step bound;
G = every task gives the last step.  ``cut_lower_bound`` tries the groups of the largest
output-producing sinks (the weight gradients of a training graph): the last of them to run
sees the others' outputs live.

Last-step bound.  At the last step every output is live, and so is every other buffer the last
task reads or writes; the last task has no successor.  So ``outputs + min over sinks t of the
non-output bytes t touches`` is a peak no order beats.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import networkx as nx

from stax.scheduler.problems import OrderProblem

from solvers.order.decompose import Closure

SOURCE, SINK = ("source",), ("sink",)  # tuples: never equal to a task name


def step_bound(problem: OrderProblem, task: str, closure: Closure | None = None, earlier: int = 0) -> int | None:
    """The least live bytes at ``task``'s step over all orders (module doc), by one minimum cut;
    with ``earlier`` (a mask over ``closure.tasks``), over the orders that run those tasks before
    ``task`` (None when none does)."""
    closure = closure or Closure.of(problem)
    v = closure.index[task]
    before, after = closure.ancestors[v], closure.descendants[v] | 1 << v
    bits = earlier
    while bits:
        low = bits & -bits
        bits ^= low
        before |= closure.ancestors[low.bit_length() - 1] | low
    if before & after:
        return None

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


def group_bound(problem: OrderProblem, group: Sequence[str], closure: Closure | None = None,
                above: int | None = None) -> int:
    """The least live bytes at the step of the last task of ``group`` to run, over all orders
    (module doc).  With ``above``, stops at the first candidate last task whose value is at most
    ``above`` and returns that value: the group's bound is then at most ``above`` as well (it
    cannot raise a bound of ``above``), and the value returned is no bound."""
    closure = closure or Closure.of(problem)
    everyone = sum(1 << closure.index[t] for t in group)
    least = None
    for w in group:
        value = step_bound(problem, w, closure, everyone & ~(1 << closure.index[w]))
        if value is not None and (least is None or value < least):
            least = value
            if above is not None and least <= above:
                break
    assert least is not None, "a task of the group has no descendant in it"
    return least


def output_sinks(problem: OrderProblem) -> list[str]:
    """Tasks without successors that make outputs, the largest outputs first."""
    dag = problem.dependencies()
    made: dict[str, int] = {}
    for buf in problem.buffers:
        if buf.is_output and buf.size and next(iter(dag.successors(buf.producer)), None) is None:
            made[buf.producer] = made.get(buf.producer, 0) + buf.size
    return sorted(made, key=lambda t: -made[t])


def cut_lower_bound(problem: OrderProblem, order: Sequence[str], floor: int = 0,
                    deadline: float | None = None, groups: int = 64) -> int:
    """The largest of ``floor``, ``last_step_bound``, ``step_bound`` at the steps of ``order`` (a
    topological order) that could exceed it, and ``group_bound`` of the ``k`` largest output
    sinks for k = 2 .. ``groups``, until ``deadline`` (a perf_counter time).  A step's bound is at
    most its live bytes in ``order``, so steps are tried from the most live down and stop at the
    first whose live bytes do not exceed the bound so far; the groups stop once the bound reaches
    the peak of ``order`` (nothing can raise it further)."""
    bound = max(floor, last_step_bound(problem))
    live = problem.live_bytes(order)
    peak = max(live, default=0)
    closure = Closure.of(problem)

    def late() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    for step in sorted(range(len(order)), key=lambda s: -live[s]):
        if live[step] <= bound or late():
            break
        bound = max(bound, step_bound(problem, order[step], closure))
    position = {t: i for i, t in enumerate(order)}
    sinks = output_sinks(problem)
    for k in range(2, min(groups, len(sinks)) + 1):
        if bound >= peak or late():
            break
        group = sorted(sinks[:k], key=lambda t: -position[t])  # the last in ``order`` first: likely the least
        bound = max(bound, group_bound(problem, group, closure, bound))
    return bound
