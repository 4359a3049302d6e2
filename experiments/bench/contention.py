"""Kernels beside a busy core: every suite program's per-call p50 and p99, quiet and with a
co-runner (a busy loop pinned to one core, at nice 0 and at nice 19), for Stax on one and on two
threads and, when PyTorch is installed, TorchInductor, all in one run, each runtime in a process of
its own.  The goal (timing that
can be trusted) is a loaded median within 1.3x and a loaded p99 within 2x of the quiet
single-thread median, and two threads as fast as before when quiet.  A benchmark, not a test.

    python -m experiments.bench.contention [--sizes 64x128 1024 4096] [--programs softmax ...]
        [--seconds 0.5] [--no-inductor] [--conditions quiet "nice 0" "nice 19"] [--straggler-rule off]

With ``--models gpt2_block resnet_block ...`` (PyTorch needed) it times those zoo models'
training steps (``experiments.models.zoo``) instead of the suite programs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pandas as pd

import stax
from experiments.bench.suite import parse_size
from experiments.models.zoo import ZOO
from stax.runtime import build as runtime
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


#: every runtime timed, each in a process of its own (see ``RuntimeWorkers``)
STAX_RUNTIMES = ("stax 1 thread", "stax 2 threads")
INDUCTOR_RUNTIMES = ("inductor 1 thread", "inductor 2 threads")


def runtime_call(label: str, name: str, arrays: list[np.ndarray]) -> Callable[[], object]:
    """One call of suite program ``name`` under runtime ``label`` ("stax 2 threads", "inductor 1
    thread"): stax's compiled program, or TorchInductor's with torch's intra-op threads set."""
    family, threads = label.split()[0], int(label.split()[1])
    inputs = [a.copy() for a in arrays]  # in-place programs update these; the timing does not care
    if family == "stax":
        compiled = stax.compile(PROGRAMS[name].fn, *inputs, threads=threads)
        return lambda: compiled(*inputs)
    import torch
    torch.set_num_threads(threads)
    program = torch.compile(PROGRAMS[name].fn)
    tensors = [torch.from_numpy(a) for a in inputs]

    def call():
        with torch.no_grad():
            return program(*tensors)
    call()  # compiles
    return call


def model_call(label: str, name: str, small: bool) -> Callable[[], object]:
    """One training step of zoo model ``name`` (its small size for tests) under runtime ``label``:
    stax's compiled step, or TorchInductor's compilation of the same training graph."""
    from experiments.models.inductor_timing import compiled_inductor
    threads = int(label.split()[1])
    program = ZOO[name](small).training()
    if label.startswith("stax"):
        compiled, arguments = program.compile(threads=threads), program.arguments()
        return lambda: compiled(*arguments)
    return compiled_inductor(program, threads)


@dataclass(frozen=True)
class Workload:
    """What a row times: a suite program at a size, or a zoo model's training step (size None)."""

    name: str
    size: tuple[int, int] | None = None
    small: bool = False

    def call(self, label: str) -> Callable[[], object]:
        if self.size is None:
            return model_call(label, self.name, self.small)
        return runtime_call(label, self.name, PROGRAMS[self.name].inputs(self.size[0], columns=self.size[1]))

    def describe(self) -> str:
        return "training step" if self.size is None else "x".join(map(str, self.size))


def time_runtime(label: str, workload: Workload, seconds: float,
                 conditions: tuple[str, ...]) -> tuple[dict[str, Percentiles], dict[str, str]]:
    """``label``'s per-call percentiles in each condition (quiet first), and what stax's pool did
    in each; run in the runtime's own worker process."""
    call = workload.call(label)
    figures, pool = {}, {}
    for condition in conditions:
        with co_runner(condition):
            before = runtime.parallel_stats()
            figures[condition] = per_call({label: call}, seconds)[label]
            pool[condition] = pool_use(before, runtime.parallel_stats())
    return figures, pool


class RuntimeWorkers:
    """A worker process per runtime, kept for the whole run.  One runtime's threads must not take
    the core from another's calls: in one process, libgomp's threads spinning after an Inductor
    call sat on the caller's core whenever the co-runner held the other one, and stax's
    single-thread p99s rose tenfold with them."""

    def __init__(self, labels: tuple[str, ...], straggler_rule: bool):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no parent's threads
        self.pools = {label: ProcessPoolExecutor(1, context, initializer=_set_straggler_rule,
                                                 initargs=(straggler_rule,)) for label in labels}

    def time(self, label: str, *args) -> tuple[dict[str, Percentiles], dict[str, str]]:
        return self.pools[label].submit(time_runtime, label, *args).result()

    def __enter__(self) -> RuntimeWorkers:
        return self

    def __exit__(self, *exc) -> None:
        for pool in self.pools.values():
            pool.shutdown()


def _set_straggler_rule(on: bool) -> None:
    runtime.load_runtime().stax_parallel_test_straggler_rule(int(on))


def measure(workload: Workload, seconds: float, workers: RuntimeWorkers,
            conditions: tuple[str, ...] = CONDITIONS) -> list[dict]:
    """One row per runtime: p50 and p99 per condition in microseconds, and the goal's ratios
    (against the quiet single-thread median; the loaded p99 also against the single-thread p99
    in the same condition, which tells a late thread's cost from the machine's own)."""
    loaded = [c for c in conditions if c != "quiet"] or ["quiet"]
    measured = tuple(dict.fromkeys(("quiet", *loaded)))
    figures, pool = {}, {}
    for label in workers.pools:
        times, pool[label] = workers.time(label, workload, seconds, measured)
        figures |= {(label, condition): f for condition, f in times.items()}
    rows = []
    for label in workers.pools:
        alone = label.rsplit(" ", 2)[0] + " 1 thread"
        single = figures[alone, "quiet"].p50
        row = {"program": workload.name, "size": workload.describe(), "runtime": label}
        for condition in measured:
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
            row["pool"] = "; ".join(f"{condition}: {text}" for condition, text in pool[label].items())
        rows.append(row)
    return rows


def pool_use(before: dict[str, int], after: dict[str, int]) -> str:
    """What the kernels' pool did between two parallel_stats(): regions with a team, the share run
    solo by the straggler rule, stragglers, waits in which the caller lent its core to pool threads,
    and chunks taken back from late threads."""
    regions = (after["pooled"] - before["pooled"]) + (solo := after["solo"] - before["solo"])
    return (f"{regions} regions, {solo / max(regions, 1):.0%} solo, {after['stragglers'] - before['stragglers']} "
            f"stragglers, {after['lent'] - before['lent']} waits lent the core, "
            f"{after['taken_back'] - before['taken_back']} chunks taken back")


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
    parser.add_argument("--models", nargs="+", default=[], choices=list(ZOO), metavar="MODEL",
                        help="time these zoo models' training steps instead of the suite programs (needs torch)")
    parser.add_argument("--small-models", action="store_true", help="the zoo models at their small (test) sizes")
    args = parser.parse_args(argv)
    if args.models and importlib.util.find_spec("torch") is None:
        parser.error("--models needs PyTorch: pip install 'stax[torch]'")
    workloads = [Workload(name, small=args.small_models) for name in args.models] or \
        [Workload(name, size) for size in args.sizes for name in args.programs]
    inductor = not args.no_inductor and importlib.util.find_spec("torch") is not None
    print(f"per-call times in us, each runtime in a process of its own; co-runner: a busy loop on core "
          f"{max(os.sched_getaffinity(0))}; goal: loaded p50 <= {MEDIAN_GOAL}x and p99 <= {P99_GOAL}x the quiet "
          f"single-thread p50; load average before the run {os.getloadavg()[0]:.2f} (other processes make "
          f"'quiet' less so); straggler rule {args.straggler_rule}", flush=True)
    rows = []
    with RuntimeWorkers(STAX_RUNTIMES + INDUCTOR_RUNTIMES * inductor, args.straggler_rule == "on") as workers:
        for workload in workloads:
            new = measure(workload, args.seconds, workers, tuple(args.conditions))
            print_rows(new, header=not rows)
            rows += new
    print_summary(rows)
    print(f"load average after the run {os.getloadavg()[0]:.2f}")
    return rows


def print_summary(rows: list[dict]) -> None:
    """Per runtime: the rows meeting the goal at each size, and each of the goal's two criteria."""
    table = pd.DataFrame(rows)
    for runtime, mine in table.groupby("runtime", sort=False):
        met = mine["goal"] == "met"
        sizes = ", ".join(f"{size} {met[group.index].sum()}/{len(group)}"
                          for size, group in mine.groupby("size", sort=False))
        print(f"{runtime}: goal met on {met.sum()} of {len(mine)} rows ({sizes}); loaded p50 within {MEDIAN_GOAL}x on "
              f"{(mine['worst p50/1t'] <= MEDIAN_GOAL).sum()}, loaded p99 within {P99_GOAL}x on "
              f"{(mine['worst p99/1t'] <= P99_GOAL).sum()}", flush=True)


if __name__ == "__main__":
    main()
