"""The exact traffic-peak Pareto front (``solvers.pareto``, Definitions 7.3 and 7.5) composed
from the regions of ``solvers.fusion.decompose``, so that it reaches whole-model graphs.

Every order of a valid partition's kernels runs the regions one after another (a separator is
comparable with every node, and no valid block spans two regions).  At a step of region k the
live buffers are: those produced in k (``region_problem`` marks the ones used after k as
outputs, live to k's end); those produced before k whose last user is in k (*carried*: live
from k's start to that user); and those produced before k and used after it, or outputs
(*through*: live all along k, a constant).  So a partition's least peak is the largest of its
regions' least peaks, each region's front counted with its carried and through bytes, and its
traffic is the sum of its regions' (``fusion_decompose``, item 3).  Hence, for a peak cap P, the
least traffic of the whole is the sum over regions of each region's least traffic with peak at
most P: the whole front is composed from the regions' fronts at every peak some region's front
has, and it is exact (proven) when every region's front is.
"""
from __future__ import annotations

from stax.scheduler.problems import FusionProblem

from solvers.fusion.decompose import region_problem, regions
from solvers.pareto import ParetoFront, ParetoPoint, pareto_front


def region_lives(problem: FusionProblem, parts: list[tuple[str, ...]]) -> tuple[list[frozenset[str]], list[int]]:
    """Per region: the names of its carried buffers, and its through bytes (module doc)."""
    where = {v: k for k, part in enumerate(parts) for v in part}
    carried: list[set[str]] = [set() for _ in parts]
    through = [0] * len(parts)
    for buf in problem.buffers:
        if buf.producer is None:  # graph inputs are never allocated (kernel_order_problem)
            continue
        home = where[buf.producer]
        last = len(parts) - 1 if buf.is_output else max((where[u] for u in buf.users), default=home)
        for k in range(home + 1, last + 1):
            if k == last and not buf.is_output:
                carried[k].add(buf.name)
            else:
                through[k] += buf.size
    return [frozenset(c) for c in carried], through


def regional_pareto_front(problem: FusionProblem, time_limit: float = 10.0, workers: int = 1) -> ParetoFront:
    """The traffic-peak front of ``problem`` composed from its regions' fronts (module doc);
    ``time_limit`` is per CP-SAT solve.  Points are by increasing traffic; each point's
    partition lists its blocks in the kernel order that attains its peak."""
    parts = regions(problem)
    carried, through = region_lives(problem, parts)
    fronts = []
    for part, inside, constant in zip(parts, carried, through):
        front = pareto_front(region_problem(problem, part), time_limit, workers, inside)
        fronts.append((tuple(ParetoPoint(p.traffic, p.peak + constant, tuple(p.partition[i] for i in p.order),
                                         tuple(range(len(p.order)))) for p in front.points), front.proven))
    proven = all(done for _, done in fronts)
    if any(not points for points, _ in fronts):
        return ParetoFront((), False)
    composed: list[ParetoPoint] = []
    for cap in sorted({p.peak for points, _ in fronts for p in points}):
        chosen = [min((p for p in points if p.peak <= cap), key=lambda p: (p.traffic, p.peak), default=None)
                  for points, _ in fronts]
        if None in chosen:
            continue
        traffic = sum(p.traffic for p in chosen)
        if composed and traffic >= composed[-1].traffic:  # a lower peak already reaches this traffic
            continue
        blocks = tuple(block for p in chosen for block in p.partition)
        composed.append(ParetoPoint(traffic, max(p.peak for p in chosen), blocks, tuple(range(len(blocks)))))
    return ParetoFront(tuple(reversed(composed)), proven)
