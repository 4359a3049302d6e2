"""Fusion as a cut problem: Theorem 7.1's reduction read the other way (strategy "mwc").

Theorem 7.1 shows that fusing costs exactly what cutting costs: a buffer that stays inside its
producer's block is free, one whose users are separated from its producer is written once and
read once per foreign block.  This strategy first solves that *relaxation* -- separate every
forbidden pair at least traffic, ignoring Definition 7.3 (2) and the kernel limits -- then
repairs the answer into a valid partition (``solvers.fusion.repair``).

Terminals.  The spec's instances have three pairwise-forbidden terminals; a general
FusionProblem has many forbidden pairs forming a *conflict graph* C on the nodes.  Every node
of a forbidden pair is a terminal, and each forbidden pair must be separated (a multicut, which
is a multiway cut when C is a clique, as in Theorem 7.1).

``method="exact"``: CP-SAT over labels.  A label is a block of the relaxation; merging two
blocks never raises the traffic, so some optimal relaxation has only blocks that each hold a
terminal, and L = (number of terminals) labels suffice (the i-th terminal takes a label <= i, to
break symmetry).  ``z[v, l]`` one label per node; ``z[a, l] + z[b, l] <= 1`` for each forbidden
pair; for a buffer of size s produced by p, ``read[l] >= z[u, l] - z[p, l]`` for each user u and
``write >= read[l]``, cost ``s * (write + sum_l read[l])``; a graph input costs
``s * sum_l read[l]`` with ``read[l] >= z[u, l]``.  Its optimum is a lower bound on the fusion
optimum (reported as ``FusionResult.bound``).

``method="isolating"``: the cut graph G joins a producer to each user with weight 2 * size
(the write and the read that separating them costs; exact for a single user) and the first
user of a graph input to each other user with weight size (one more read).  For each terminal
t, a minimum cut of G isolating t from its forbidden partners (max-flow to a super-sink).  The
cuts kept must cover every forbidden pair, i.e. the kept terminals form a vertex cover of C:
terminals are dropped greedily, most expensive cut first, while the dropped set stays
independent in C.  When C is a clique of k terminals this keeps the k-1 cheapest cuts, the
isolating-cut algorithm with its 2 - 2/k guarantee.  The labels are the connected components
of G minus the kept cuts.

The repair may lose optimality on general problems; on the instances of Theorem 7.1 it recovers
the optimum (the repair is the proof's construction), which the relaxation's bound then proves.
"""
from __future__ import annotations

import time
from typing import Any

import networkx as nx

from stax.scheduler.problems import FusionProblem
from stax.scheduler.strategies import FusionInfo, FusionResult, Status, ordered_blocks

from solvers.cpsat import integer_bound
from solvers.deadlines import OutOfTime, check_deadline, seconds_left
from solvers.fusion.index import NodeIndex
from solvers.fusion.repair import improve_by_moves, repair_labels
from solvers.fusion.multiway_cut import isolating_cut

METHODS = ("exact", "isolating")


def terminals(problem: FusionProblem, index: NodeIndex | None = None) -> list[str]:
    """Nodes of some forbidden pair, in the problem's node order."""
    partners = (index or NodeIndex(problem)).partners
    return [n for n in problem.nodes if partners[n]]


def cut_graph(problem: FusionProblem) -> nx.Graph:
    """The weighted undirected graph whose cuts price the separation of nodes (see module doc)."""
    g = nx.Graph()
    g.add_nodes_from(problem.nodes)

    def connect(a: str, b: str, weight: int) -> None:
        if a != b and weight > 0:
            g.add_edge(a, b, weight=g.edges[a, b]["weight"] + weight if g.has_edge(a, b) else weight)

    for buf in problem.buffers:
        if buf.producer is not None:
            for u in set(buf.users):
                connect(buf.producer, u, 2 * buf.size)
        elif buf.users:
            for u in set(buf.users) - {buf.users[0]}:
                connect(buf.users[0], u, buf.size)
    return g


def isolating_labels(problem: FusionProblem, deadline: float | None = None,
                     index: NodeIndex | None = None) -> dict[str, int]:
    """Components of the cut graph minus the isolating cuts of a vertex cover of the conflict graph.
    Once ``deadline`` (a perf_counter time) passes, each terminal left is cut off alone (its
    edges: an isolating cut, if not a minimum one)."""
    g = cut_graph(problem)
    index = index or NodeIndex(problem)
    partners = index.partners
    position = {v: i for i, v in enumerate(problem.nodes)}
    cuts, longest = {}, 0.0  # the longest minimum cut so far predicts the next one's seconds
    for t in terminals(problem, index):
        began = time.perf_counter()
        if deadline is not None and began + longest > deadline:
            cuts[t] = (int(g.degree(t, weight="weight")), {t})
        else:
            cuts[t] = isolating_cut(g, t, sorted(partners[t], key=position.__getitem__))
            longest = max(longest, time.perf_counter() - began)
    dropped: set[str] = set()
    for t in sorted(cuts, key=lambda t: -cuts[t][0]):
        if not partners[t] & dropped:
            dropped.add(t)
    rest = g.copy()
    for t in set(cuts) - dropped:
        side = cuts[t][1]
        rest.remove_edges_from([(u, w) for u in side for w in g[u] if w not in side])
    return {n: i for i, comp in enumerate(nx.connected_components(rest)) for n in comp}


def exact_labels(problem: FusionProblem, deadline: float,
                 index: NodeIndex | None = None) -> tuple[dict[str, int] | None, int | None, str]:
    """CP-SAT relaxation (see module doc): labels, a proven lower bound, and the solver status
    (labels and bound None when no labelling was found before ``deadline``, a perf_counter time,
    which building the model counts against)."""
    from ortools.sat.python import cp_model

    try:
        model, z, labels, constant = _relaxation(problem, deadline, index)
    except OutOfTime:
        return None, None, "the relaxation's model was not built in time"
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds_left(deadline))
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, f"no labelling found in time (CP-SAT {solver.status_name(status).lower()})"
    chosen = {v: next(l for l in labels if solver.value(z[v, l])) for v in problem.nodes}
    return chosen, constant + integer_bound(model, solver), solver.status_name(status).lower()


def _relaxation(problem: FusionProblem, deadline: float, index: NodeIndex | None):
    """The CP-SAT model of ``exact_labels`` (module doc): the model, its label literals, the
    labels and the objective's constant; raises ``OutOfTime`` once ``deadline`` passes."""
    from ortools.sat.python import cp_model

    terms = terminals(problem, index)
    rank = {t: i for i, t in enumerate(terms)}
    labels = range(max(1, len(terms)))
    model = cp_model.CpModel()
    z = {}
    for v in problem.nodes:
        check_deadline(deadline)
        z.update({(v, l): model.new_bool_var(f"z_{v}_{l}") for l in labels})
        model.add_exactly_one(z[v, l] for l in labels)
        for l in labels:
            if v in rank and l > rank[v]:
                model.add(z[v, l] == 0)
    for p in problem.forbidden:
        check_deadline(deadline)
        for l in labels:
            model.add(z[p.a, l] + z[p.b, l] <= 1)
    objective, constant = [], 0
    for buf in problem.buffers:
        check_deadline(deadline)
        users = sorted(set(buf.users) - {buf.producer}, key=problem.nodes.index)
        if buf.size == 0 or not users:
            constant += buf.size if buf.is_output else 0
            continue
        read = [model.new_bool_var(f"read_{buf.name}_{l}") for l in labels]
        for l in labels:
            for u in users:
                model.add(read[l] >= z[u, l] - (z[buf.producer, l] if buf.producer is not None else 0))
        objective += [buf.size * r for r in read]
        if buf.producer is None:
            continue
        if buf.is_output:
            constant += buf.size
        else:
            write = model.new_bool_var(f"write_{buf.name}")
            model.add_max_equality(write, read)
            objective.append(buf.size * write)
    model.minimize(sum(objective))
    return model, z, labels, constant


#: the parts of the time limit the exact relaxation, and everything before the repair's last
#: steps (the isolating cuts, the moves), may use; the rest is for pricing and validating
RELAXATION_SHARE, SEARCH_SHARE = 0.4, 0.7


class MultiwayCutFusion:
    """Fusion strategy "mwc": cut relaxation (``method`` "exact" or "isolating"), then repair.

    ``time_limit`` covers the whole strategy: the exact relaxation gets ``RELAXATION_SHARE`` of
    it (building its model included), the isolating cuts and the local moves stop at
    ``SEARCH_SHARE`` of it (``isolating_labels``, ``improve_by_moves``).  ``status``: "optimal" when the cost meets the
    relaxation's bound, "feasible" (not proven) when there is a bound below the cost or the time
    limit cut the search short, else "heuristic" (method "isolating" in time)."""

    name = "mwc"
    parameters = {"method": METHODS, "time_limit": "seconds for the whole strategy"}

    def __init__(self, method: str = "exact", time_limit: float = 10.0):
        if method not in METHODS:
            raise ValueError(f"mwc: unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.method, self.time_limit = method, time_limit

    def solve(self, problem: FusionProblem) -> FusionResult:
        start = time.perf_counter()
        deadline = start + SEARCH_SHARE * self.time_limit
        stats: dict[str, Any] = {"method": self.method}
        labels, bound = None, None
        index = NodeIndex(problem)
        if self.method == "exact":
            labels, bound, stats["relaxation_status"] = exact_labels(
                problem, start + RELAXATION_SHARE * self.time_limit, index)
        if labels is None:  # out of time (or method "isolating"): the isolating cuts need no solver
            labels = isolating_labels(problem, deadline, index)
        stats["relaxation_cost"] = problem.cost(_groups(labels))
        partition = improve_by_moves(problem, repair_labels(problem, labels, index), deadline=deadline, index=index)
        partition = ordered_blocks(problem, partition)
        cost = problem.cost(partition)
        late = time.perf_counter() > deadline or (self.method == "exact" and bound is None)
        note = f"the time limit {self.time_limit:g} s cut the search short" if late else ""
        status = (Status.OPTIMAL if cost == bound else Status.FEASIBLE if bound is not None or late
                  else Status.HEURISTIC)
        return FusionResult(partition, status, cost, bound, time.perf_counter() - start,
                            FusionInfo(note=note, stats=stats))


def _groups(labels: dict[str, int]) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for n, l in labels.items():
        groups.setdefault(l, []).append(n)
    return list(groups.values())
