"""The dependency graphs the compiler walks (Definition 7.3's D, Definition 7.5's DAG of kernels),
as adjacency dicts in insertion order: what its passes need of a directed graph (successors,
predecessors, in-degrees, topological orders, a cycle), without importing networkx on every
compile (a quarter of a second of a new process).  ``to_networkx`` hands the same graph, with
the same node and edge order, to the solvers, which use networkx's algorithms.

    >>> g = Dag(["a", "b", "c"], [("a", "c"), ("b", "c")])
    >>> g.topological_order(key={"a": 1, "b": 0, "c": 2}.__getitem__), g.find_cycle()
    (['b', 'a', 'c'], None)
    >>> Dag(["a", "b"], [("a", "b"), ("b", "a")]).find_cycle()
    ['a', 'b']
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Iterator

if TYPE_CHECKING:
    import networkx as nx


class Dag:
    """A directed graph; ``nodes`` first, then ``edges`` (self-loops dropped), each kept once in
    the order it first appears, as networkx's ``DiGraph`` keeps them."""

    def __init__(self, nodes: Iterable[Hashable] = (), edges: Iterable[tuple[Hashable, Hashable]] = ()):
        self._succ: dict[Hashable, dict[Hashable, None]] = {}
        self._pred: dict[Hashable, dict[Hashable, None]] = {}
        for n in nodes:
            self.add_node(n)
        for a, b in edges:
            if a != b:
                self.add_node(a)
                self.add_node(b)
                self._succ[a][b] = None
                self._pred[b][a] = None

    def add_node(self, n: Hashable) -> None:
        if n not in self._succ:
            self._succ[n], self._pred[n] = {}, {}

    def __contains__(self, n: Any) -> bool:
        return n in self._succ

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._succ)

    def __len__(self) -> int:
        return len(self._succ)

    @property
    def edges(self) -> list[tuple[Hashable, Hashable]]:
        return [(a, b) for a, succ in self._succ.items() for b in succ]

    def successors(self, n: Hashable) -> Iterator[Hashable]:
        return iter(self._succ[n])

    def predecessors(self, n: Hashable) -> Iterator[Hashable]:
        return iter(self._pred[n])

    def in_degrees(self) -> dict[Hashable, int]:
        return {n: len(pred) for n, pred in self._pred.items()}

    def topological_order(self, key: Callable[[Hashable], Any] | None = None) -> list[Hashable]:
        """A topological order; with ``key``, the one that always takes the ready node of least
        key (networkx's lexicographical_topological_sort).  Raises ValueError on a cycle."""
        position = {n: i for i, n in enumerate(self._succ)}
        rank = key or position.__getitem__
        indegree = self.in_degrees()
        heap = [(rank(n), position[n], n) for n, d in indegree.items() if d == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for s in self._succ[n]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    heapq.heappush(heap, (rank(s), position[s], s))
        if len(order) < len(self._succ):
            raise ValueError(f"the graph has a cycle through {self.find_cycle()}")
        return order

    def find_cycle(self) -> list[Hashable] | None:
        """The nodes of one directed cycle in order, or None when the graph is acyclic."""
        state: dict[Hashable, int] = {}  # 1: on the current path, 2: finished
        for root in self._succ:
            if root in state:
                continue
            path, stack = [root], [iter(self._succ[root])]
            state[root] = 1
            while stack:
                n = next(stack[-1], None)
                if n is None:
                    state[path.pop()] = 2
                    stack.pop()
                elif state.get(n) == 1:
                    return path[path.index(n):]
                elif n not in state:
                    state[n] = 1
                    path.append(n)
                    stack.append(iter(self._succ[n]))
        return None

    def to_networkx(self) -> "nx.DiGraph":
        import networkx as nx  # the solvers' library, imported when a solver asks for it
        g = nx.DiGraph()
        g.add_nodes_from(self._succ)
        g.add_edges_from(self.edges)
        return g
