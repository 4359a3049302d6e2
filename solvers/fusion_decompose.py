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

``tests/test_fusion_regions.py`` checks the additivity on random partitions and the decomposed
optimum against undecomposed CP-SAT and brute force on hundreds of seeded graphs.
"""
from __future__ import annotations

import time

from stax.problems import Buffer, ForbiddenPair, FusionProblem
from stax.strategy import FusionResult, ordered_blocks, run_fusion

from .fusion_bounds import compulsory_traffic
from .order_decompose import Closure


def loners(problem: FusionProblem) -> set[str]:
    """Nodes that can share a kernel with no other node."""
    others = {v: set() for v in problem.nodes}
    for p in problem.forbidden:
        others[p.a].add(p.b)
        others[p.b].add(p.a)
    n = len(problem.nodes)
    return {v for v in problem.nodes if len(others[v] - {v}) >= n - 1
            or len(problem.buffers_of(v)) > problem.max_buffers}


def regions(problem: FusionProblem) -> list[tuple[str, ...]]:
    """The regions of the module doc, in a topological order (separators as regions of one node)."""
    closure = Closure.of(problem)  # uses only ``dependencies()``, which a FusionProblem has too
    alone = loners(problem)
    found, start = [], 0
    for c in closure.cut_tasks():
        if closure.tasks[c] in alone:
            found += [closure.tasks[start:c], (closure.tasks[c],)]
            start = c + 1
    found.append(closure.tasks[start:])
    return [r for r in found if r]


def region_problem(problem: FusionProblem, region: tuple[str, ...]) -> FusionProblem:
    """Region ``region`` as a FusionProblem (module doc, item 3)."""
    inside = set(region)
    buffers = []
    for buf in problem.buffers:
        users = tuple(u for u in buf.users if u in inside)
        if buf.producer in inside:
            buffers.append(Buffer(buf.name, buf.size, buf.producer, users,
                                  buf.is_output or len(users) < len(buf.users)))
        elif users:
            buffers.append(Buffer(buf.name, buf.size, None, users))
    return FusionProblem(
        nodes=tuple(v for v in problem.nodes if v in inside), buffers=tuple(buffers),
        forbidden=tuple(ForbiddenPair(p.a, p.b, p.reason) for p in problem.forbidden if p.a in inside and p.b in inside),
        extra_edges=tuple((a, b) for a, b in problem.extra_edges if a in inside and b in inside),
        max_nodes=problem.max_nodes, max_buffers=problem.max_buffers,
        node_info={v: problem.node_info[v] for v in region if v in problem.node_info}, name=f"{problem.name}[region]")


def regional_fusion(problem: FusionProblem, time_limit: float = 60.0, workers: int = 2) -> FusionResult:
    """CP-SAT on every region of more than one node, sharing ``time_limit``; the bound is the sum
    of the regions' bounds (each at least the region's compulsory traffic), "optimal" when the
    cost reaches it (every region proven, or its answer meeting its bound), else "feasible"."""
    began = time.perf_counter()
    parts = regions(problem)
    blocks, bound, proven = [], 0, True
    for region in sorted(parts, key=len):
        if len(region) == 1:
            blocks.append(region)
            bound += problem_cost_alone(problem, region)
            continue
        sub = region_problem(problem, region)
        left = max(0.1, time_limit - (time.perf_counter() - began))
        result = run_fusion("cpsat", sub, time_limit=left, workers=workers)
        blocks += result.partition
        bound += max(int(result.bound or 0), compulsory_traffic(sub))
        proven &= result.status == "optimal"
    partition = ordered_blocks(problem, blocks)
    cost = problem.cost(partition)
    info = {"regions": len(parts), "largest_region": max(map(len, parts)), "regions_proven": proven}
    return FusionResult(partition, "optimal" if cost == bound else "feasible", cost, float(min(bound, cost)),
                        time.perf_counter() - began, info)


def problem_cost_alone(problem: FusionProblem, region: tuple[str, ...]) -> int:
    """The (forced) cost of a region of one node."""
    return region_problem(problem, region).cost([region])
