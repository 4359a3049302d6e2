"""The two NP-hardness reductions of section 7, with the constructions used in their proofs.

Theorem 7.1 (fusion is NP-hard): a weighted graph H with three terminals becomes a
FusionProblem whose least cost is exactly twice the least multiway cut weight.
``fusion_from_multiway_cut`` builds it, ``cut_from_partition`` maps a partition back to a
multiway cut (the "(>=)" half of the proof) and ``partition_from_cut`` builds the partition of
the "(<=)" half.

Proposition 7.4 (least peak memory is NP-hard): a graph H without isolated vertices becomes an
OrderProblem whose least peak lies in ``[K(vs(H)+1), K(vs(H)+1) + |F|]`` with ``K = |F| + 1``.
``order_from_vertex_separation`` builds it, ``order_threshold`` gives the threshold
``M = K(k+1) + |F|`` and ``order_from_separation`` the order of the upper-bound half.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import networkx as nx

from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem, Partition, block_index

from solvers.fusion.multiway_cut import MultiwayCut, cut_from_labels, is_multiway_cut

Vertex = Hashable


def vertex_node(v: Vertex) -> str:
    """The node of vertex v in both reductions: the sink n_v of Theorem 7.1, the vertex task of
    Proposition 7.4."""
    return f"n_{v}"


def edge_node(u: Vertex, w: Vertex) -> str:
    """The node of edge {u, w} (as ``H.edges`` orients it) in both reductions: the source x_e of
    Theorem 7.1, the edge task of Proposition 7.4."""
    return f"x_{u}_{w}"


def _check_simple(h: nx.Graph) -> None:
    loops = list(nx.selfloop_edges(h))
    if loops:
        raise ValueError(f"the reductions need a graph without self-loops; found {loops[:3]}")


# --- Theorem 7.1 ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FusionReduction:
    """The FusionProblem of Theorem 7.1 together with the graph it encodes."""

    problem: FusionProblem
    graph: nx.Graph
    terminals: tuple[Vertex, ...]


def fusion_from_multiway_cut(h: nx.Graph, terminals: Sequence[Vertex], name: str = "") -> FusionReduction:
    """Theorem 7.1's construction.

    A sink ``n_v`` per vertex (output size 0); a source ``x_e`` per edge that reads a size-0
    external input and writes a buffer of size w(e) read by both endpoint sinks; the terminal
    sinks are pairwise forbidden.  The kernel limits are lifted (set to the instance size),
    since the theorem's cost model has none.
    """
    if len(set(terminals)) != len(terminals) or any(t not in h for t in terminals):
        raise ValueError(f"terminals {list(terminals)} must be distinct vertices of the graph")
    _check_simple(h)
    sources = [edge_node(u, w) for u, w in h.edges]
    sinks = [vertex_node(v) for v in h]
    buffers = []
    for (u, w), x in zip(h.edges, sources):
        buffers.append(Buffer(f"in_{x}", 0, None, (x,)))
        buffers.append(Buffer(f"buf_{x}", h.edges[u, w].get("weight", 1), x, (vertex_node(u), vertex_node(w))))
    buffers += [Buffer(f"buf_{n}", 0, n, (), is_output=True) for n in sinks]
    forbidden = tuple(ForbiddenPair(vertex_node(a), vertex_node(b), "terminals")
                      for i, a in enumerate(terminals) for b in terminals[i + 1:])
    nodes = tuple(sources + sinks)
    problem = FusionProblem(nodes=nodes, buffers=tuple(buffers), forbidden=forbidden,
                            max_nodes=len(nodes), max_buffers=len(buffers),
                            name=name or f"mwc-reduction-{h.number_of_nodes()}v{h.number_of_edges()}e")
    return FusionReduction(problem, h, tuple(terminals))


def cut_from_partition(reduction: FusionReduction, partition: Sequence[Sequence[str]]) -> MultiwayCut:
    """Theorem 7.1 (>=): group the vertices by the block of their sink; the cut is every edge
    between groups (a multiway cut, since terminal sinks are in different blocks)."""
    block_of = block_index(partition)
    labels = {v: block_of[vertex_node(v)] for v in reduction.graph}
    return cut_from_labels(reduction.graph, labels, "heuristic")


def partition_from_cut(reduction: FusionReduction, cut_edges: Sequence[tuple[Vertex, Vertex]]) -> Partition:
    """Theorem 7.1 (<=): number the components of H - E' as blocks; x_e joins the block
    min(comp(u), comp(w)).  Cross-block edges go from smaller to larger numbers: acyclic."""
    h = reduction.graph
    if not is_multiway_cut(h, reduction.terminals, set(cut_edges)):
        raise ValueError("the given edges are not a multiway cut: some terminals stay connected")
    rest = h.copy()
    rest.remove_edges_from(cut_edges)
    comp = {v: i for i, c in enumerate(nx.connected_components(rest)) for v in c}
    blocks: list[list[str]] = [[] for _ in range(max(comp.values(), default=-1) + 1)]
    for u, w in h.edges:
        blocks[min(comp[u], comp[w])].append(edge_node(u, w))
    for v in h:
        blocks[comp[v]].append(vertex_node(v))
    return tuple(tuple(b) for b in blocks)


# --- Proposition 7.4 --------------------------------------------------------------------------

@dataclass(frozen=True)
class OrderReduction:
    """The OrderProblem of Proposition 7.4, its graph, and K = |F| + 1."""

    problem: OrderProblem
    graph: nx.Graph
    big: int

    def bounds(self, vs: int) -> tuple[int, int]:
        """[K(vs+1), K(vs+1) + |F|]: where the least peak lies (Proposition 7.4)."""
        low = self.big * (vs + 1)
        return low, low + self.graph.number_of_edges()


def order_from_vertex_separation(h: nx.Graph, name: str = "") -> OrderReduction:
    """Proposition 7.4's construction: a task per vertex with output size K = |F| + 1 (its
    size-0 graph input is the caller's, so not listed), a task per edge reading both endpoint
    outputs, with output size 1, a graph output (alive to the end)."""
    isolated = [v for v in h if h.degree(v) == 0]
    if isolated:
        raise ValueError(f"Proposition 7.4 needs a graph without isolated vertices; {isolated[:5]} are isolated")
    _check_simple(h)
    big = h.number_of_edges() + 1
    tasks = [vertex_node(v) for v in h] + [edge_node(u, w) for u, w in h.edges]
    buffers = [Buffer(f"buf_{vertex_node(v)}", big, vertex_node(v),
                      tuple(edge_node(*e) for e in h.edges if v in e)) for v in h]
    buffers += [Buffer(f"buf_{edge_node(u, w)}", 1, edge_node(u, w), (), is_output=True) for u, w in h.edges]
    problem = OrderProblem(tasks=tuple(tasks), buffers=tuple(buffers),
                           name=name or f"vs-reduction-{h.number_of_nodes()}v{h.number_of_edges()}e")
    return OrderReduction(problem, h, big)


def order_threshold(reduction: OrderReduction, k: int) -> int:
    """M = K(k+1) + |F|: some order has peak <= M iff vs(H) <= k (Proposition 7.4)."""
    return reduction.bounds(k)[1]


def order_from_separation(reduction: OrderReduction, vertex_order: Sequence[Vertex]) -> tuple[str, ...]:
    """Proposition 7.4's upper bound: run u_1, u_2, ... and after each u_i every edge task whose
    two endpoints have both run."""
    h = reduction.graph
    incident: dict[Vertex, list[tuple[Vertex, Vertex]]] = {v: [] for v in h}
    for u, w in h.edges:
        incident[u].append((u, w))
        incident[w].append((u, w))
    done: set[Vertex] = set()
    order: list[str] = []
    for u in vertex_order:
        done.add(u)
        order.append(vertex_node(u))
        order += [edge_node(a, b) for a, b in incident[u] if a in done and b in done]
    return tuple(order)
