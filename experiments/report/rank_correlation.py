"""Does a lower modeled cost make faster kernels?  For each instance of a sweep, the Kendall
rank correlation (tau-b) between Definition 7.3's modeled traffic and the measured kernel time
across the strategies that ran it; per family, how well the model predicts time on this machine.

    python -m experiments.report.rank_correlation RESULTS
"""
from __future__ import annotations

import argparse
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


def per_family(table: pd.DataFrame) -> pd.DataFrame:
    """Per family: instances with a defined tau, their mean and median tau, and the fraction
    where a higher modeled traffic ranks with a longer time (tau > 0)."""
    taus = per_instance(table).dropna(subset=["tau"])
    grouped = taus.groupby("family")["tau"]
    return pd.DataFrame({"instances": grouped.size(), "mean_tau": grouped.mean(), "median_tau": grouped.median(),
                         "positive": grouped.apply(lambda t: float((t > 0).mean()))}).reset_index()


def main(argv: list[str] | None = None) -> pd.DataFrame:
    from experiments.sweep.results import load_results
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a results directory or table")
    table = per_family(load_results(parser.parse_args(argv).results))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return table


if __name__ == "__main__":
    main()
