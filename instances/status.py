"""The instance library's status table, as MIPLIB keeps one.

For every shipped instance (``store.shipped()``) and each of its problems, the fusion problem
(Definition 7.3, traffic) and the order problem (Definition 7.5, peak; a fusion file's is
``Instance.order_problem()``, one kernel per node), a row holds the best known value (of a
validated answer), the best proven lower bound, the status (``solved`` when they meet, else
``open``), which strategy found each and in how many seconds, the time limit and the code
version.  ``python -m experiments.studies.instance_status`` writes it to ``data/status.csv``; nobody
edits it by hand.

A row is matched to a problem by its content (:func:`problem_key`), so a changed instance file
finds no row until the table is regenerated.  :meth:`StatusRow.conflicts` is the consistency
law every solver must respect: no valid lower bound exceeds a known value, no answer's value
lies below a proven bound, and no answer is optimal while a better one is known.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable

from stax.errors import InstanceFormatError, StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem

from instances.store import DATA_DIR, Instance

TABLE_PATH = DATA_DIR / "status.csv"
PROBLEM_KINDS = ("fusion", "order")


class Standing(StrEnum):
    """A problem's standing in the status table."""

    SOLVED = "solved"  # the best known value meets the best proven bound
    OPEN = "open"


class StatusConflict(StaxError):
    """A solver's claim contradicts the status table: a bound above a known value, a value below a
    proven bound, or an optimum worse than a known answer."""


def problem_key(problem: FusionProblem | OrderProblem) -> str:
    """A hash of what defines the problem (its name and node metadata left out)."""
    content = {k: v for k, v in problem.to_dict().items() if k not in ("name", "node_info")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def problems_of(inst: Instance) -> list[tuple[str, FusionProblem | OrderProblem]]:
    """The (kind, problem) pairs that have a row: a fusion instance's fusion problem and the order
    problem of its nodes as kernels; an order instance's order problem."""
    if inst.fusion is not None:
        return [("fusion", inst.fusion), ("order", inst.order_problem())]
    return [("order", inst.order)]


def integral_bound(bound: float) -> int:
    """A lower bound on an integer objective (traffic, peak) rounded up to the integer it implies."""
    return math.ceil(bound - 1e-6)


@dataclass(frozen=True)
class StatusRow:
    """One problem's status; ``attempts`` is the JSON of every strategy run on it:
    ``{name: {"status", "value", "bound", "seconds"}}`` or ``{name: {"error": ...}}``."""

    instance: str  # the store name, e.g. data/models/gpt2-12-train.order
    problem: str  # "fusion" or "order"
    key: str  # problem_key of the problem
    nodes: int  # nodes (fusion) or tasks (order)
    buffers: int
    value: int  # best known traffic or peak, bytes
    bound: int  # best proven lower bound, bytes
    status: str  # Standing
    value_by: str  # the strategy whose answer has ``value``
    value_seconds: float
    bound_by: str  # the strategy (or problem bound) that proved ``bound``
    bound_seconds: float
    time_limit: float  # seconds each exact strategy was given
    stax_version: str  # experiments.sweep.provenance.code_version() of the run
    date: str
    load_average: float  # the machine's 1-minute load when the row was solved (shared machines are slow)
    attempts: str

    @property
    def gap(self) -> float:
        """(value - bound) / value, 0 when solved."""
        return 0.0 if self.value == self.bound else (self.value - self.bound) / self.value

    def conflicts(self, value: int | None, bound: float | None, optimal: bool = False) -> list[str]:
        """What is wrong with a solver's claim of ``value`` (an answer's), ``bound`` (a lower bound) and,
        with ``optimal``, that ``value`` is the optimum; empty when it fits this row."""
        found = []
        if bound is not None and integral_bound(bound) > self.value:
            found.append(f"claims a lower bound {bound:g} above the known value {self.value} ({self.value_by})")
        if value is not None and value < self.bound:
            found.append(f"claims a value {value} below the proven bound {self.bound} ({self.bound_by})")
        if optimal and value is not None and value > self.value:
            found.append(f"claims {value} optimal, but {self.value} is known ({self.value_by})")
        return found

    def check(self, value: int | None, bound: float | None, optimal: bool, who: str) -> None:
        """Raise StatusConflict, naming the row and the claim, unless the claim fits this row."""
        found = self.conflicts(value, bound, optimal)
        if found:
            raise StatusConflict(f"{who} on {self.instance} ({self.problem}) {'; '.join(found)}: the solver or "
                                 f"the status table is wrong; recheck with `python -m experiments.studies.instance_status "
                                 f"--only {self.instance} --redo`")


_COLUMNS = tuple(f.name for f in fields(StatusRow))
_INTEGERS = ("nodes", "buffers", "value", "bound")
_FLOATS = ("value_seconds", "bound_seconds", "time_limit", "load_average")


def _parse_row(raw: dict[str, str], where: str) -> StatusRow:
    values: dict[str, Any] = dict(raw)
    for name in (*_INTEGERS, *_FLOATS):
        try:
            values[name] = int(raw[name]) if name in _INTEGERS else float(raw[name])
        except ValueError:
            raise InstanceFormatError(f"{where}: column {name!r}: expected a number, found {raw[name]!r}") from None
    row = StatusRow(**values)
    if row.problem not in PROBLEM_KINDS:
        raise InstanceFormatError(f"{where}: column 'problem': expected one of {PROBLEM_KINDS}, found {row.problem!r}")
    if not 0 <= row.bound <= row.value:
        raise InstanceFormatError(f"{where}: bound {row.bound} must lie between 0 and the value {row.value}")
    want = Standing.SOLVED if row.value == row.bound else Standing.OPEN
    if row.status != want:
        raise InstanceFormatError(f"{where}: status {row.status!r} but value {row.value} and bound {row.bound} "
                                  f"make it {want.value!r}")
    return row


@dataclass(frozen=True)
class StatusTable:
    """The rows, in the store's order; read and written as CSV (one column per StatusRow field)."""

    rows: tuple[StatusRow, ...] = ()

    def row(self, instance: str, problem: str) -> StatusRow | None:
        return next((r for r in self.rows if (r.instance, r.problem) == (instance, problem)), None)

    def known(self, problem: FusionProblem | OrderProblem) -> StatusRow | None:
        """The row of a problem with this content, if any."""
        return self._by_key.get(problem_key(problem))

    @functools.cached_property
    def _by_key(self) -> dict[str, StatusRow]:
        return {r.key: r for r in self.rows}

    def with_row(self, row: StatusRow, order: Iterable[str] = ()) -> StatusTable:
        """This table with ``row`` in place of the row of its instance and problem; rows sorted by
        ``order`` (instance names; others last, by name)."""
        rank = {name: i for i, name in enumerate(order)}
        rows = [r for r in self.rows if (r.instance, r.problem) != (row.instance, row.problem)] + [row]
        rows.sort(key=lambda r: (rank.get(r.instance, len(rank)), r.instance, PROBLEM_KINDS.index(r.problem)))
        return StatusTable(tuple(rows))

    def only(self, instances: Iterable[str]) -> StatusTable:
        keep = set(instances)
        return StatusTable(tuple(r for r in self.rows if r.instance in keep))

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, _COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(asdict(r) for r in self.rows)
        return out.getvalue()

    @classmethod
    def from_csv(cls, text: str, source: str = "<csv>") -> StatusTable:
        reader = csv.DictReader(io.StringIO(text))
        if tuple(reader.fieldnames or ()) != _COLUMNS:
            raise InstanceFormatError(f"{source}: expected the columns {', '.join(_COLUMNS)}; found "
                                      f"{', '.join(reader.fieldnames or ()) or 'none'} (regenerate it with "
                                      "`python -m experiments.studies.instance_status`)")
        rows = tuple(_parse_row(raw, f"{source} line {reader.line_num}") for raw in reader)
        return cls(rows)

    @classmethod
    def load(cls, path: str | Path = TABLE_PATH) -> StatusTable:
        """The table at ``path``, or an empty one when there is no file."""
        path = Path(path)
        return cls.from_csv(path.read_text(), str(path)) if path.exists() else cls()


@functools.cache
def shipped_table() -> StatusTable:
    """The checked-in table (read once per process)."""
    return StatusTable.load()


def reconcile(row: StatusRow | None, value: int, bound: float, optimal: bool, who: str) -> tuple[int, int]:
    """A solver's (value, bound) made consistent with what the table knows: checked against it
    (StatusConflict when they contradict), then the better of each."""
    bound = integral_bound(bound)
    if row is None:
        return value, bound
    row.check(value, bound, optimal, who)
    return min(value, row.value), max(bound, row.bound)
