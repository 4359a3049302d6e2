"""Improving an order (Definition 7.5) window by window with the exact down-set programme.

Cut an order into prefix, window and suffix, three runs of consecutive steps.  Reordering the
window alone keeps the order topological, and the live bytes at a prefix or suffix step do not
change: a step's live set depends only on the set of tasks run before it (``downsets``), and for
a prefix or suffix step that set is the same.  The window is then an OrderProblem of its own,
``decompose.segment_problem`` with the three runs as the parts (its composition proof uses
only that the parts run one after another), and the least-peak order of that problem gives the
least peak of the window's steps.  ``improve`` repeatedly solves the window around the first step
at the peak and keeps the new window order when its peak is lower: the number of steps at or
above the old peak drops, so it ends.  It lowers the peak or proves no such window can; it
proves nothing about the whole problem (bounds come from ``cut_bound``).
"""
from __future__ import annotations

from collections.abc import Sequence

from stax.errors import StaxError
from stax.scheduler.problems import OrderProblem

from solvers.order.decompose import join, segment_problem
from solvers.order.downsets import least_peak


def solve_window(problem: OrderProblem, order: tuple[str, ...], start: int, stop: int,
                 max_states: int, deadline: float | None) -> tuple[str, ...]:
    """``order`` with steps ``start:stop`` replaced by their least-peak reordering (module doc);
    raises ``StaxError`` when the programme stops at ``max_states`` or ``deadline``."""
    runs = [order[:start], order[start:stop], order[stop:]]
    parts = [run for run in runs if run]
    k = parts.index(runs[1])
    window = segment_problem(problem, parts, k)
    inherited = window.tasks[:len(window.tasks) - len(runs[1])]  # its BEFORE task, if any
    best, _ = least_peak(window, inherited + runs[1], max_states, deadline)
    return order[:start] + join([best], [window]) + order[stop:]


def improve(problem: OrderProblem, order: Sequence[str], width: int = 20, max_states: int = 100_000,
            deadline: float | None = None, rounds: int = 200) -> tuple[str, ...]:
    """``order`` after window improvements of ``width`` steps either side of the peak (module doc),
    until a window cannot lower its peak, the programme stops, or ``rounds`` windows were solved."""
    order = tuple(order)
    for _ in range(rounds):
        live = problem.live_bytes(order)
        if not live:
            break
        peak = max(live)
        step = live.index(peak)
        start, stop = max(0, step - width), min(len(order), step + width + 1)
        try:
            better = solve_window(problem, order, start, stop, max_states, deadline)
        except StaxError:
            break
        if max(problem.live_bytes(better)[start:stop]) >= peak:
            break
        order = better
    return order
