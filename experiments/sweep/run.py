"""Run a sweep: every cell of a config, in parallel processes or on a Dask cluster, resumably.

    run_sweep(load_config("sweep.toml"), "results/sweep", workers=2)

Finished cells (``OUT/cells``) are skipped, so a rerun — or a run after an interrupt, a lost
Dask worker or scheduler — does only what is missing.  Each cell runs in its own process with
a hard time limit (``cell_timeout``, :mod:`.isolate`); a cell that fails or times out becomes a
row with its status and error and is retried by the next run.  A cell that times kernels runs
alone on its machine (:mod:`.machine_lock`) and its row names that machine (``timed_on``).

References are solved once per problem content and reference settings for the whole sweep:
a finished cell hands this process the references it needs (:class:`.measure.ReferenceTask`);
a key not yet solved (``OUT/refs``) becomes one more task, ahead of the remaining cells, and
the rows waiting for it are recorded when it is done.  So every row of a problem carries the
same reference, wherever its cell ran.

With ``raise_errors`` everything runs one by one in this process and the first failure
propagates (for debugging).  With ``scheduler`` (a Dask scheduler address) the tasks run on
that cluster; Dask is imported only then (:mod:`.cluster`).
"""
from __future__ import annotations

import platform
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from tqdm import tqdm

from experiments.sweep import provenance
from experiments.sweep.provenance import version_mismatch, versions
from experiments.sweep import status as sweep_status
from experiments.sweep.cells import Cell, plan
from experiments.sweep.config import SweepConfig
from experiments.sweep.isolate import call_with_limit
from experiments.sweep.machine_lock import machine_share
from experiments.sweep.measure import ReferenceTask, complete, run_cell, solve_reference, unsolved_reference
from experiments.sweep.results import ResultDir


@dataclass
class SweepSummary:
    table: pd.DataFrame
    out: Path
    cells: int
    skipped: int
    failed: int


def times_kernels(cell: Cell) -> bool:
    return cell.kind == "program" and "kernel_time" in cell.measures


def row_of(cell: Cell, status: str, metrics: dict[str, Any], error: str | None, seconds: float) -> dict[str, Any]:
    """The full row of ``cell``: identity, metrics, status, error and provenance."""
    timed = status == "ok" and times_kernels(cell)
    return {**cell.identity(), **metrics, "status": status, "error": error, "cell_seconds": seconds,
            "timed_on": platform.node() if timed else None, **provenance.settings(cell), **provenance.git(),
            **provenance.environment(), "date": provenance.now()}


def execute(cell: Cell, expected: dict[str, str],
            isolated: bool = True) -> tuple[dict[str, Any], dict[str, ReferenceTask]]:
    """Run ``cell`` wherever it is sent (this process, a local worker thread, a Dask worker):
    its row, and the references the row still needs."""
    mismatch = version_mismatch(expected)
    if mismatch:
        return row_of(cell, "error", {}, mismatch, 0.0), {}
    with machine_share(exclusive=times_kernels(cell)):
        start = time.perf_counter()  # the cell's own time, not its wait for the machine
        if isolated:
            status, value = call_with_limit(run_cell, (cell,), cell.timeout)
        else:
            status, value = "ok", run_cell(cell)
    (metrics, needs), error = (value, None) if status == "ok" else (({}, {}), value)
    return row_of(cell, status, metrics, error, time.perf_counter() - start), needs


def reference(task: ReferenceTask, seconds: float, isolated: bool = True) -> dict[str, Any]:
    """Solve one reference under the cells' time limit (:func:`.measure.solve_reference`)."""
    with machine_share(exclusive=False):
        if not isolated:
            return solve_reference(task)
        status, value = call_with_limit(solve_reference, (task,), seconds)
    return value if status == "ok" else unsolved_reference(task, f"{status}: {str(value).strip().splitlines()[-1]}")


class LocalTasks:
    """Tasks on ``workers`` threads that each wait for a cell process; urgent ones go first."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.queue: deque = deque()
        self.running: dict = {}

    def submit(self, tag: Any, fn: Callable, *args: Any, urgent: bool = False) -> None:
        (self.queue.appendleft if urgent else self.queue.append)((tag, fn, args))

    def completed(self) -> Iterator[tuple[Any, Any, str | None]]:
        """(tag, value, None) of every task as it finishes, including tasks submitted meanwhile, or
        (tag, None, traceback) of one that raised."""
        while True:
            while self.queue and len(self.running) < self.workers:
                tag, fn, args = self.queue.popleft()
                self.running[self.pool.submit(fn, *args)] = tag
            if not self.running:
                return
            done, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for future in done:
                tag, error = self.running.pop(future), future.exception()
                if error is None:
                    yield tag, future.result(), None
                else:  # e.g. no cell process could be started: the cell's row says why
                    yield tag, None, "".join(traceback.format_exception(error))

    def close(self) -> None:
        self.queue.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)


class InProcessTasks(LocalTasks):
    """Tasks run one by one in this process (``raise_errors``)."""

    def __init__(self) -> None:
        super().__init__(1)

    def completed(self) -> Iterator[tuple[Any, Any, str | None]]:
        while self.queue:
            tag, fn, args = self.queue.popleft()
            yield tag, fn(*args), None


def drive(tasks: LocalTasks, cells: list[Cell], results: ResultDir, isolated: bool) -> Iterator[dict[str, Any]]:
    """Run ``cells`` and their references on ``tasks``; yield each row once it is complete."""
    expected = versions()
    refs = results.references()
    waiting: dict[str, list[tuple[dict, dict]]] = {}  # reference key -> rows that need it
    for cell in cells:
        tasks.submit(cell, execute, cell, expected, isolated)
    for tag, value, failure in tasks.completed():
        if isinstance(tag, Cell):
            row, needs = value if failure is None else (row_of(tag, "error", {}, failure, 0.0), {})
            missing = {task.key: task for task in needs.values() if task.key not in refs}
            for key, task in missing.items():
                if key not in waiting:
                    waiting[key] = []
                    tasks.submit(task, reference, task, tag.timeout, isolated, urgent=True)
                waiting[key].append((row, needs))
            if not missing:
                yield complete(row, needs, refs)
        else:
            refs[tag.key] = value if failure is None else unsolved_reference(tag, failure)
            results.record_reference(tag.key, refs[tag.key])
            for row, needs in waiting.pop(tag.key):
                if all(task.key in refs for task in needs.values()):
                    yield complete(row, needs, refs)


def run_sweep(config: SweepConfig, out: str | Path, workers: int = 1, scheduler: str | None = None,
              raise_errors: bool = False, echo: Callable[[str], None] = print,
              progress: bool = True, keep_stale: bool = False) -> SweepSummary:
    """Run the cells of ``config`` not yet done in ``out``; write and return the results table.
    Cells done by other code or settings are redone, or with ``keep_stale`` reused."""
    results = ResultDir(out)  # first: an unwritable directory fails before a cluster is joined
    if scheduler:  # then a cluster that cannot be used fails before the sweep is planned
        from experiments.sweep.cluster import DaskTasks, insecure
        warning = insecure(scheduler)
        if warning:
            echo(warning)
        tasks = DaskTasks(scheduler)
    else:
        tasks = InProcessTasks() if raise_errors else LocalTasks(workers)
    provenance.keep_config(config, results.out)
    cells = plan(config, provenance.code_version())
    done = results.done()
    stale = sweep_status.stale_cells(cells, results.cells, done)
    if stale:
        echo(sweep_status.explain(stale, keep_stale))
    for row in sweep_status.reuse(stale) if keep_stale else ():
        results.record(row)
        done.add(row["cell"])
    pending = [c for c in cells if c.key not in done]
    where = f"Dask at {scheduler}" if scheduler else "this process" if raise_errors else f"{workers} processes"
    echo(f"sweep {config.name!r}: {len(cells)} cells, {len(cells) - len(pending)} already done, "
         f"{len(pending)} to run on {where}; results in {results.out}")
    failed = 0
    try:
        with tqdm(total=len(cells), initial=len(cells) - len(pending), unit="cell", desc=config.name,
                  disable=not progress) as bar:
            for row in drive(tasks, pending, results, isolated=not raise_errors):
                results.record(row)
                failed += row["status"] != "ok"
                bar.update(1)
                bar.set_postfix(failed=failed)
    finally:
        tasks.close()
    table = results.write_table([c.key for c in cells])
    return SweepSummary(table, results.out, len(cells), len(cells) - len(pending), failed)
