"""The traffic-peak front composed from regions (solvers.pareto_regions) against the joint model on
the whole problem (solvers.pareto), on seeded chains of random parts joined by separators, with
buffers that cross parts (carried into a later part, or live through one) and outputs."""
from __future__ import annotations

import random
from itertools import combinations

from solvers.fusion.decompose import regions
from solvers.pareto import pareto_front
from solvers.pareto_regions import regional_pareto_front
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, kernel_order_problem


def chained_problem(seed: int, parts: int = 3, size: int = 4) -> FusionProblem:
    """``parts`` random DAGs of ``size`` nodes in series, a separator (fusable with nothing, after
    every node before it and before every node after it) between consecutive ones."""
    rng = random.Random(seed)
    groups = [[f"p{i}_{j}" for j in range(size)] for i in range(parts)]
    nodes, buffers, edges = [], [], []
    for i, group in enumerate(groups):
        nodes += group
        after = [v for g in groups[i + 1:] for v in g]
        for j, v in enumerate(group):
            users = [w for w in group[j + 1:] if rng.random() < 0.45]
            if after and rng.random() < 0.35:
                users.append(rng.choice(after))
            buffers.append(Buffer(f"b_{v}", rng.randrange(1, 9) * 8, v, tuple(users),
                                  is_output=not users or rng.random() < 0.15))
        if i + 1 < parts:
            sep = f"s{i}"
            nodes.append(sep)
            edges += [(v, sep) for v in group] + [(sep, w) for w in groups[i + 1]]
            buffers.append(Buffer(f"b_{sep}", rng.randrange(1, 9) * 8, sep, (groups[i + 1][0],)))
    separators = [v for v in nodes if v.startswith("s")]
    forbidden = [ForbiddenPair(a, b, "separator") for a, b in combinations(nodes, 2) if a in separators or b in separators]
    buffers.append(Buffer("x", 16, None, tuple(groups[0][:2])))  # a graph input: never allocated
    return FusionProblem(nodes=tuple(nodes), buffers=tuple(buffers), forbidden=tuple(forbidden),
                         extra_edges=tuple(edges), name=f"chained/{seed}")


def _attained(problem: FusionProblem, point) -> tuple[int, int]:
    """The traffic and peak a front point's partition and kernel order really have."""
    partition = problem.validate(point.partition)
    kernels = kernel_order_problem(problem, partition)
    return problem.cost(partition), kernels.peak(tuple(kernels.tasks[i] for i in point.order))


def test_the_composed_front_is_the_whole_problems_front():
    multi = 0
    for seed in range(20):
        problem = chained_problem(seed)
        assert len(regions(problem)) == 5
        whole, composed = pareto_front(problem, time_limit=10), regional_pareto_front(problem, time_limit=10)
        assert whole.proven and composed.proven
        assert [(p.traffic, p.peak) for p in composed.points] == [(p.traffic, p.peak) for p in whole.points], seed
        for point in composed.points:
            assert _attained(problem, point) == (point.traffic, point.peak)
        multi += len(whole.points) > 1
    assert multi >= 5  # fronts of more than one point, not only the least-traffic partition
