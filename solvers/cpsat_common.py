"""What the CP-SAT models of this package share: solver parameters and the status convention.

Status names follow ``stax.strategy.STATUSES``: "optimal" when CP-SAT proved the optimum,
"feasible" when time ran out with a solution that is *not* proven optimal, "infeasible" when
CP-SAT proved there is no solution, "unknown" when time ran out with nothing.  The models'
objectives are integral, so the best bound is reported rounded up to an integer.
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
    # Every objective here has integer coefficients, so the bound rounds up to an integer.
    bound = None if status == "infeasible" else float(math.ceil(solver.best_objective_bound - 1e-6))
    return Solved(solver, status, bound, seconds)
