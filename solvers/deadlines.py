"""Time limits as deadlines: every exact strategy turns its ``time_limit`` into ``time.perf_counter``
times that its phases (building a model, searching, improving) check, so that it returns its best
answer at the limit instead of after it.
"""
from __future__ import annotations

import time


class OutOfTime(Exception):
    """A deadline passed while a model was being built (its solver would have no time left)."""


def check_deadline(deadline: float | None) -> None:
    """Raise ``OutOfTime`` once ``deadline`` (a ``time.perf_counter`` time) has passed."""
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime


#: the part of a time limit (at most 1 s) an exact strategy keeps for joining, pricing and
#: validating its answer after its search stops
FINISH_SHARE = 0.1


def search_deadline(began: float, time_limit: float) -> float:
    """When a strategy started at ``began`` (a perf_counter time) with ``time_limit`` seconds
    stops searching: ``FINISH_SHARE`` of the limit, at most 1 s, before the limit."""
    return began + time_limit - min(FINISH_SHARE * time_limit, 1.0)


def seconds_left(deadline: float) -> float:
    """Seconds until ``deadline`` (a ``time.perf_counter`` time), at least 0."""
    return max(0.0, deadline - time.perf_counter())
