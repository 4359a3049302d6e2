"""Seeded undirected weighted graphs for the reductions of Theorem 7.1 and Proposition 7.4.

Every generator takes a size and a ``seed``, returns a connected ``networkx.Graph`` on integer
vertices ``0..n-1`` with an integer ``weight`` on each edge (drawn from ``weights``), and is
reproducible: the same arguments give the same graph.  ``FAMILIES`` maps a family name to its
generator; ``choose_terminals`` picks the three (or k) terminals of a multiway cut instance.
"""
from __future__ import annotations

import random
from typing import Callable

import networkx as nx


def _weighted(g: nx.Graph, rng: random.Random, weights: tuple[int, int]) -> nx.Graph:
    h = nx.Graph()
    h.add_nodes_from(sorted(g.nodes))
    h.add_weighted_edges_from((u, w, rng.randint(*weights)) for u, w in sorted(g.edges))
    return h


def random_graph(n: int, seed: int, p: float = 0.3, weights: tuple[int, int] = (1, 9)) -> nx.Graph:
    """G(n, p), made connected by linking each later component to a random earlier vertex."""
    rng = random.Random(seed)
    g = nx.gnp_random_graph(n, p, seed=rng.randrange(2**31))
    components = sorted(sorted(c) for c in nx.connected_components(g))
    for previous, comp in zip(components, components[1:]):
        g.add_edge(rng.choice(previous), rng.choice(comp))
        previous.extend(comp)
    return _weighted(g, rng, weights)


def grid_graph(n: int, seed: int, weights: tuple[int, int] = (1, 9)) -> nx.Graph:
    """A rows x cols grid with rows * cols close to ``n`` (rows = floor(sqrt(n)))."""
    rows = max(1, int(n ** 0.5))
    cols = max(1, round(n / rows))
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(rows, cols), ordering="sorted")
    return _weighted(g, random.Random(seed), weights)


def planar_graph(n: int, seed: int, keep: float = 0.7, weights: tuple[int, int] = (1, 9)) -> nx.Graph:
    """A random planar graph: a random stacked triangulation (each new vertex splits a random face),
    then each edge outside a spanning tree kept with probability ``keep``."""
    rng = random.Random(seed)
    g = nx.complete_graph(min(n, 3))
    faces = [(0, 1, 2)] if n >= 3 else []
    for v in range(3, n):
        a, b, c = faces.pop(rng.randrange(len(faces)))
        g.add_edges_from([(v, a), (v, b), (v, c)])
        faces += [(a, b, v), (b, c, v), (a, c, v)]
    tree = set(map(frozenset, nx.minimum_spanning_edges(nx.Graph(
        (u, w, {"weight": rng.random()}) for u, w in sorted(g.edges)), data=False)))
    g.remove_edges_from([(u, w) for u, w in sorted(g.edges) if frozenset((u, w)) not in tree and rng.random() > keep])
    return _weighted(g, rng, weights)


def tree_graph(n: int, seed: int, weights: tuple[int, int] = (1, 9)) -> nx.Graph:
    """A random recursive tree: vertex v > 0 attaches to a uniformly random earlier vertex."""
    rng = random.Random(seed)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((v, rng.randrange(v)) for v in range(1, n))
    return _weighted(g, rng, weights)


FAMILIES: dict[str, Callable[..., nx.Graph]] = {
    "random": random_graph, "grid": grid_graph, "planar": planar_graph, "tree": tree_graph,
}


def choose_terminals(h: nx.Graph, seed: int, k: int = 3) -> tuple[int, ...]:
    """k distinct terminals drawn uniformly (reproducibly) from the vertices."""
    if h.number_of_nodes() < k:
        raise ValueError(f"a graph with {h.number_of_nodes()} vertices has no {k} distinct terminals")
    return tuple(random.Random(seed).sample(sorted(h.nodes), k))
