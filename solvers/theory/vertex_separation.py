"""Vertex separation number vs(H) (= pathwidth), as defined before Proposition 7.4's proof.

For a linear order ``pi = (u_1, ..., u_n)`` of the vertices, ``V_i`` is the set of vertices of
the prefix ``{u_1..u_i}`` that have a neighbour outside it; ``vs(pi) = max_i |V_i|`` and
``vs(H) = min_pi vs(pi)``.  Since ``V_i`` depends only on the prefix as a set, an exact dynamic
programme runs over vertex subsets (``vs_dp``, up to about 20 vertices); ``vs_cpsat`` is a
CP-SAT model for larger graphs.  Both return a ``Separation`` whose ``vs == vs_of_order(H, order)``.

Example::

    >>> import networkx as nx
    >>> vs_dp(nx.cycle_graph(6)).vs, vs_dp(nx.grid_2d_graph(3, 4)).vs
    (2, 3)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import networkx as nx
import numpy as np

Vertex = Hashable


@dataclass(frozen=True)
class Separation:
    """A linear order of the vertices, its vertex separation and whether it is proven minimal."""

    vs: int
    order: tuple[Vertex, ...]
    status: str = "optimal"


def vs_of_order(h: nx.Graph, order: Sequence[Vertex]) -> int:
    """vs(pi): the largest number of prefix vertices that still have a neighbour outside the prefix."""
    if len(order) != h.number_of_nodes() or set(order) != set(h.nodes):
        raise ValueError("order must list every vertex of the graph exactly once")
    position = {v: i for i, v in enumerate(order)}
    # u is in V_i exactly for position[u] <= i < (position of u's last neighbour).
    delta = [0] * (len(order) + 1)
    for u in h:
        last = max((position[w] for w in h[u]), default=-1)
        if last > position[u]:
            delta[position[u]] += 1
            delta[last] -= 1
    width = running = 0
    for d in delta:
        running += d
        width = max(width, running)
    return width


def vs_dp(h: nx.Graph, max_vertices: int = 22) -> Separation:
    """Exact vs(H) by dynamic programming over prefixes S (as bit masks), vectorized by layers.

    ``f(S) = max(|boundary(S)|, min_{v in S} f(S - v))`` where ``boundary(S)`` is the set of
    vertices of S with a neighbour outside S; ``vs(H) = f(U)``.  Time and memory ``O(2^n n)``.
    """
    vertices = list(h.nodes)
    n = len(vertices)
    if n > max_vertices:
        raise ValueError(f"vs_dp enumerates 2^n vertex sets; {n} vertices exceed the limit {max_vertices}; "
                         "use vs_cpsat")
    if n == 0:
        return Separation(0, ())
    index = {v: i for i, v in enumerate(vertices)}
    masks = np.arange(1 << n, dtype=np.int64)
    boundary = np.zeros(1 << n, dtype=np.int16)
    for v in vertices:
        neighbours = sum(1 << index[w] for w in h[v] if w != v)
        inside = (masks >> index[v]) & 1
        boundary += (inside & ((masks & neighbours) != neighbours)).astype(np.int16)
    popcount = np.zeros(1 << n, dtype=np.int8)
    for i in range(n):
        popcount += ((masks >> i) & 1).astype(np.int8)
    f = np.zeros(1 << n, dtype=np.int16)
    for size in range(1, n + 1):
        layer = masks[popcount == size]
        best = np.full(len(layer), np.iinfo(np.int16).max, dtype=np.int16)
        for i in range(n):
            has = ((layer >> i) & 1).astype(bool)
            best[has] = np.minimum(best[has], f[layer[has] & ~(1 << i)])
        f[layer] = np.maximum(boundary[layer], best)
    # Walk back from the full set, removing a last vertex that attains f.
    order, mask = [], (1 << n) - 1
    while mask:
        i = next(i for i in range(n) if mask >> i & 1 and max(boundary[mask], f[mask & ~(1 << i)]) == f[mask])
        order.append(vertices[i])
        mask &= ~(1 << i)
    order.reverse()
    return Separation(int(f[(1 << n) - 1]), tuple(order))


def vs_cpsat(h: nx.Graph, time_limit: float = 30.0) -> Separation:
    """vs(H) by CP-SAT; status "optimal" when proven within the time limit, else "feasible".

    ``y[u, i]``: u is in the prefix of length i+1 (monotone in i, exactly i+1 vertices true);
    ``b[u, i] >= y[u, i] - y[w, i]`` for every edge {u, w}: u is in V_i;
    ``sum_u b[u, i] <= width``, minimize width.
    """
    from ortools.sat.python import cp_model

    vertices = list(h.nodes)
    n = len(vertices)
    if n == 0:
        return Separation(0, ())
    model = cp_model.CpModel()
    y = {(u, i): model.new_bool_var(f"y_{u}_{i}") for u in range(n) for i in range(n)}
    b = {(u, i): model.new_bool_var(f"b_{u}_{i}") for u in range(n) for i in range(n)}
    width = model.new_int_var(0, n, "width")
    index = {v: i for i, v in enumerate(vertices)}
    for i in range(n):
        model.add(sum(y[u, i] for u in range(n)) == i + 1)
        model.add(sum(b[u, i] for u in range(n)) <= width)
        for u in range(n):
            if i + 1 < n:
                model.add_implication(y[u, i], y[u, i + 1])
        for v, w in h.edges:
            for u, x in ((index[v], index[w]), (index[w], index[v])):
                model.add(b[u, i] >= y[u, i] - y[x, i])
    model.minimize(width)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT found no order within {time_limit} s (status {solver.status_name(status)})")
    entry = {u: min(i for i in range(n) if solver.value(y[u, i])) for u in range(n)}
    order = [vertices[u] for u in sorted(range(n), key=entry.__getitem__)]
    return Separation(vs_of_order(h, order), tuple(order), "optimal" if status == cp_model.OPTIMAL else "feasible")
