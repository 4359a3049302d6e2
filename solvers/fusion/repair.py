"""Turn a labelling of a FusionProblem's nodes into a valid fusion partition (Definition 7.3).

A labelling that separates every forbidden pair may still have a cyclic quotient graph or blocks
over the kernel limits.  ``repair_labels`` generalizes the "(<=)" half of Theorem 7.1's proof,
where the blocks are numbered and each source x_e joins the smaller-numbered block of its two
users so that every cross-block edge goes from a smaller to a larger number:

1. rank the labels along a topological order of the condensation of their quotient graph
   (labels in one strongly connected component by their first node);
2. push each node down to the smallest rank among itself and its successors (reverse
   topological sweep), so every dependency goes from a rank to an equal or larger rank;
3. list the nodes by (rank, topological position), a topological order, and cut it into
   maximal intervals of one rank that hold no forbidden pair and respect ``max_nodes`` and
   ``max_buffers``.  Blocks that are intervals of a topological order have an acyclic quotient.

An acyclic labelling within the limits comes out unchanged.  ``improve_by_moves`` then moves
single nodes into a neighbouring block while that lowers the cost and keeps the partition valid.
"""
from __future__ import annotations

import time
from typing import Hashable, Mapping

import networkx as nx

from stax.scheduler.problems import FusionProblem, Partition, block_index, quotient_graph

from solvers.fusion.index import NodeIndex


def _label_ranks(problem: FusionProblem, labels: Mapping[str, Hashable], position: Mapping[str, int]) -> dict:
    groups: dict[Hashable, list[str]] = {}
    for n in problem.nodes:
        groups.setdefault(labels[n], []).append(n)
    names = list(groups)
    quotient = quotient_graph(problem.dag(), [groups[g] for g in names])
    condensed = nx.condensation(quotient)
    scc_rank = {c: i for i, c in enumerate(nx.lexicographical_topological_sort(
        condensed, key=lambda c: min(position[n] for i in condensed.nodes[c]["members"] for n in groups[names[i]])))}
    ordered = sorted(range(len(names)), key=lambda i: (scc_rank[condensed.graph["mapping"][i]],
                                                        position[groups[names[i]][0]]))
    return {names[i]: rank for rank, i in enumerate(ordered)}


def repair_labels(problem: FusionProblem, labels: Mapping[str, Hashable], index: NodeIndex | None = None) -> Partition:
    """A partition that passes ``problem.validate``, as close to ``labels`` as steps 1-3 allow
    (``index``: the problem's ``NodeIndex``, when the caller has it)."""
    index = index or NodeIndex(problem)
    dag = problem.dag()
    given = {n: i for i, n in enumerate(problem.nodes)}
    topo = list(nx.lexicographical_topological_sort(dag, key=given.__getitem__))
    position = {n: i for i, n in enumerate(topo)}
    label_rank = _label_ranks(problem, labels, position)
    rank: dict[str, int] = {}
    for n in reversed(topo):
        rank[n] = min([label_rank[labels[n]]] + [rank[s] for s in dag.successors(n)])
    blocks: list[list[str]] = []
    current_rank, members, touched = None, set(), set()
    for n in sorted(topo, key=lambda n: (rank[n], position[n])):
        buffers = touched | index.touches[n]
        if (rank[n] != current_rank or index.partners[n] & members
                or len(members) + 1 > problem.max_nodes or len(buffers) > problem.max_buffers):
            blocks.append([])
            current_rank, members, buffers = rank[n], set(), index.touches[n]
        blocks[-1].append(n)
        members.add(n)
        touched = buffers
    return tuple(tuple(b) for b in blocks)


def _may_join(problem: FusionProblem, block: set[str], node: str, index: NodeIndex) -> bool:
    """Forbidden pairs and kernel limits allow ``node`` to join ``block``."""
    if len(block) + 1 > problem.max_nodes or not index.partners[node].isdisjoint(block):
        return False
    return len(set().union(index.touches[node], *(index.touches[m] for m in block))) <= problem.max_buffers


def improve_by_moves(problem: FusionProblem, partition: Partition, max_passes: int = 10,
                     deadline: float | None = None, index: NodeIndex | None = None) -> Partition:
    """Local search: move one node into the block of a DAG or buffer neighbour when that strictly
    lowers the cost and the partition stays valid (forbidden pairs, limits, acyclic quotient);
    stops at ``deadline`` (a perf_counter time) with the partition reached."""
    index = index or NodeIndex(problem)
    dag = problem.dag()
    neighbours: dict[str, set[str]] = {n: set(dag.predecessors(n)) | set(dag.successors(n)) for n in problem.nodes}
    for buf in problem.buffers:
        for u in buf.users:
            neighbours[u] |= set(buf.users) - {u}
    blocks = [set(b) for b in partition]
    cost = problem.cost(blocks)
    for _ in range(max_passes):
        improved = False
        for node in problem.nodes:
            if deadline is not None and time.perf_counter() > deadline:
                return _in_node_order(problem, blocks)
            block_of = block_index(blocks)
            home = block_of[node]
            for target in sorted({block_of[m] for m in neighbours[node]} - {home}):
                if not _may_join(problem, blocks[target], node, index):
                    continue
                trial = [b - {node} if i == home else b | {node} if i == target else b for i, b in enumerate(blocks)]
                trial = [b for b in trial if b]
                trial_cost = problem.cost(trial)
                if trial_cost < cost and nx.is_directed_acyclic_graph(quotient_graph(dag, [list(b) for b in trial])):
                    blocks, cost, improved = trial, trial_cost, True
                    break
        if not improved:
            break
    return _in_node_order(problem, blocks)


def _in_node_order(problem: FusionProblem, blocks: list[set[str]]) -> Partition:
    return tuple(tuple(n for n in problem.nodes if n in b) for b in blocks)
