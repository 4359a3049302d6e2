"""Run a sweep: every cell of a config, in parallel processes or on a Dask cluster, resumably.

    run_sweep(load_config("sweep.toml"), "results/sweep", workers=2)

Finished cells (``OUT/cells``) are skipped, so a rerun — or a run after an interrupt — does
only what is missing.  Each cell runs in its own process with a hard time limit
(``cell_timeout``); a cell that fails or times out becomes a row with its status and error and
is retried by the next run.  With ``raise_errors`` cells run one by one in this process and the
first failure propagates (for debugging).  With ``scheduler`` (a Dask scheduler address) cells
run on that cluster; Dask is imported only then.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from tqdm import tqdm

from . import provenance, sweep_status
from .cells import Cell, plan
from .config import SweepConfig
from .isolate import call_with_limit
from .measure import run_cell
from .results import ResultDir


@dataclass
class SweepSummary:
    table: pd.DataFrame
    out: Path
    cells: int
    skipped: int
    failed: int


def execute(cell: Cell, cache_dir: str | None, in_process: bool = False) -> dict[str, Any]:
    """The full row of ``cell``: identity, metrics, status, error and provenance.

    Runs wherever the cell runs (this process, a local worker thread, a Dask worker)."""
    start = time.perf_counter()
    if in_process:
        status, value = "ok", run_cell(cell, cache_dir)
    else:
        status, value = call_with_limit(run_cell, (cell, cache_dir), cell.timeout)
    metrics, error = (value, None) if status == "ok" else ({}, value)
    return {**cell.identity(), **metrics, "status": status, "error": error,
            "cell_seconds": time.perf_counter() - start, **provenance.settings(cell), **provenance.git(),
            **provenance.environment(), "date": provenance.now()}


def _local(cells: list[Cell], cache_dir: str, workers: int) -> Iterator[dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=workers) as pool:  # threads only wait for the cell processes
        futures = [pool.submit(execute, cell, cache_dir) for cell in cells]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def _dask(cells: list[Cell], cache_dir: str, address: str) -> Iterator[dict[str, Any]]:
    try:
        from dask.distributed import Client, as_completed as dask_completed
    except ImportError as exc:
        raise RuntimeError("--scheduler needs Dask: pip install 'dask[distributed]'") from exc
    with Client(address) as client:
        futures = [client.submit(execute, cell, cache_dir, key=f"cell-{cell.key}", pure=False) for cell in cells]
        try:
            for future in dask_completed(futures):
                yield future.result()
        finally:
            client.cancel(futures)


def _in_process(cells: list[Cell], cache_dir: str) -> Iterator[dict[str, Any]]:
    for cell in cells:
        yield execute(cell, cache_dir, in_process=True)


def run_sweep(config: SweepConfig, out: str | Path, workers: int = 1, scheduler: str | None = None,
              raise_errors: bool = False, echo: Callable[[str], None] = print,
              progress: bool = True, keep_stale: bool = False) -> SweepSummary:
    """Run the cells of ``config`` not yet done in ``out``; write and return the results table.
    Cells done by other code or settings are redone, or with ``keep_stale`` reused."""
    results = ResultDir(out)
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
    if raise_errors:
        rows = _in_process(pending, str(results.refs))
    elif scheduler:
        rows = _dask(pending, str(results.refs), scheduler)
    else:
        rows = _local(pending, str(results.refs), workers)
    failed = 0
    with tqdm(total=len(cells), initial=len(cells) - len(pending), unit="cell", desc=config.name,
              disable=not progress) as bar:
        for row in rows:
            results.record(row)
            failed += row["status"] != "ok"
            bar.update(1)
            bar.set_postfix(failed=failed)
    table = results.write_table([c.key for c in cells])
    return SweepSummary(table, results.out, len(cells), len(cells) - len(pending), failed)
