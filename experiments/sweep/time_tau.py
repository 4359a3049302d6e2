"""The results table's ``time_tau`` column: per instance of a sweep, the Kendall rank correlation
(tau-b) between Definition 7.3's modeled traffic and the measured kernel time across the
strategies that ran it (``experiments.report.rank_correlation`` summarizes it per family)."""
from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

#: what makes rows timings of one instance under different strategies
INSTANCE = ("family", "instance", "dependence")


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two equally long sequences (ties in either counted as tau-b does);
    NaN when one of them is constant or there are fewer than two points."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau: {len(x)} and {len(y)} values; give two sequences of one length")
    concordant = discordant = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tied_x += 1
            elif dy == 0:
                tied_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + tied_x) * (concordant + discordant + tied_y))
    return (concordant - discordant) / denominator if denominator else float("nan")


def per_instance(table: pd.DataFrame) -> pd.DataFrame:
    """One row per timed instance: its strategies and tau(traffic, kernel time)."""
    if "kernel_time_median" not in table or "traffic" not in table:
        return pd.DataFrame(columns=[*INSTANCE, "strategies", "tau"])
    timed = table[(table["status"] == "ok")].dropna(subset=["traffic", "kernel_time_median"])
    keys = [c for c in INSTANCE if c in timed]
    rows = [{**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "strategies": len(group),
             "tau": kendall_tau(list(group["traffic"]), list(group["kernel_time_median"]))}
            for key, group in timed.fillna({k: "" for k in keys}).groupby(keys)]
    return pd.DataFrame(rows, columns=[*keys, "strategies", "tau"])


def with_time_tau(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``time_tau``: on every timed row, the tau of its instance across the
    strategies that ran it (:func:`per_instance`); NaN where the instance has no defined tau."""
    taus = per_instance(table).dropna(subset=["tau"])
    keys = [c for c in INSTANCE if c in taus and c in table]
    if taus.empty or not keys:
        return table.assign(time_tau=float("nan"))
    timed = table["kernel_time_median"].notna() & (table["status"] == "ok")
    joined = table[keys].fillna({k: "" for k in keys}).merge(taus[[*keys, "tau"]], on=keys, how="left")
    return table.assign(time_tau=joined["tau"].where(timed.to_numpy()).to_numpy())
