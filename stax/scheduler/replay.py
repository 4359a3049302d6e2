"""Replay strategies: the partition or the kernel order of a saved Schedule (``stax.decisions``),
so a cell of an experiment, or a schedule edited by hand, can be rebuilt and re-timed.

``fusion="replay", fusion_params={"schedule": "s.json"}`` takes the saved partition (or
``{"partition": [[...], ...]}`` a given one); ``order="replay"`` takes the saved kernel order
(or ``{"order": [...]}``).  The problem's validator judges the answer as any strategy's; when the
problem is the one the schedule was made for, the saved status and bound are kept.
"""
from __future__ import annotations

from typing import Any, Sequence

from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.decisions import Schedule
from stax.scheduler.strategies import FusionResult, OrderResult, Status


def _saved(kind: str, schedule: str | None, given: Any, given_name: str) -> Schedule | None:
    if (schedule is None) == (given is None):
        raise StaxError(f"the replay {kind} strategy takes either schedule=FILE.json or {given_name}=..., "
                        f"not {'both' if schedule else 'neither'}")
    return Schedule.load(schedule) if schedule is not None else None


class ReplayFusion:
    """The partition of a saved schedule (``schedule``: its JSON file), or ``partition`` itself."""

    name = "replay"

    def __init__(self, schedule: str | None = None, partition: Sequence[Sequence[str]] | None = None):
        self.saved = _saved("fusion", schedule, partition, "partition")
        self.partition = self.saved.partition if self.saved else tuple(tuple(b) for b in partition)

    def solve(self, problem: FusionProblem) -> FusionResult:
        if self.saved is not None and self.saved.fusion_problem == problem:
            return FusionResult(self.partition, self.saved.fusion.status, bound=self.saved.fusion.bound)
        return FusionResult(self.partition, Status.HEURISTIC)


class ReplayOrder:
    """The kernel order of a saved schedule (``schedule``: its JSON file), or ``order`` itself."""

    name = "replay"

    def __init__(self, schedule: str | None = None, order: Sequence[str] | None = None):
        self.saved = _saved("order", schedule, order, "order")
        self.order = self.saved.order.order if self.saved else tuple(order)

    def solve(self, problem: OrderProblem) -> OrderResult:
        if self.saved is not None and self.saved.order_problem == problem:
            return OrderResult(self.order, self.saved.order.status, bound=self.saved.order.bound)
        return OrderResult(self.order, Status.HEURISTIC)
