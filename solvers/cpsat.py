"""What the CP-SAT models of this package share: solver parameters and the status convention.

Status names follow ``stax.scheduler.strategies.STATUSES``: "optimal" when CP-SAT proved the optimum,
"feasible" when time ran out with a solution that is *not* proven optimal, "infeasible" when
CP-SAT proved there is no solution, "unknown" when time ran out with nothing.

Bounds are read in integers: CP-SAT's ``best_objective_bound`` is a double, which carries
rounding error once coefficients are large (buffers of 2^40 bytes gave a bound one above the
proven optimum), so ``integer_bound`` takes the integer ``inner_objective_lower_bound`` of the
response plus the objective's offset instead.  ``Solved.bound_for`` then caps the bound at the
value of the answer actually returned, and makes it equal to that value when it is proven optimal.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}


@dataclass(frozen=True)
class SolverParams:
    """Time limit (seconds), number of search workers and random seed of one CP-SAT run."""

    time_limit: float = 10.0
    workers: int = 2
    seed: int = 0


@dataclass(frozen=True)
class Solved:
    """A finished CP-SAT run: the solver (to read values), its status name and best bound."""

    solver: cp_model.CpSolver
    status: str
    bound: float | None
    seconds: float

    @property
    def has_solution(self) -> bool:
        return self.status in ("optimal", "feasible")

    def bound_for(self, value: int) -> float | None:
        """The bound to report beside an answer of exact ``value``: ``value`` itself when that
        answer is CP-SAT's proven optimum, else the solver's bound, never above ``value``."""
        if self.status == "optimal":
            return float(value)
        return None if self.bound is None else float(min(self.bound, value))


def integer_bound(model: cp_model.CpModel, solver: cp_model.CpSolver) -> int:
    """A valid lower bound on ``model``'s integral objective (a minimization), computed in integers.

    The response's ``inner_objective_lower_bound`` bounds the objective's linear part exactly; the
    constant offset is a double in the model, exact when integral and below 2^53 in magnitude.
    Otherwise the double bound is rounded up only after a margin far larger than its error.
    """
    objective = model.proto.objective
    offset, scale = objective.offset, objective.scaling_factor or 1.0
    if scale == 1.0 and float(offset).is_integer() and abs(offset) < 2 ** 53:
        return solver.response_proto.inner_objective_lower_bound + int(offset)
    raw = solver.best_objective_bound
    return math.ceil(raw - 1e-6 - abs(raw) * 1e-9)


def run(model: cp_model.CpModel, params: SolverParams) -> Solved:
    """Solve ``model`` (a minimization) under ``params``."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = params.time_limit
    solver.parameters.num_workers = params.workers
    solver.parameters.random_seed = params.seed
    start = time.perf_counter()
    code = solver.solve(model)
    seconds = time.perf_counter() - start
    status = _STATUS.get(code, "unknown")
    bound = None if status == "infeasible" else float(integer_bound(model, solver))
    return Solved(solver, status, bound, seconds)
