"""The exact traffic-peak Pareto front of fusion (Definitions 7.3 and 7.5), by CP-SAT with an
epsilon-constraint on the peak.

Fusing changes peak memory: a fused block's internal buffers are never allocated, but its
external inputs and outputs are live together at its step.  A point is a partition with its
traffic (``FusionProblem.cost``) and its *peak*: the least Definition 7.5 peak over the orders
of its kernels (``kernel_order_problem``).  The front is the set of non-dominated points.

Joint model: the fusion model of ``fusion_cpsat`` already gives every block a distinct position
along a topological order of the quotient; read as kernel steps, positions express every
(partition, kernel order) pair (empty positions hold no more than the next step).  A produced
buffer is allocated exactly when it is written (an output, or a user outside the producer's
block), and is then live from its producer's position to its last user's (the end, for an
output); a cumulative constraint bounds the live bytes by ``peak``.

Epsilon-constraint: with no cap, minimize traffic (c1), then minimize the peak among partitions
of traffic c1 (p1): a front point.  Cap the peak at p1 - 1 and repeat until no partition fits.
Every point is proven when every solve ends "optimal" (``ParetoFront.proven``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from stax.scheduler.problems import FusionProblem, Partition

from solvers.cpsat import SolverParams, run
from solvers.fusion.cpsat import FusionModel, _pair


@dataclass(frozen=True)
class ParetoPoint:
    traffic: int
    peak: int
    partition: Partition
    order: tuple[int, ...]  # block indices of ``partition`` in the kernel order that attains ``peak``


@dataclass(frozen=True)
class ParetoFront:
    points: tuple[ParetoPoint, ...]  # by increasing traffic (and decreasing peak)
    proven: bool


class _JointModel:
    """FusionModel plus the kernels' live bytes under a ``peak`` variable (module doc)."""

    def __init__(self, problem: FusionProblem, carried: frozenset[str] = frozenset()):
        self.fusion = FusionModel(problem)
        model, pos, index = self.fusion.model, self.fusion.pos, self.fusion.index
        last = max(len(problem.nodes) - 1, 0)
        total = sum(b.size for b in problem.buffers if b.producer is not None or b.name in carried)
        self.peak = model.new_int_var(0, total, "peak")
        intervals, demands = [], []
        for buf in problem.buffers:
            if buf.producer is None and buf.name in carried and buf.size:  # live from the start to its last user
                end = model.new_int_var(0, last, f"end_{buf.name}")
                model.add_max_equality(end, [pos[index[u]] for u in buf.users])
                intervals.append(model.new_interval_var(0, end + 1, end + 1, f"life_{buf.name}"))
                demands.append(buf.size)
            if buf.producer is None or buf.size == 0:
                continue
            home = index[buf.producer]
            users = [u for u in dict.fromkeys(index[u] for u in buf.users) if u != home]
            if not users and not buf.is_output:
                continue
            written: cp_model.IntVar | int = 1
            if not buf.is_output and all(_pair(home, u) in self.fusion.same for u in users):
                written = model.new_bool_var(f"alloc_{buf.name}")
                for u in users:  # written when some user is outside the producer's block
                    model.add_bool_or([written, self.fusion.same[_pair(home, u)]])
            end: cp_model.LinearExprT = last
            if not buf.is_output:
                end = model.new_int_var(0, last, f"end_{buf.name}")
                model.add_max_equality(end, [pos[home], *(pos[u] for u in users)])
            length = model.new_int_var(1, last + 1, f"length_{buf.name}")
            presence = written if not isinstance(written, int) else model.new_constant(1)
            intervals.append(model.new_optional_interval_var(pos[home], length, end + 1, presence, f"life_{buf.name}"))
            demands.append(buf.size)
        model.add_cumulative(intervals, demands, self.peak)

    def blocks(self, solver: cp_model.CpSolver) -> tuple[Partition, tuple[int, ...]]:
        problem = self.fusion.problem
        by_position: dict[int, list[str]] = {}
        for v, var in zip(problem.nodes, self.fusion.pos):
            by_position.setdefault(solver.value(var), []).append(v)
        steps = sorted(by_position)
        return tuple(tuple(by_position[s]) for s in steps), tuple(range(len(steps)))


def _solve(problem: FusionProblem, cap: int | None, traffic: int | None, params: SolverParams,
           carried: frozenset[str] = frozenset()):
    joint = _JointModel(problem, carried)
    model = joint.fusion.model
    if cap is not None:
        model.add(joint.peak <= cap)
    if traffic is None:
        model.minimize(joint.fusion.cost)
    else:
        model.add(joint.fusion.cost == traffic)
        model.minimize(joint.peak)
    return joint, run(model, params)


def pareto_front(problem: FusionProblem, time_limit: float = 10.0, workers: int = 1,
                 carried: frozenset[str] = frozenset()) -> ParetoFront:
    """The traffic-peak Pareto front of ``problem`` (module doc); ``time_limit`` is per solve.
    ``carried``: graph inputs that count in the peak, live from the first step to their last
    user (a region's inputs produced in an earlier region, ``pareto_regions``)."""
    params = SolverParams(time_limit, workers, 0)
    points, proven, cap = [], True, None
    while True:
        joint, first = _solve(problem, cap, None, params, carried)
        if first.status == "infeasible":
            break
        if not first.has_solution:
            proven = False
            break
        proven &= first.status == "optimal"
        partition, _ = joint.blocks(first.solver)
        traffic = problem.cost(partition)
        joint, second = _solve(problem, cap, traffic, params, carried)
        if not second.has_solution:
            proven = False
            break
        proven &= second.status == "optimal"
        partition, order = joint.blocks(second.solver)
        peak = int(second.solver.value(joint.peak))
        points.append(ParetoPoint(problem.cost(partition), peak, partition, order))
        cap = peak - 1
    return ParetoFront(tuple(points), proven)
