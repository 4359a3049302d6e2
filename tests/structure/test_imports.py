"""No import cycle anywhere in stax, solvers, instances and experiments: not at module level,
not through an import inside a function, not under ``TYPE_CHECKING``."""
from __future__ import annotations

import networkx as nx


def test_no_import_cycle(import_graph: nx.DiGraph):
    cycles = []
    for component in nx.strongly_connected_components(import_graph):
        if len(component) > 1:
            cycle = nx.find_cycle(import_graph.subgraph(component))
            cycles.append(" -> ".join(f"{a} (line {import_graph.edges[a, b]['line']})" for a, b in cycle)
                          + f" -> {cycle[0][0]}")
    assert sorted(cycles) == []
