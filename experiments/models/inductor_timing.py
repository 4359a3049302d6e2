"""Timing stax next to TorchInductor and eager torch on one machine whose load changes: each
runtime compiled for the same thread counts, timed in alternating rounds after a pause, the
stax / Inductor ratio with the 95% interval of its rounds' paired ratios, and the zoo's goal
verdict (used by ``compare_inductor --zoo`` and ``compare_real_zoo``)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from stax.measure.timing import median_interval, time_call
from stax.torch.capture import TorchProgram, require_torch

THREADS = (1, 2)
#: a pause before each timing, longer than the straggler rule's longest solo window (0.2 s): a
#: straggler that what ran before caused (another runtime's threads finishing, the host taking a
#: core) does not send the next runtime's timing solo
SETTLE_SECONDS = 0.25


def compiled_inductor(program: TorchProgram, threads: int) -> Callable[[], Any]:
    """TorchInductor's compilation of the training graph for ``threads`` threads, as a call."""
    torch = require_torch()
    from torch._inductor import config
    config.force_disable_caches = True
    torch.set_num_threads(threads)
    inputs = [torch.from_numpy(a.copy()) for a in program.arguments()[:len(program.example)]]  # the graph's own
    compiled = torch._inductor.compile(program.fx_graph, inputs)
    return lambda: compiled(*inputs)


def alternating_times(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, Any]:
    """The median time of each of ``calls`` (stax, inductor, eager) over ``rounds`` alternating
    rounds, each after a pause of SETTLE_SECONDS; ``ratio`` = the median of the rounds' paired
    stax / Inductor ratios, ``ratio_ci`` its 95% interval, ``steal`` the hypervisor's share of
    the CPU time meanwhile."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    before_steal = _cpu_ticks()
    for _ in range(rounds):
        for name, call in calls.items():
            time.sleep(SETTLE_SECONDS)
            samples[name].append(time_call(call, repeat=3))
    round_ratios = [ours / theirs for ours, theirs in zip(samples["stax"], samples["inductor"])]
    return {**{name: statistics.median(times) for name, times in samples.items()},
            "ratio": statistics.median(round_ratios), "ratio_ci": median_interval(round_ratios),
            "steal": _steal_fraction(before_steal, _cpu_ticks())}


def _cpu_ticks() -> tuple[int, int] | None:
    """The machine's CPU time so far, stolen and in all, in clock ticks (Linux's /proc/stat), or None."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of the CPU time between two readings that the hypervisor gave other machines (a
    virtual machine's noise that no process here causes), NaN where it cannot be read."""
    if before is None or after is None or after[1] <= before[1]:
        return float("nan")
    return (after[0] - before[0]) / (after[1] - before[1])


def goal_verdict(ratio: float, interval: tuple[float, float]) -> str:
    """Whether a row meets the zoo's goal (stax / Inductor at most 1.0), judged by the median
    ratio's 95% interval: "met" when the whole interval is at or under 1.0, "missed" when it is
    all above, "open" when it straddles 1.0 (the median says which side it leans to)."""
    low, high = interval
    if high <= 1.0:
        return "met"
    if low > 1.0:
        return "missed"
    return f"open{'<=' if ratio <= 1.0 else '>'}1"
