"""The results directory of a sweep: one durable file per cell, merged into a table.

    OUT/cells/KEY.json    a finished cell (written atomically: a killed sweep leaves none half-written)
    OUT/failed/KEY.json   the last failure or timeout of a cell (retried by the next run)
    OUT/refs/KEY.json     the reference of one problem content and reference settings
    OUT/results.parquet   the table: one row per cell of the sweep (done, else its failure)
    OUT/results.csv       the same table as CSV

The table is rebuilt from the cell files at the end of every run, so it is never needed to
resume, and it is replaced atomically.  It adds what only the whole sweep knows
(:func:`with_best_known`): per measure (``traffic``, ``peak``) the best value any strategy or the
reference reached on the same problem (``*_best``), and every row's relative gap to it
(``*_gap_best``) and to the reference's lower bound (``*_gap_bound``), so a row is compared even
where no optimum is proven; and on every timed row ``time_tau``, the Kendall rank correlation
between modeled traffic and measured kernel time across the strategies of its instance
(:mod:`experiments.sweep.time_tau`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from stax.errors import StaxError

from experiments.sweep.cells import content_key
from experiments.sweep.measure import DECISION_COLUMN, remove_orphaned_writes, write_atomic
from experiments.sweep.nulls import as_nulls
from experiments.sweep.time_tau import with_time_tau

TABLE = "results.parquet"


class ResultsDirError(StaxError):
    """A results directory that cannot be created or written."""


def _unwritable(out: Path, error: OSError) -> ResultsDirError:
    return ResultsDirError(f"{out}: cannot write the results directory ({error.strerror or error}); give another "
                           "with --out or make it writable")


class ResultDir:
    """Reads and writes the files of one results directory."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.cells, self.failed, self.refs = self.out / "cells", self.out / "failed", self.out / "refs"
        self.decisions = self.out / "decisions"
        try:
            for d in (self.cells, self.failed, self.refs, self.decisions):
                d.mkdir(parents=True, exist_ok=True)
                remove_orphaned_writes(d)  # a sweep killed mid-write resumes without its leftovers
            write_atomic(self.out / ".write-check", "")  # fails now, not after the first cell, when unwritable
            (self.out / ".write-check").unlink()
        except OSError as error:
            raise _unwritable(self.out, error) from None

    def references(self) -> dict[str, dict[str, Any]]:
        """The references solved so far, by key."""
        return {p.stem: json.loads(p.read_text()) for p in self.refs.glob("*.json")}

    def record_reference(self, key: str, ref: dict[str, Any]) -> None:
        write_atomic(self.refs / f"{key}.json", json.dumps(ref, default=_plain))

    def record_decision(self, decision: dict[str, Any]) -> str:
        """Store ``decision`` (once per content) and return its key."""
        text = json.dumps(decision, sort_keys=True, default=_plain)
        key = content_key(text)
        path = self.decisions / f"{key}.json"
        if not path.exists():
            write_atomic(path, text)
        return key

    def decision(self, key: str) -> dict[str, Any]:
        """The decisions stored under ``key`` (a row's ``decision`` column)."""
        return json.loads((self.decisions / f"{key}.json").read_text())

    def done(self) -> set[str]:
        return {p.stem for p in self.cells.glob("*.json")}

    def record(self, row: dict[str, Any]) -> None:
        """Persist a finished row: done cells under cells/, failures under failed/; its decisions
        under decisions/, by content, the row keeping their key."""
        if isinstance(row.get(DECISION_COLUMN), dict):
            row = {**row, DECISION_COLUMN: self.record_decision(row[DECISION_COLUMN])}
        key, text = row["cell"], json.dumps(row, default=_plain)
        if row["status"] == "ok":
            write_atomic(self.cells / f"{key}.json", text)
            (self.failed / f"{key}.json").unlink(missing_ok=True)
        else:
            write_atomic(self.failed / f"{key}.json", text)

    def rows(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        rows = []
        for key in keys:
            for folder in (self.cells, self.failed):
                path = folder / f"{key}.json"
                if path.exists():
                    rows.append(json.loads(path.read_text()))
                    break
        return rows

    def write_table(self, keys: Iterable[str]) -> pd.DataFrame:
        """Merge the rows of ``keys`` into results.parquet and results.csv (atomically)."""
        table = with_time_tau(with_best_known(as_nulls(pd.DataFrame(self.rows(keys)))))
        for name, writer in ((TABLE, lambda p: table.to_parquet(p, index=False)),
                             ("results.csv", lambda p: table.to_csv(p, index=False))):
            tmp = self.out / f".{name}.tmp"
            try:
                writer(tmp)
                os.replace(tmp, self.out / name)
            except OSError as error:
                tmp.unlink(missing_ok=True)
                raise _unwritable(self.out, error) from None
        return table


MEASURES = ("traffic", "peak")


def with_best_known(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``*_best``, ``*_gap_best`` and ``*_gap_bound`` for every measure compared
    with a reference (rows of the same ``*_problem`` share their best value)."""
    for measure in MEASURES:
        if f"{measure}_problem" not in table:
            continue
        ok = table["status"] == "ok"
        reached = pd.concat([table[measure].where(ok), table[f"{measure}_ref"].where(ok)], axis=1).min(axis=1)
        best = reached.groupby(table[f"{measure}_problem"]).transform("min")
        table[f"{measure}_best"] = best
        table[f"{measure}_gap_best"] = relative_gap(table[measure], best)
        table[f"{measure}_gap_bound"] = relative_gap(table[measure], table[f"{measure}_ref_bound"])
    return table


def relative_gap(value: pd.Series, base: pd.Series) -> pd.Series:
    """(value - base) / base; 0 where both are 0, infinite where only the base is 0."""
    value, base = value.astype(float), base.astype(float)
    gap = (value - base) / base.where(base != 0)
    return gap.mask((base == 0) & (value == 0), 0.0).mask((base == 0) & (value > 0), float("inf"))


#: columns every row of a sweep has, which the figures and the report read
IDENTITY = ("cell", "family", "kind", "instance", "fusion", "order", "status", "error", "date")


def load_results(path: str | Path) -> pd.DataFrame:
    """A results table from a results directory, a .parquet or a .csv file; anything else, or a
    table that is not a sweep's, raises an error that says so."""
    path = Path(path)
    if path.is_dir():
        path = path / TABLE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no results table here; run `stax sweep CONFIG --out DIR` first")
    if path.suffix not in (".csv", ".parquet"):
        raise ValueError(f"{path}: a results table is a results directory, a .parquet or a .csv file")
    try:
        table = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    except (ValueError, OSError) as error:  # pandas' and pyarrow's parse errors are ValueErrors
        raise ValueError(f"{path}: not a readable table ({error})") from None
    missing = [column for column in IDENTITY if column not in table]
    if missing:
        raise ValueError(f"{path}: not a sweep's results table (no column {', '.join(missing)}); "
                         "tables come from `stax sweep CONFIG --out DIR`")
    return table


def _plain(value: Any) -> Any:
    """JSON for numpy scalars."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a result row")
