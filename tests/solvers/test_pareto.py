"""The exact traffic-peak Pareto front (solvers/pareto.py) against enumeration on tiny instances."""
import random

from instances.dags import fusion_problem, layered_dag, series_parallel_dag
from solvers.brute_force import min_peak, set_partitions
from solvers.pareto import pareto_front
from stax.errors import InvalidScheduleError
from stax.scheduler.problems import Buffer, ForbiddenPair, FusionProblem, kernel_order_problem


def brute_front(problem):
    """Non-dominated (traffic, least kernel-order peak) over every valid partition."""
    points = set()
    for blocks in set_partitions(list(problem.nodes)):
        try:
            problem.validate(blocks)
        except InvalidScheduleError:
            continue
        points.add((problem.cost(blocks), min_peak(kernel_order_problem(problem, blocks))[0]))
    return sorted(p for p in points if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points))


def shared_input(seed: int) -> FusionProblem:
    """Two consumers of one input that may fuse only with each other: fusing them reads the input
    once but holds both their large outputs together (a trade-off), with seeded sizes."""
    rng = random.Random(seed)
    big, small = rng.randint(20, 90), rng.randint(1, 9)
    forbid = [("a", "a2"), ("b", "b2"), ("a", "b2"), ("b", "a2"), ("a2", "b2")]
    return FusionProblem(nodes=("a", "b", "a2", "b2"), buffers=(
        Buffer("in", rng.randint(50, 200), None, ("a", "b")), Buffer("A", big, "a", ("a2",)),
        Buffer("B", big + rng.randint(0, 9), "b", ("b2",)), Buffer("ya", small, "a2", (), True),
        Buffer("yb", small, "b2", (), True)), forbidden=tuple(ForbiddenPair(x, y, "test") for x, y in forbid),
        name=f"shared-input-{seed}")


def instances(count: int):
    for seed in range(count):
        if seed % 4 == 0:
            yield shared_input(seed)
        else:
            g = (layered_dag if seed % 2 else series_parallel_dag)(3 + seed % 4, seed)
            yield fusion_problem(g, seed, forbidden_fraction=0.15)


def test_pareto_front_equals_enumeration():
    fronts_with_tradeoff = 0
    for p in instances(40):
        front = pareto_front(p)
        assert front.proven
        assert [(pt.traffic, pt.peak) for pt in front.points] == brute_front(p), p.name
        for pt in front.points:
            assert p.validate(pt.partition) and p.cost(pt.partition) == pt.traffic
            kernels = kernel_order_problem(p, pt.partition)
            assert kernels.peak([kernels.tasks[i] for i in pt.order]) == pt.peak
        fronts_with_tradeoff += len(front.points) > 1
    assert fronts_with_tradeoff > 0
