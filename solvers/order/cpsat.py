"""Order strategy "cpsat": the topological order of least peak memory (Definition 7.5), by the
down-set programme's bounded search with CP-SAT (``model.OrderModel``) on the segments it cannot
finish, or by the CP-SAT model alone."""
from __future__ import annotations

import time
from dataclasses import replace

from stax.scheduler.problems import OrderProblem
from stax.scheduler.strategies import OrderInfo, OrderResult, Status

from solvers.cpsat import SolverParams, run
from solvers.order.dp import bounded_order
from solvers.order.model import OrderModel, step_lower_bound
from solvers.warm_start import heuristic_order


class CpSatOrder:
    """Order strategy "cpsat": the order of least peak (Definition 7.5).

    By default it runs the down-set programme's bounded search (``dp.bounded_order``: the
    best heuristic order improved window by window, cut bounds, the programme on every series
    segment that can set the peak) and gives CP-SAT (this module's model, hinted with the best
    order so far) the segments the programme cannot finish, all within ``time_limit``: its answer
    is never worse than strategy "dp"'s in the same time.  ``decompose=False`` runs the model
    alone on the whole problem, started from the best heuristic order of section 7.5 ("best")
    when ``warm_start``.

    ``status`` is "optimal" only when proven; "feasible" means the time limit ran out with an
    order that is *not* proven optimal (``bound`` a certified lower bound: CP-SAT's, the
    programme's, the cut bounds or ``step_lower_bound``).  The undecomposed model returns the
    heuristic order if CP-SAT finds nothing in time.
    """

    name = "cpsat"

    def __init__(self, time_limit: float = 10.0, workers: int = 2, warm_start: bool = True, seed: int = 0,
                 decompose: bool = True):
        self.params = SolverParams(time_limit, workers, seed)
        self.warm_start, self.decompose = warm_start, decompose

    def solve(self, problem: OrderProblem) -> OrderResult:
        if self.decompose:
            return bounded_order(problem, time_limit=self.params.time_limit, cpsat_workers=self.params.workers)
        began = time.perf_counter()
        start = heuristic_order(problem)
        model = OrderModel(problem)
        if self.warm_start:
            model.hint(start)
        solved = run(model.model, replace(self.params, time_limit=max(0.01, self.params.time_limit
                                                                      - (time.perf_counter() - began))))
        stats = {"warm_start": self.warm_start, "solver_seconds": solved.seconds}
        note = ""
        if solved.has_solution:
            order, status = model.decode(solved.solver), Status(solved.status)
        else:
            order, status = start, Status.FEASIBLE
            note = (f"CP-SAT ended with status {solved.status} within {self.params.time_limit} s; "
                    "the best heuristic order is returned")
        peak = problem.peak(order)
        bound = solved.bound_for(peak)
        bound = float(max(bound or 0, min(step_lower_bound(problem), peak)))
        return OrderResult(order, status, peak, bound, time.perf_counter() - began, OrderInfo(note=note, stats=stats))
