"""Where a sweep's cells stand before it runs: done, stale (done by other code or settings) or
new; why stale cells are stale; reusing them on request (``--keep-stale``); ``--dry-run``'s list.

A finished row is *stale* for a planned cell when it decided the same thing — the same instance
content, strategies with their parameters, dependence rule and file — under another key: the
code of the modules that compute results changed (``code_parts`` names which), or the
measures, reference or timing settings did.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from experiments.textable import text_table

from experiments.sweep import provenance
from experiments.sweep.cells import Cell, content_key, plan
from experiments.sweep.config import SweepConfig

#: the row columns that say what a cell decides (whatever code or settings computed it)
DECISION = ("instance_hash", "fusion_name", "fusion_params", "order_name", "order_params", "dependence", "file")
#: the row columns of the settings that enter a cell's key besides the code (see experiments.sweep.provenance)
SETTINGS = ("measures", "reference_time_limit", "reference_workers", "reference_order", "timing_repeat",
            "timing_threads")


def decision_key(row: dict[str, Any]) -> str:
    return content_key(json.dumps([row.get(c) for c in DECISION], default=str))


@dataclass(frozen=True)
class Stale:
    cell: Cell
    row: dict[str, Any]  # the finished row of the same decision under another key
    reason: str  # "stax changed", "reference settings changed", ...


def finished_rows(cells_dir: Path) -> list[dict[str, Any]]:
    """Every finished row of a results directory's ``cells/`` folder."""
    return [json.loads(p.read_text()) for p in sorted(Path(cells_dir).glob("*.json"))]


def stale_cells(cells: Iterable[Cell], cells_dir: Path, done: set[str]) -> list[Stale]:
    """The planned cells not done whose decision a finished row holds, each with why it is stale."""
    cells = list(cells)
    current = {c.key for c in cells} & done  # rows of planned cells: done, not stale
    by_decision = {decision_key(row): row for row in finished_rows(cells_dir) if row["cell"] not in current}
    stale = []
    for cell in cells:
        row = by_decision.get(decision_key(cell.identity()))
        if cell.key not in done and row is not None:
            stale.append(Stale(cell, row, _reason(row, cell)))
    return stale


def _reason(row: dict[str, Any], cell: Cell) -> str:
    """What differs between a finished row and the cell it would stand for."""
    now = provenance.settings(cell)
    old_parts, parts = json.loads(row.get("code_parts") or "{}"), json.loads(now["code_parts"])
    changed = [part for part in parts if old_parts and old_parts.get(part) != parts[part]]
    if changed:
        return f"{', '.join(changed)} changed"
    if not old_parts and row.get("code_version") != cell.code_version:
        return "the code changed"
    settings = sorted({c.split("_")[0] for c in SETTINGS if c in row and row[c] != now[c]})
    return f"{', '.join(settings)} settings changed" if settings else "the cell's key changed"


def explain(stale: list[Stale], keep: bool) -> str:
    """``"stax changed: 204 cells to redo"``, one line per reason."""
    then = "kept (--keep-stale)" if keep else "to redo (--keep-stale reuses them)"
    return "\n".join(f"{reason}: {count} cells {then}" for reason, count in Counter(s.reason for s in stale).items())


def reuse(stale: list[Stale]) -> list[dict[str, Any]]:
    """Rows for the stale cells made from their old rows: the new cell's identity, the old row's
    metrics and code version, and ``reused_from`` naming the old cell."""
    return [{**s.row, **s.cell.identity(), "code_version": s.row.get("code_version"), "reused_from": s.row["cell"]}
            for s in stale]


def dry_run(cells: list[Cell], done: set[str], stale: list[Stale]) -> str:
    """The list ``stax sweep --dry-run`` prints: every cell and whether it is done, stale or to run."""
    stale_keys = {s.cell.key: s.reason for s in stale}
    rows = [(c.family, c.instance, c.fusion.label, c.order.label, c.dependence,
             "done" if c.key in done else f"stale ({stale_keys[c.key]})" if c.key in stale_keys else "to run")
            for c in cells]
    count = sum(c.key in done for c in cells)
    return (text_table(("family", "instance", "fusion", "order", "dependence", "state"), rows)
            + f"\n{len(cells)} cells: {count} already done, {len(stale_keys)} stale, "
              f"{len(cells) - count - len(stale_keys)} new")


def describe_plan(config: SweepConfig, out: Path) -> str:
    """``--dry-run``: the cells of ``config`` and their state in the results directory ``out``
    (which is read, never created)."""
    cells = plan(config, provenance.code_version())
    cells_dir = Path(out) / "cells"
    done = {p.stem for p in cells_dir.glob("*.json")}
    return dry_run(cells, done, stale_cells(cells, cells_dir, done))


def interrupted(out: Path, started: float, rerun: str) -> str:
    """The line an interrupted sweep ends with: what is saved and how to resume."""
    files = list((Path(out) / "cells").glob("*.json"))
    saved = sum(p.stat().st_mtime >= started for p in files)
    return (f"interrupted: the {saved} cells finished in this run are saved in {Path(out) / 'cells'} ({len(files)} "
            f"in all); `{rerun}` resumes, skipping every finished cell")
