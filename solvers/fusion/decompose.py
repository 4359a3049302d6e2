"""Exact fusion by regions: split a FusionProblem (Definition 7.3) where the cost is additive.

A *separator* is a node that can share a kernel with no other node (forbidden with every other
node, such as an extern matmul, or touching more than ``max_buffers`` buffers) and that is
comparable with every other node in the dependency DAG.  Separators are pairwise comparable, so
they cut a topological order into *regions*: the nodes strictly between two consecutive
separators, and each separator alone.  Every dependency between regions goes forward (a
descendant of a separator has only descendants of it as successors).

Composition rule.  The least cost is the sum of the regions' least costs (``region_problem``
writes region r as a FusionProblem), and the union of optimal region partitions is optimal.
Proof:

1. *No valid block spans two regions.*  Nodes u and v of different regions lie on opposite
   sides of some separator x: u is an ancestor of x and v a descendant.  A block holding u and v
   (x is never in it) has quotient paths to {x} and back, a cycle, so it is not valid.
2. *Legality is per region.*  A partition's quotient can only have a cycle inside one region:
   along a cycle the region index never decreases (dependencies between regions go forward), so
   it is constant, and the cycle uses only edges between nodes of that region, i.e. edges of the
   region problem's DAG.  Forbidden pairs and kernel limits concern one block, hence one region
   (a region problem keeps every buffer its nodes touch, so a block touches as many buffers).
3. *Cost is additive.*  Definition 7.3 charges a produced buffer one write when it is an output
   or read outside its producer's block, plus one read per distinct reader block other than the
   producer's; a graph input one read per distinct reader block.  Region problems charge the
   same: in the producer's region the buffer is an output exactly when it is an output or has a
   user in another region (then it is always read outside its block), else the write depends on
   the region's blocks alone; in every region its users there form a graph input of that
   region, read once per distinct block, which counts the distinct reader blocks in that region.
   Reader blocks in different regions are different blocks, so the sums over regions are the
   original counts.

Pieces refine regions.  Call nodes *sharing* when they touch a common buffer (as producer or
user) or are joined by an extra edge, and a pair *compatible* when neither is a loner, no pair
among them and the nodes between them (on a dependency path from one to the other) is
forbidden, and no loner lies between them.  The *pieces* are found in two steps: join
compatible sharing pairs into components, then merge components that lie on a cycle of the
graph of dependencies between components (its strongly connected components).

1. *Some optimal partition has every block inside a piece.*  Split a valid block B into the
   connected parts of its sharing graph.  The cost does not change: every buffer is touched by
   one part only, so its writes and its distinct reader blocks count alike.  The partition stays
   valid: no dependency joins two parts (a dependency is a shared buffer or an extra edge), so a
   new quotient cycle would leave B and re-enter it through other blocks, a cycle before the
   split.  In a valid block every two nodes are compatible: the nodes between them are in the
   block too (else the quotient has a cycle through the block of the one outside), and a block
   holds no forbidden pair and no loner with another node.  So a connected block lies in one
   component.
2. *The regions' proof holds for pieces*: dependencies between pieces form a DAG (components on
   a cycle were merged), so along a quotient cycle the piece is constant, which gives item 2,
   and item 3 never used the order of regions.  ``region_problem`` writes a piece as it writes a
   region (``piece_problems``: all of them), and the fusion strategy "cpsat"
   (``fusion_cpsat.CpSatFusion``) solves pieces.

``tests/solvers/test_fusion_regions.py`` checks the additivity on random partitions, the split of item 1
and the decomposed optimum against undecomposed CP-SAT and brute force on hundreds of seeded graphs.
"""
from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem

from solvers.fusion.index import NodeIndex
from solvers.order.decompose import Closure


def loners(problem: FusionProblem, position: dict[str, int], masks: list[int]) -> set[str]:
    """Nodes that can share a kernel with no other node; ``masks``: the problem's forbidden
    masks over ``position`` (``NodeIndex.forbidden_masks``)."""
    n, touches = len(problem.nodes), NodeIndex(problem).touches
    return {v for v in problem.nodes if (masks[position[v]] & ~(1 << position[v])).bit_count() >= n - 1
            or len(touches[v]) > problem.max_buffers}


def regions(problem: FusionProblem) -> list[tuple[str, ...]]:
    """The regions of the module doc, in a topological order (separators as regions of one node)."""
    closure = Closure.of(problem)  # uses only ``dependencies()``, which a FusionProblem has too
    alone = loners(problem, closure.index, NodeIndex(problem).forbidden_masks(closure.index))
    found, start = [], 0
    for c in closure.cut_tasks():
        if closure.tasks[c] in alone:
            found += [closure.tasks[start:c], (closure.tasks[c],)]
            start = c + 1
    found.append(closure.tasks[start:])
    return [r for r in found if r]


def pieces(problem: FusionProblem) -> list[tuple[str, ...]]:
    """The pieces of the module doc, each in the problem's node order, pieces in a topological order."""
    closure = Closure.of(problem)
    index, n = closure.index, len(closure.tasks)
    forbidden = NodeIndex(problem).forbidden_masks(index)
    alone = sum(1 << index[v] for v in loners(problem, index, forbidden))
    sharing = {tuple(sorted((index[a], index[b]))) for a, b in problem.extra_edges}
    for buf in problem.buffers:
        touch = sorted({index[v] for v in (buf.producer, *buf.users) if v is not None})
        sharing.update((a, b) for k, a in enumerate(touch) for b in touch[k + 1:])
    component = list(range(n))

    def find(x: int) -> int:
        while component[x] != x:
            component[x] = x = component[component[x]]
        return x

    for u, v in sharing:
        if not (alone >> u & 1 or alone >> v & 1) and compatible(closure, forbidden, alone, u, v):
            component[find(u)] = find(v)
    between = nx.DiGraph()
    between.add_nodes_from(find(i) for i in range(n))
    between.add_edges_from((find(index[a]), find(index[b])) for a, b in problem.dependencies().edges)
    between.remove_edges_from(nx.selfloop_edges(between))
    merged = nx.condensation(between)
    piece_of = {c: merged.graph["mapping"][c] for c in between}
    rank = {p: k for k, p in enumerate(nx.topological_sort(merged))}
    found: list[list[str]] = [[] for _ in rank]
    for v in problem.nodes:
        found[rank[piece_of[find(index[v])]]].append(v)
    return [tuple(p) for p in found if p]


class Compatibility:
    """``Compatibility(problem)(a, b)``: nodes a and b are compatible (module doc), so some valid
    block may hold both; the closure and masks are built once for every pair asked."""

    def __init__(self, problem: FusionProblem):
        self.closure = Closure.of(problem)
        self.forbidden = NodeIndex(problem).forbidden_masks(self.closure.index)
        self.alone = sum(1 << self.closure.index[v] for v in loners(problem, self.closure.index, self.forbidden))

    def __call__(self, a: str, b: str) -> bool:
        u, v = self.closure.index[a], self.closure.index[b]
        return not (self.alone >> u & 1 or self.alone >> v & 1) and compatible(
            self.closure, self.forbidden, self.alone, u, v)


def compatible(closure: Closure, forbidden: list[int], alone: int, u: int, v: int) -> bool:
    """Neither a loner nor a forbidden pair among u, v and the nodes between them (module doc)."""
    if forbidden[u] >> v & 1:
        return False
    inside = (closure.descendants[u] & closure.ancestors[v]) | (closure.descendants[v] & closure.ancestors[u])
    if inside & alone:
        return False
    everyone, bits = inside | 1 << u | 1 << v, inside | 1 << u | 1 << v
    while bits:
        low = bits & -bits
        bits ^= low
        if forbidden[low.bit_length() - 1] & everyone:
            return False
    return True


def region_problem(problem: FusionProblem, region: tuple[str, ...],
                   forbidden: tuple[ForbiddenPair, ...] | None = None,
                   touching: Sequence[Buffer] | None = None) -> FusionProblem:
    """Region ``region`` as a FusionProblem (module doc, item 3); ``forbidden`` and ``touching``,
    when given, are the problem's forbidden pairs inside the region and the buffers its nodes
    touch (found once for many regions)."""
    inside = set(region)
    buffers = []
    for buf in problem.buffers if touching is None else touching:
        users = tuple(u for u in buf.users if u in inside)
        if buf.producer in inside:
            buffers.append(Buffer(buf.name, buf.size, buf.producer, users,
                                  buf.is_output or len(users) < len(buf.users)))
        elif users:
            buffers.append(Buffer(buf.name, buf.size, None, users))
    return FusionProblem(
        nodes=tuple(v for v in problem.nodes if v in inside), buffers=tuple(buffers),
        forbidden=tuple(p for p in problem.forbidden if p.a in inside and p.b in inside) if forbidden is None else forbidden,
        extra_edges=tuple((a, b) for a, b in problem.extra_edges if a in inside and b in inside),
        max_nodes=problem.max_nodes, max_buffers=problem.max_buffers,
        node_info={v: problem.node_info[v] for v in region if v in problem.node_info}, name=f"{problem.name}[region]")


def piece_problems(problem: FusionProblem) -> list[FusionProblem]:
    """Every piece as a FusionProblem (``region_problem``), the forbidden pairs sorted into pieces once."""
    parts = pieces(problem)
    piece_of = {v: k for k, part in enumerate(parts) for v in part}
    inside: list[list[ForbiddenPair]] = [[] for _ in parts]
    for pair in problem.forbidden:
        if piece_of[pair.a] == piece_of[pair.b]:
            inside[piece_of[pair.a]].append(pair)
    touching: list[list[Buffer]] = [[] for _ in parts]
    for buf in problem.buffers:
        for k in dict.fromkeys(piece_of[v] for v in (buf.producer, *buf.users) if v is not None):
            touching[k].append(buf)
    return [region_problem(problem, part, tuple(pairs), buffers)
            for part, pairs, buffers in zip(parts, inside, touching)]
