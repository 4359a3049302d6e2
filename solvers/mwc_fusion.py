"""Fusion as a cut problem: Theorem 7.1's reduction read the other way (strategy "mwc").

Theorem 7.1 shows that fusing costs exactly what cutting costs: a buffer that stays inside its
producer's block is free, one whose users are separated from its producer is written once and
read once per foreign block.  This strategy first solves that *relaxation* -- separate every
forbidden pair at least traffic, ignoring Definition 7.3 (2) and the kernel limits -- then
repairs the answer into a valid partition (``solvers.fusion_repair``).

Terminals.  The seed's instances have three pairwise-forbidden terminals; a general
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

The answer is always status "heuristic": the repair may lose optimality on general problems;
on the instances of Theorem 7.1 it recovers the optimum (the repair is the proof's construction).
"""
from __future__ import annotations

import time
from typing import Any

import networkx as nx

from stax.problems import FusionProblem
from stax.strategy import FusionInfo, FusionResult, Status, ordered_blocks

from .cpsat_common import integer_bound
from .fusion_repair import improve_by_moves, repair_labels
from .multiway_cut import isolating_cut

METHODS = ("exact", "isolating")


def terminals(problem: FusionProblem) -> list[str]:
    """Nodes of some forbidden pair, in the problem's node order."""
    ends = {n for p in problem.forbidden for n in (p.a, p.b)}
    return [n for n in problem.nodes if n in ends]


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


def isolating_labels(problem: FusionProblem) -> dict[str, int]:
    """Components of the cut graph minus the isolating cuts of a vertex cover of the conflict graph."""
    g = cut_graph(problem)
    partners: dict[str, set[str]] = {}
    for p in problem.forbidden:
        partners.setdefault(p.a, set()).add(p.b)
        partners.setdefault(p.b, set()).add(p.a)
    cuts = {t: isolating_cut(g, t, sorted(partners[t], key=problem.nodes.index)) for t in terminals(problem)}
    dropped: set[str] = set()
    for t in sorted(cuts, key=lambda t: -cuts[t][0]):
        if not partners[t] & dropped:
            dropped.add(t)
    rest = g.copy()
    for t in set(cuts) - dropped:
        side = cuts[t][1]
        rest.remove_edges_from([(u, w) for u in side for w in g[u] if w not in side])
    return {n: i for i, comp in enumerate(nx.connected_components(rest)) for n in comp}


def exact_labels(problem: FusionProblem, time_limit: float) -> tuple[dict[str, int] | None, int | None, str]:
    """CP-SAT relaxation (see module doc): labels, a proven lower bound, and the solver status
    (labels and bound None when no labelling was found within ``time_limit``)."""
    from ortools.sat.python import cp_model

    terms = terminals(problem)
    rank = {t: i for i, t in enumerate(terms)}
    labels = range(max(1, len(terms)))
    model = cp_model.CpModel()
    z = {(v, l): model.new_bool_var(f"z_{v}_{l}") for v in problem.nodes for l in labels}
    for v in problem.nodes:
        model.add_exactly_one(z[v, l] for l in labels)
        for l in labels:
            if v in rank and l > rank[v]:
                model.add(z[v, l] == 0)
    for p in problem.forbidden:
        for l in labels:
            model.add(z[p.a, l] + z[p.b, l] <= 1)
    objective, constant = [], 0
    for buf in problem.buffers:
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
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, f"no labelling within {time_limit} s"
    chosen = {v: next(l for l in labels if solver.value(z[v, l])) for v in problem.nodes}
    return chosen, constant + integer_bound(model, solver), solver.status_name(status).lower()


class MultiwayCutFusion:
    """Fusion strategy "mwc": cut relaxation (``method`` "exact" or "isolating"), then repair."""

    name = "mwc"
    parameters = {"method": METHODS, "time_limit": "seconds for CP-SAT (exact)"}

    def __init__(self, method: str = "exact", time_limit: float = 10.0):
        if method not in METHODS:
            raise ValueError(f"mwc: unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.method, self.time_limit = method, time_limit

    def solve(self, problem: FusionProblem) -> FusionResult:
        start = time.perf_counter()
        stats: dict[str, Any] = {"method": self.method}
        labels, bound = None, None
        if self.method == "exact":
            labels, bound, stats["relaxation_status"] = exact_labels(problem, self.time_limit)
        if labels is None:  # out of time (or method "isolating"): the isolating cuts need no solver
            labels = isolating_labels(problem)
        stats["relaxation_cost"] = problem.cost(_groups(labels))
        partition = improve_by_moves(problem, repair_labels(problem, labels))
        partition = ordered_blocks(problem, partition)
        return FusionResult(partition, Status.HEURISTIC, problem.cost(partition), bound,
                            time.perf_counter() - start, FusionInfo(stats=stats))


def _groups(labels: dict[str, int]) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for n, l in labels.items():
        groups.setdefault(l, []).append(n)
    return list(groups.values())
