"""Timing helpers for benchmarks, the CLI and sweeps (never used by tests to assert speed)."""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence


def _batch(fn: Callable[[], object], number: int) -> float:
    """Seconds per call over ``number`` calls in a row."""
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def _calibrated(fn: Callable[[], object], min_seconds: float) -> tuple[int, float]:
    """Calls per batch (doubled until a batch lasts ``min_seconds``) and that batch's seconds per call."""
    number = 1
    while True:
        per_call = _batch(fn, number)
        if per_call * number >= min_seconds or number >= 1 << 20:
            return number, per_call
        number *= 2


def time_call(fn: Callable[[], object], repeat: int = 7, min_seconds: float = 0.02) -> float:
    """Median seconds per call over ``repeat`` batches, each batch long enough to time reliably."""
    fn()
    number, first = _calibrated(fn, min_seconds)
    return statistics.median([first] + [_batch(fn, number) for _ in range(repeat - 1)])


@dataclass(frozen=True)
class Timing:
    """A timing taken by ``measure``: seconds per call, the spread of the batches it took them
    from, and the conditions it ran under."""
    median: float
    iqr: float          # interquartile range of the batches' seconds per call
    ci_low: float       # the median's 95% confidence interval (order statistics of the batches)
    ci_high: float
    repeats: int        # batches
    number: int         # calls per batch
    threads: int
    isa: str
    load_average: float  # the machine's one-minute load average when the timing started
    noisy: bool         # the interval stayed wider than asked until the time cap
    best: float = math.nan  # the fastest batch's seconds per call

    @property
    def relative_ci(self) -> float:
        """The interval's larger distance from the median, as a fraction of the median."""
        return max(self.median - self.ci_low, self.ci_high - self.median) / self.median if self.median else 0.0


def median_interval(samples: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the order statistics at
    n/2 -+ z sqrt(n)/2 (the binomial count of samples below the median, normally approximated)."""
    ordered = sorted(samples)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    return ordered[max(0, math.floor(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half) - 1)]


def measure(fn: Callable[[], object], threads: int, isa: str, *, min_repeats: int = 7, max_repeats: int = 500,
            rel_ci: float = 0.05, time_cap: float = 0.5, batch_seconds: float = 0.002,
            warmup_seconds: float = 0.02) -> Timing:
    """The timing protocol of sweeps: warm up for ``warmup_seconds``, choose calls per batch so
    that a batch lasts ``batch_seconds``, then time batches until the median's confidence interval
    lies within ``rel_ci`` of it (at least ``min_repeats`` batches) or ``time_cap`` seconds or
    ``max_repeats`` batches have passed; ``noisy`` when the interval stayed wider.  The cap bounds
    what a noisy cell costs a sweep (the main job times 252 cells)."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup_seconds:
        fn()
    number, first = _calibrated(fn, batch_seconds)
    samples = [first]
    deadline = time.perf_counter() + time_cap
    while True:
        samples.append(_batch(fn, number))
        median = statistics.median(samples)
        low, high = median_interval(samples)
        narrow = median - low <= rel_ci * median and high - median <= rel_ci * median
        if len(samples) >= max_repeats or (len(samples) >= min_repeats and (narrow or time.perf_counter() > deadline)):
            break
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return Timing(median, q3 - q1, low, high, len(samples), number, threads, isa, load, not narrow, min(samples))
