"""Seeded generators of abstract FusionProblem and OrderProblem instances (no program needed).

``layered_dag`` draws a random layered DAG; ``series_parallel_dag`` composes series and parallel
blocks; ``chain_dag`` and ``local_dag`` (edges between near nodes only) scale to any size.  Each node writes one buffer read by its successors; sources read graph inputs; sinks
are graph outputs.  ``fusion_problem`` adds forbidden pairs (as incompatible iteration groups
would) and ``order_problem`` gives the kernels' OrderProblem.
"""
from __future__ import annotations

import random

import networkx as nx

from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, OrderProblem


def layered_dag(n: int, seed: int, layers: int | None = None, edge_prob: float = 0.3) -> nx.DiGraph:
    """A random DAG on nodes ``n0..n{n-1}`` (topologically numbered) in roughly ``layers`` layers."""
    rng = random.Random(seed)
    layers = layers or max(2, round(n ** 0.5))
    layer_of = sorted(rng.randrange(layers) for _ in range(n))
    g = nx.DiGraph()
    g.add_nodes_from(f"n{i}" for i in range(n))
    for j in range(n):
        earlier = [i for i in range(j) if layer_of[i] < layer_of[j]]
        preds = [i for i in earlier if rng.random() < edge_prob]
        if earlier and not preds:
            preds = [rng.choice(earlier)]
        g.add_edges_from((f"n{i}", f"n{j}") for i in preds)
    return g


def series_parallel_dag(n: int, seed: int) -> nx.DiGraph:
    """A random two-terminal series-parallel DAG with about ``n`` nodes, topologically numbered."""
    rng = random.Random(seed)
    g = nx.DiGraph([(0, 1)])
    edges = [(0, 1)]
    next_id = 2
    while g.number_of_nodes() < n:
        u, v = edges.pop(rng.randrange(len(edges)))
        w = next_id
        next_id += 1
        if rng.random() < 0.5:  # series: u -> w -> v replaces u -> v
            g.remove_edge(u, v)
            g.add_edges_from([(u, w), (w, v)])
            edges += [(u, w), (w, v)]
        else:  # parallel: a second path u -> w -> v beside u -> v
            g.add_edges_from([(u, w), (w, v)])
            edges += [(u, v), (u, w), (w, v)]
    order = list(nx.topological_sort(g))
    return nx.relabel_nodes(g, {v: f"n{i}" for i, v in enumerate(order)})


def chain_dag(n: int) -> nx.DiGraph:
    """The path ``n0 -> n1 -> ... -> n{n-1}``: every node reads what the one before it wrote."""
    return nx.path_graph([f"n{i}" for i in range(n)], create_using=nx.DiGraph)


def local_dag(n: int, seed: int, span: int = 32, max_preds: int = 3) -> nx.DiGraph:
    """A random DAG on ``n0..n{n-1}`` whose node j reads 1 to ``max_preds`` of the ``span`` nodes
    before it (built in time linear in n, for graphs of any size: wider than a chain, local as
    a model's graph is)."""
    rng = random.Random(seed)
    g = nx.DiGraph()
    g.add_nodes_from(f"n{i}" for i in range(n))
    for j in range(1, n):
        earlier = range(max(0, j - span), j)
        g.add_edges_from((f"n{i}", f"n{j}") for i in rng.sample(earlier, min(len(earlier), rng.randint(1, max_preds))))
    return g


def _sizes(g: nx.DiGraph, rng: random.Random, low: int, high: int) -> dict[str, int]:
    return {v: rng.randint(low, high) for v in g.nodes}


def fusion_problem(g: nx.DiGraph, seed: int, forbidden_fraction: float = 0.1,
                   sizes: tuple[int, int] = (1, 64), name: str = "", forbidden_span: int | None = None,
                   shared_input: bool = False) -> FusionProblem:
    """A FusionProblem on DAG ``g``: node v writes buffer ``b_v``; sources read one graph input each;
    sinks are outputs; a ``forbidden_fraction`` of node pairs is forbidden ('incompatible'), of
    all pairs or, with ``forbidden_span``, of the pairs at most that many places apart (which
    keeps a large problem's size linear in its nodes).  ``shared_input``: every node also reads
    one more graph input (a constant all of a model's ops read), so every pair shares a buffer."""
    rng = random.Random(seed)
    nodes = tuple(sorted(g.nodes, key=lambda v: int(v[1:])))
    position = {v: i for i, v in enumerate(nodes)}
    size = _sizes(g, rng, *sizes)
    buffers = []
    for v in nodes:
        if g.in_degree(v) == 0:
            buffers.append(Buffer(f"in_{v}", rng.randint(*sizes), None, (v,)))
        buffers.append(Buffer(f"b_{v}", size[v], v, tuple(sorted(g.successors(v), key=position.__getitem__)),
                              is_output=g.out_degree(v) == 0))
    if shared_input:
        buffers.append(Buffer("in_shared", rng.randint(*sizes), None, nodes))
    span = len(nodes) if forbidden_span is None else forbidden_span
    pairs = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:i + 1 + span]]
    forbidden = tuple(ForbiddenPair(a, b, "incompatible") for a, b in pairs if rng.random() < forbidden_fraction)
    kinds = {v: {"kind": rng.choice(["pointwise", "reduction"])} for v in nodes}
    return FusionProblem(nodes=nodes, buffers=tuple(buffers), forbidden=forbidden, node_info=kinds,
                         name=name or f"dag{len(nodes)}-s{seed}")


def order_problem(g: nx.DiGraph, seed: int, sizes: tuple[int, int] = (1, 64), name: str = "") -> OrderProblem:
    """An OrderProblem on DAG ``g``: task v allocates ``b_v`` read by its successors; sinks are outputs."""
    rng = random.Random(seed)
    tasks = tuple(sorted(g.nodes, key=lambda v: int(v[1:])))
    size = _sizes(g, rng, *sizes)
    buffers = tuple(Buffer(f"b_{v}", size[v], v, tuple(sorted(g.successors(v), key=tasks.index)),
                           is_output=g.out_degree(v) == 0) for v in tasks)
    return OrderProblem(tasks=tasks, buffers=buffers, name=name or f"dag{len(tasks)}-s{seed}")
