"""Two results tables compared cell by cell, as ``asv compare`` compares benchmark runs: for
each timed cell (a program cell that measured ``kernel_time`` in both), the ratio of the
medians B / A and whether it is significant, which needs the two medians' confidence
intervals (``kernel_time_min``/``_max``, stax.measure.timing.measure) to be disjoint and the ratio to
leave [1 / factor, factor].  Cells are matched by what they run (instance, strategies, rule,
file), not by their keys, which hold the code version.  Where both tables recorded each cell's
fastest batch (``kernel_time_best``), the summary also gives the share of cells whose fastest
batches agree: on a loaded machine a median follows the load of its moment, the fastest batch
much less.

    stax compare A B [--factor 1.1] [--all]
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

#: what a cell runs: two tables' cells with equal values here timed the same thing
MATCH = ("family", "instance", "fusion", "order", "dependence", "file")
#: the fraction of cells whose ratio lies in AGREE (two identical sweeps should have 90%)
AGREE = (0.8, 1.25)


@dataclass(frozen=True)
class Comparison:
    cells: pd.DataFrame  # one row per timed cell in both tables: the medians, ratio, significant, mark
    only_a: int          # timed cells of A without a match in B
    only_b: int
    factor: float = 1.1  # the ratio beyond which a cell is marked

    @property
    def agreeing(self) -> float:
        """The fraction of matched cells whose ratio lies within AGREE."""
        return within(self.cells["ratio"])

    @property
    def best_agreeing(self) -> float:
        """The fraction of matched cells whose fastest batches' ratio lies within AGREE (NaN when
        a table did not record them)."""
        return within(self.cells["best_ratio"].dropna()) if "best_ratio" in self.cells else float("nan")


def within(ratio: pd.Series) -> float:
    """The fraction of ``ratio`` within AGREE (NaN when empty)."""
    return float(((ratio >= AGREE[0]) & (ratio <= AGREE[1])).mean()) if len(ratio) else float("nan")


def _timed(table: pd.DataFrame) -> pd.DataFrame:
    if "kernel_time_median" not in table:
        return table.iloc[0:0]
    return table[(table["status"] == "ok") & table["kernel_time_median"].notna()]


def compare(a: pd.DataFrame, b: pd.DataFrame, factor: float = 1.1) -> Comparison:
    """The timed cells of ``a`` and ``b`` side by side; ``mark`` is ``+`` (B significantly
    slower), ``-`` (faster), ``~`` (a ratio beyond ``factor`` whose intervals overlap) or blank."""
    if factor < 1:
        raise ValueError(f"factor={factor}: give a factor of at least 1, e.g. 1.1 for 10%")
    ta, tb = _timed(a), _timed(b)
    keys = [c for c in MATCH if c in ta and c in tb]
    spread = ["kernel_time_median", "kernel_time_min", "kernel_time_max"]
    spread += ["kernel_time_best"] if "kernel_time_best" in ta and "kernel_time_best" in tb else []
    blank = dict.fromkeys(keys, "")  # cells without a rule or file match each other
    both = ta[keys + spread].fillna(blank).merge(tb[keys + spread].fillna(blank), on=keys, suffixes=("_a", "_b"))
    ratio = both["kernel_time_median_b"] / both["kernel_time_median_a"]
    disjoint = (both["kernel_time_min_b"] > both["kernel_time_max_a"]) | (both["kernel_time_max_b"] < both["kernel_time_min_a"])
    beyond = (ratio > factor) | (ratio < 1 / factor)
    significant = disjoint & beyond
    mark = pd.Series("", index=both.index).mask(beyond, "~").mask(significant & (ratio > 1), "+") \
        .mask(significant & (ratio < 1), "-")
    cells = both[keys].assign(a_us=both["kernel_time_median_a"] * 1e6, b_us=both["kernel_time_median_b"] * 1e6,
                              ratio=ratio, significant=significant, mark=mark)
    if "kernel_time_best" in spread:
        cells = cells.assign(best_ratio=both["kernel_time_best_b"] / both["kernel_time_best_a"])
    return Comparison(cells.sort_values("ratio").reset_index(drop=True),
                      len(ta) - len(both), len(tb) - len(both), factor)


def format_comparison(result: Comparison, changed_only: bool = True) -> str:
    """asv-like lines (mark, A, B, ratio, cell) after a legend of the marks, and a summary."""
    rows = result.cells[result.cells["mark"] != ""] if changed_only else result.cells
    keys = [c for c in MATCH if c in rows]
    f = f"{result.factor:g}x"
    lines = [f"+ B significantly slower, - B significantly faster (ratio of medians B / A beyond {f} and their "
             f"intervals disjoint); ~ beyond {f} but the intervals overlap (not significant); blank: within {f}"
             + ("" if not changed_only else " (listed with --all)"),
             f"{'':1s} {'A us':>10s} {'B us':>10s} {'ratio':>7s}  cell"]
    for _, r in rows.iterrows():
        lines.append(f"{r['mark']:1s} {r['a_us']:10.2f} {r['b_us']:10.2f} {r['ratio']:7.3f}  "
                     + " ".join(str(r[k]) for k in keys if r[k] != ""))
    n = len(result.cells)
    significant = int(result.cells["significant"].sum())
    lines.append(f"{n} timed cells in both ({result.only_a} only in A, {result.only_b} only in B); "
                 f"{significant} significantly different; {result.agreeing:.0%} within "
                 f"{AGREE[0]}-{AGREE[1]}x" + ("" if math.isnan(result.best_agreeing) else
                                             f" (fastest batches: {result.best_agreeing:.0%})"))
    return "\n".join(lines)
