"""Multiway cut on a weighted undirected graph: exact (CP-SAT), isolating cuts, brute force.

The problem of Theorem 7.1's reduction: given ``H = (V, E)`` with non-negative integer edge
weights (attribute ``weight``, default 1) and terminals ``s_1..s_k``, find an edge set of least
weight whose removal leaves the terminals pairwise disconnected.  Every solver returns a
``MultiwayCut`` whose ``labels`` put each vertex on the side of one terminal (labels are
terminal indices ``0..k-1``); the cut is exactly the set of edges whose endpoints carry
different labels.

Example::

    >>> import networkx as nx
    >>> h = nx.Graph([("a", "m", {"weight": 2}), ("b", "m", {"weight": 3}), ("c", "m", {"weight": 4})])
    >>> exact_multiway_cut(h, ("a", "b", "c")).weight
    5
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import networkx as nx

Vertex = Hashable
Edge = tuple[Vertex, Vertex]


@dataclass(frozen=True)
class MultiwayCut:
    """Cut edges, their total weight, a labelling (vertex -> side) and how it was obtained."""

    edges: frozenset[Edge]
    weight: int
    labels: Mapping[Vertex, int]
    status: str = "optimal"
    seconds: float = 0.0


def edge_weight(h: nx.Graph, u: Vertex, w: Vertex) -> int:
    return h.edges[u, w].get("weight", 1)


def cut_from_labels(h: nx.Graph, labels: Mapping[Vertex, int], status: str, seconds: float = 0.0) -> MultiwayCut:
    """The cut a labelling induces: every edge whose endpoints carry different labels."""
    edges = frozenset((u, w) for u, w in h.edges if labels[u] != labels[w])
    return MultiwayCut(edges, sum(edge_weight(h, u, w) for u, w in edges), dict(labels), status, seconds)


def is_multiway_cut(h: nx.Graph, terminals: Sequence[Vertex], edges: frozenset[Edge] | set[Edge]) -> bool:
    """True when removing ``edges`` leaves the terminals pairwise disconnected."""
    rest = h.copy()
    rest.remove_edges_from(edges)
    component = {v: i for i, comp in enumerate(nx.connected_components(rest)) for v in comp}
    return len({component[t] for t in terminals}) == len(terminals)


def _check_terminals(h: nx.Graph, terminals: Sequence[Vertex]) -> None:
    if len(set(terminals)) != len(terminals) or any(t not in h for t in terminals):
        raise ValueError(f"terminals {list(terminals)} must be distinct vertices of the graph")


def exact_multiway_cut(h: nx.Graph, terminals: Sequence[Vertex], time_limit: float = 30.0) -> MultiwayCut:
    """CP-SAT: a label per vertex (one Boolean per terminal), a cut indicator per edge.

    ``cut[e] >= z[u, t] - z[w, t]`` for every terminal ``t``: an edge whose endpoints carry
    different labels is cut.  Status "optimal" when proven, else "feasible".
    """
    from ortools.sat.python import cp_model

    _check_terminals(h, terminals)
    start = time.perf_counter()
    k = len(terminals)
    model = cp_model.CpModel()
    z = {(v, t): model.new_bool_var(f"z_{v}_{t}") for v in h for t in range(k)}
    for v in h:
        model.add_exactly_one(z[v, t] for t in range(k))
    for t, s in enumerate(terminals):
        model.add(z[s, t] == 1)
    cut = {}
    for u, w in h.edges:
        cut[u, w] = model.new_bool_var(f"cut_{u}_{w}")
        for t in range(k):
            model.add(cut[u, w] >= z[u, t] - z[w, t])
            model.add(cut[u, w] >= z[w, t] - z[u, t])
    model.minimize(sum(edge_weight(h, u, w) * c for (u, w), c in cut.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no multiway cut within {time_limit} s (status {solver.status_name(status)})")
    labels = {v: next(t for t in range(k) if solver.value(z[v, t])) for v in h}
    return cut_from_labels(h, labels, "optimal" if status == cp_model.OPTIMAL else "feasible",
                           time.perf_counter() - start)


def isolating_cut(h: nx.Graph, source: Vertex, sinks: Sequence[Vertex]) -> tuple[int, set[Vertex]]:
    """A minimum cut separating ``source`` from all ``sinks`` (joined to a super-sink).

    Returns the cut weight and the source side, the set of vertices still reachable from the
    source in the residual graph (the smallest minimum source side).
    """
    flow = nx.DiGraph()
    flow.add_nodes_from(h)
    for u, w in h.edges:
        capacity = edge_weight(h, u, w)
        flow.add_edge(u, w, capacity=capacity)
        flow.add_edge(w, u, capacity=capacity)
    super_sink = ("__super_sink__",)
    for t in sinks:
        flow.add_edge(t, super_sink)  # no capacity attribute: infinite
    residual = nx.flow.preflow_push(flow, source, super_sink)
    side, frontier = {source}, [source]
    while frontier:
        u = frontier.pop()
        for w, data in residual[u].items():
            if w not in side and data["flow"] < data["capacity"]:
                side.add(w)
                frontier.append(w)
    return int(residual.graph["flow_value"]), side


def isolating_multiway_cut(h: nx.Graph, terminals: Sequence[Vertex]) -> MultiwayCut:
    """The isolating-cut approximation (guarantee 2 - 2/k of the optimum).

    For each terminal a minimum cut isolating it from the others; the k-1 cheapest are kept.
    Minimal source sides of minimum isolating cuts are disjoint, so labelling each kept side
    with its terminal and everything else with the dropped (most expensive) terminal gives a cut
    contained in the union of the kept cuts.
    """
    _check_terminals(h, terminals)
    start = time.perf_counter()
    sides = [isolating_cut(h, s, [t for t in terminals if t != s]) for s in terminals]
    kept = sorted(range(len(terminals)), key=lambda i: sides[i][0])[:-1]
    dropped = ({*range(len(terminals))} - set(kept)).pop()
    labels = {v: dropped for v in h}
    for i in kept:
        labels.update({v: i for v in sides[i][1]})
    return cut_from_labels(h, labels, "heuristic", time.perf_counter() - start)


def brute_force_multiway_cut(h: nx.Graph, terminals: Sequence[Vertex], max_free: int = 12) -> MultiwayCut:
    """Try every labelling of the non-terminal vertices (k^(n-k) of them; tiny graphs only)."""
    _check_terminals(h, terminals)
    start = time.perf_counter()
    free = [v for v in h if v not in terminals]
    if len(free) > max_free:
        raise ValueError(f"brute force over {len(free)} free vertices is too slow; the limit is {max_free}")
    fixed = {s: t for t, s in enumerate(terminals)}
    edges = [(u, w, edge_weight(h, u, w)) for u, w in h.edges]
    best: tuple[int, dict[Vertex, int]] | None = None
    for choice in itertools.product(range(len(terminals)), repeat=len(free)):
        labels = fixed | dict(zip(free, choice))
        weight = sum(c for u, w, c in edges if labels[u] != labels[w])
        if best is None or weight < best[0]:
            best = (weight, labels)
    assert best is not None
    return cut_from_labels(h, best[1], "optimal", time.perf_counter() - start)
