"""The end-of-sweep table: one row per strategy, as pytest-benchmark and asv end a run.

    strategy        cells  failed  at optimum    geo-mean gap  worst gap  solve s
    fusion greedy      38       0  31/36 (86%)        +1.20%    +15.00%     0.12

A *cell* is one run of the sweep (an instance, a fusion strategy, an order strategy); a *problem*
is what a strategy solves: for fusion an instance, for orders an instance's kernels under one
fusion strategy.  ``cells`` counts every cell the strategy took part in and ``failed`` those that
failed or timed out.  The gaps compare the strategy's value on each problem (traffic for fusion,
Definition 7.3; peak for orders, Definition 7.5) with the problem's reference: ``at optimum``
counts the problems whose value equals a reference proven optimal, out of the problems
compared; the geometric mean and the worst of value / best known - 1 (the reference's, or a
strategy's where lower) are over the problems whose best known value is positive (a fusion
result repeats once per order strategy, so it counts once).  ``solve s`` is the strategy's total
solve time.
"""
from __future__ import annotations

import math

import pandas as pd

from experiments.textable import text_table

from experiments.report.plots import base, compared

#: (strategy column, value compared with its best known, seconds column)
KINDS = (("fusion", "traffic", "fusion_seconds"), ("order", "peak", "order_seconds"))
HEADERS = ("strategy", "cells", "failed", "at optimum", "geo-mean gap", "worst gap", "solve s")


def strategy_summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (kind, strategy) of the results table, with the columns of :data:`HEADERS`."""
    rows = []
    for strategy, value, seconds in KINDS:
        if strategy not in table:
            continue
        scored = compared(table, value, strategy)
        for name, cells in table.groupby(strategy):
            mine = scored[scored[strategy] == name] if len(scored) else scored
            rows.append({"kind": strategy, "name": name, "cells": len(cells),
                         "failed": int((cells["status"] != "ok").sum()), **_gaps(mine, value),
                         "solve s": float(mine[seconds].sum()) if seconds in mine else math.nan})
    return pd.DataFrame(rows)


def _gaps(rows: pd.DataFrame, value: str) -> dict[str, float | int]:
    ref, best = f"{value}_ref", base(rows, value)
    if rows.empty:
        return {"compared": 0, "at optimum": 0, "geo-mean gap": math.nan, "worst gap": math.nan}
    proven = rows[f"{ref}_status"] == "optimal"
    ratio = (rows[value] / rows[best].where(rows[best] > 0)).dropna().astype(float)
    return {"compared": len(rows), "at optimum": int(((rows[value] == rows[ref]) & proven).sum()),
            "geo-mean gap": math.exp(ratio.map(math.log).mean()) - 1 if len(ratio) else math.nan,
            "worst gap": ratio.max() - 1 if len(ratio) else math.nan}


def format_summary(summary: pd.DataFrame) -> str:
    """The summary as an aligned text table."""
    def percent(x: float) -> str:
        return "-" if pd.isna(x) else f"{x:+.2%}"

    lines = [(f"{r.kind} {r['name']}", r.cells, r.failed,
              f"{r['at optimum']}/{r.compared} ({r['at optimum'] / r.compared:.0%})" if r.compared else "-",
              percent(r["geo-mean gap"]), percent(r["worst gap"]),
              "-" if pd.isna(r["solve s"]) else f"{r['solve s']:.2f}") for _, r in summary.iterrows()]
    return text_table(HEADERS, lines, right=HEADERS[1:]) + (
        "\ncells: the sweep's runs (instance, fusion, order) the strategy took part in; at optimum: its problems "
        "(fusion: instances; order: an instance's kernels under one fusion) at a proven optimum, of those compared")
