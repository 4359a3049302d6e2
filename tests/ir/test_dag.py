"""The compiler's own dependency graph (stax/ir/dag.py) against networkx on random directed graphs:
the same nodes, edges and neighbour orders, networkx's lexicographic topological order, and a
cycle exactly when networkx finds one."""
from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stax.ir.dag import Dag

EDGES = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=20)


@settings(max_examples=300, deadline=None)
@given(nodes=st.permutations(range(8)), edges=EDGES, keys=st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_the_graph_agrees_with_networkx(nodes, edges, keys):
    dag = Dag(nodes, edges)
    reference = nx.DiGraph()
    reference.add_nodes_from(nodes)
    reference.add_edges_from((a, b) for a, b in edges if a != b)
    assert list(dag) == list(reference) and dag.edges == list(reference.edges)
    assert list(dag.to_networkx().edges) == list(reference.edges)
    for n in nodes:
        assert list(dag.successors(n)) == list(reference.successors(n))
        assert list(dag.predecessors(n)) == list(reference.predecessors(n))
    assert dag.in_degrees() == dict(reference.in_degree)
    cycle = dag.find_cycle()
    if nx.is_directed_acyclic_graph(reference):
        assert cycle is None
        key = keys.__getitem__
        assert dag.topological_order(key) == list(nx.lexicographical_topological_sort(reference, key=key))
    else:
        assert cycle and all(reference.has_edge(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1]))
        with pytest.raises(ValueError, match="cycle"):
            dag.topological_order()
