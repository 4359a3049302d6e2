"""Kernels beside a busy core: every suite program's per-call p50 and p99, quiet and with a
co-runner (a busy loop pinned to one core, at nice 0 and at nice 19), for Stax on one and on two
threads and, when PyTorch is installed, TorchInductor, all in one run.  The goal (timing that
can be trusted) is a loaded median within 1.3x and a loaded p99 within 2x of the quiet
single-thread median, and two threads as fast as before when quiet.  A benchmark, not a test.

    python -m experiments.bench_contention [--sizes 64x128 1024 4096] [--programs softmax ...]
        [--seconds 0.5] [--no-inductor] [--conditions quiet "nice 0" "nice 19"] [--straggler-rule off]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

import stax
from experiments.bench_suite import parse_size
from stax import runtime
from instances.programs import PROGRAMS

#: a median within this factor of the quiet single-thread median, and a p99 within P99_GOAL
MEDIAN_GOAL, P99_GOAL = 1.3, 2.0
CONDITIONS = ("quiet", "nice 0", "nice 19")
_BUSY = """import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
# the level asked for, never above the benchmark's own (inherited): "nice 0" under `nice -n 5` is 5
os.setpriority(os.PRIO_PROCESS, 0, max(int(sys.argv[2]), os.getpriority(os.PRIO_PROCESS, 0)))
print("ready", flush=True)
while True:
    pass
"""


@contextlib.contextmanager
def co_runner(condition: str) -> Iterator[subprocess.Popen | None]:
    """A busy loop on the last core this process may use, at the condition's nice level or this
    process's own when that is lower (none when quiet)."""
    if condition == "quiet":
        yield None
        return
    core = max(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", _BUSY, str(core), condition.split()[1]], stdout=subprocess.PIPE)
    try:
        busy.stdout.readline()  # pinned, at its level, and spinning
        yield busy
    finally:
        busy.kill()
        busy.wait()


@dataclass(frozen=True)
class Percentiles:
    p50: float  # seconds
    p99: float
    calls: int
    times: tuple[float, ...] = ()  # every call's seconds

    def slow(self, limit: float) -> float:
        """The fraction of calls slower than ``limit`` seconds."""
        return sum(t > limit for t in self.times) / max(len(self.times), 1)


def per_call(fns: dict[str, Callable[[], object]], seconds: float, least: int = 20, most: int = 20000,
             block: int = 10) -> dict[str, Percentiles]:
    """Each call timed alone, after a warm-up, for about ``seconds`` per function (``least`` to
    ``most`` calls each); the functions take turns in blocks of ``block`` calls, so a change of
    the machine's load falls on all of them alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {label: [] for label in fns}
    deadline = time.perf_counter() + seconds * len(fns)
    while (n := min(map(len, times.values()))) < most and (n < least or time.perf_counter() < deadline):
        for label, fn in fns.items():
            for _ in range(block):
                start = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - start)
    return {label: Percentiles(*map(float, np.percentile(t, [50, 99])), len(t), tuple(t)) for label, t in times.items()}


def stax_calls(name: str, arrays: list[np.ndarray]) -> dict[str, Callable[[], object]]:
    program = PROGRAMS[name]
    one, two = (stax.compile(program.fn, *arrays, threads=t) for t in (1, 2))
    calls = [a.copy() for a in arrays]  # in-place programs update these; the timing does not care
    return {"stax 1 thread": lambda: one(*calls), "stax 2 threads": lambda: two(*calls)}


def inductor_calls(name: str, arrays: list[np.ndarray]) -> dict[str, Callable[[], object]]:
    """TorchInductor on one and on two threads (torch's intra-op threads), or nothing without torch."""
    try:
        import torch
    except ImportError:
        return {}
    compiled = torch.compile(PROGRAMS[name].fn)
    tensors = [torch.from_numpy(a.copy()) for a in arrays]

    def on(threads: int) -> Callable[[], object]:
        def call():
            torch.set_num_threads(threads)
            with torch.no_grad():
                return compiled(*tensors)
        return call
    with torch.no_grad():
        compiled(*tensors)  # compiles
    return {"inductor 1 thread": on(1), "inductor 2 threads": on(2)}


def measure(name: str, size: tuple[int, int], seconds: float, inductor: bool,
            conditions: tuple[str, ...] = CONDITIONS) -> list[dict]:
    """One row per runtime: p50 and p99 per condition in microseconds, and the goal's ratios
    (against the quiet single-thread median; the loaded p99 also against the single-thread p99
    in the same condition, which tells a late thread's cost from the machine's own)."""
    arrays = PROGRAMS[name].inputs(size[0], columns=size[1])
    calls = stax_calls(name, arrays) | (inductor_calls(name, arrays) if inductor else {})
    loaded = [c for c in conditions if c != "quiet"] or ["quiet"]
    figures, pool = {}, {}
    for condition in dict.fromkeys(("quiet", *loaded)):
        with co_runner(condition):
            before = runtime.parallel_stats()
            for label, f in per_call(calls, seconds).items():
                figures[label, condition] = f
            pool[condition] = pool_use(before, runtime.parallel_stats())
    rows = []
    for label in calls:
        alone = label.rsplit(" ", 2)[0] + " 1 thread"
        single = figures[alone, "quiet"].p50
        row = {"program": name, "size": "x".join(map(str, size)), "runtime": label}
        for condition in dict.fromkeys(("quiet", *loaded)):
            f = figures[label, condition]
            row[f"{condition} p50"], row[f"{condition} p99"] = f.p50 * 1e6, f.p99 * 1e6
        row["worst p99/1t p99"] = max(figures[label, c].p99 / figures[alone, c].p99 for c in loaded)
        # calls beyond the p99 goal, less the single thread's in the same condition: what the
        # extra threads cost, apart from the machine's own interruptions
        row["excess slow %"] = 100 * max(figures[label, c].slow(P99_GOAL * single)
                                         - figures[alone, c].slow(P99_GOAL * single) for c in loaded)
        loaded_figures = [figures[label, c] for c in loaded]
        row["worst p50/1t"] = max(f.p50 for f in loaded_figures) / single
        row["worst p99/1t"] = max(f.p99 for f in loaded_figures) / single
        row["goal"] = "met" if row["worst p50/1t"] <= MEDIAN_GOAL and row["worst p99/1t"] <= P99_GOAL else "missed"
        if label == "stax 2 threads":
            row["pool"] = "; ".join(f"{condition}: {text}" for condition, text in pool.items())
        rows.append(row)
    return rows


def pool_use(before: dict[str, int], after: dict[str, int]) -> str:
    """What the kernels' pool did between two parallel_stats(): regions with a team, the share run
    solo by the straggler rule, stragglers, and chunks taken back from late threads."""
    regions = (after["pooled"] - before["pooled"]) + (solo := after["solo"] - before["solo"])
    return (f"{regions} regions, {solo / max(regions, 1):.0%} solo, {after['stragglers'] - before['stragglers']} "
            f"stragglers, {after['taken_back'] - before['taken_back']} chunks taken back")


def print_rows(rows: list[dict], header: bool) -> None:
    """The rows as a table; the pool's use on a line of its own under its row."""
    columns = [c for c in rows[0] if c != "pool"]
    if header:
        print(" ".join(f"{c:>15s}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:>15.2f}" if isinstance(row[c], float) else f"{row[c]!s:>15s}" for c in columns),
              flush=True)
        if "pool" in row:
            print(f"{'':>15s} pool: {row['pool']}", flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=[(64, 128), (1024, 1024), (4096, 4096)],
                        help="N (n x n) or NxM; default 64x128 1024 4096")
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS), metavar="PROGRAM",
                        help="suite programs (default: all of them)")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per runtime and condition (default 0.5)")
    parser.add_argument("--no-inductor", action="store_true", help="leave out TorchInductor even when torch is here")
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS,
                        help="quiet and co-runner conditions (default: all; quiet is always measured)")
    parser.add_argument("--straggler-rule", choices=("on", "off"), default="on",
                        help="the kernels' pool's straggler rule (default on; off: every region uses the pool)")
    args = parser.parse_args(argv)
    runtime.load_runtime().stax_parallel_test_straggler_rule(int(args.straggler_rule == "on"))
    print(f"per-call times in us; co-runner: a busy loop on core {max(os.sched_getaffinity(0))}; "
          f"goal: loaded p50 <= {MEDIAN_GOAL}x and p99 <= {P99_GOAL}x the quiet single-thread p50; "
          f"load average before the run {os.getloadavg()[0]:.2f} (other processes make 'quiet' less so); "
          f"straggler rule {args.straggler_rule}", flush=True)
    rows = []
    for size in args.sizes:
        for name in args.programs:
            new = measure(name, size, args.seconds, not args.no_inductor, tuple(args.conditions))
            print_rows(new, header=not rows)
            rows += new
    met = sum(r["goal"] == "met" for r in rows)
    print(f"goal met by {met} of {len(rows)} rows; load average after the run {os.getloadavg()[0]:.2f}")
    return rows


if __name__ == "__main__":
    main()
