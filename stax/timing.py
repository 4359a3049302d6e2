"""Timing helpers for benchmarks and the CLI (never used by tests to assert speed)."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def time_call(fn: Callable[[], object], repeat: int = 7, min_seconds: float = 0.02) -> float:
    """Median seconds per call over ``repeat`` batches, each batch long enough to time reliably."""
    fn()
    number, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or number >= 1 << 20:
            break
        number *= 2
    samples = [elapsed / number]
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def time_spread(fn: Callable[[], object], repeat: int = 7, min_seconds: float = 0.02) -> tuple[float, float, float]:
    """(min, median, max) seconds per call over ``repeat`` batches."""
    samples = [time_call(fn, repeat=1, min_seconds=min_seconds) for _ in range(repeat)]
    return min(samples), statistics.median(samples), max(samples)
