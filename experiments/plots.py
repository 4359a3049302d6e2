"""Figures of a sweep's results table (matplotlib, Agg backend).

- ``fusion_ratio.png``: traffic / reference traffic of each fusion strategy, one panel per abstract
  family and one for all programs;
- ``order_peak.png``: estimated peak / reference peak of each order strategy, panels likewise;
- ``solver_time.png``: strategy solve seconds against instance size (nodes or tasks), log scale;
- ``kernel_time.png``: measured kernel time (median, bars to min/max) against modeled traffic.

Ratios use only rows whose reference is proven optimal; the count of the others is in each
panel's title, so a best-found value is never drawn as the optimum.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "ok"]


def rules(table: pd.DataFrame) -> list[str]:
    """``["dependence"]`` if the table has the dependence rule column (tables of older sweeps do not)."""
    return ["dependence"] if "dependence" in table else []


def compared(table: pd.DataFrame, value: str, strategy: str) -> pd.DataFrame:
    """Finished rows with ``value`` and its reference, one per (instance, dependence rule, strategies
    deciding it): a fusion result repeats once per order strategy, so fusion rows are deduplicated."""
    ref = f"{value}_ref"
    if ref not in table:
        return table.iloc[0:0]
    keys = ["instance", *rules(table), "fusion"] + ([] if strategy == "fusion" else ["order"])
    return _ok(table).dropna(subset=[value, ref]).drop_duplicates(keys)


def _ratio_panels(table: pd.DataFrame, value: str, strategy: str, title: str, path: Path) -> Path | None:
    ref = f"{value}_ref"
    rows = compared(table, value, strategy)
    if rows.empty:
        return None
    rows = rows.assign(panel=rows["family"].where(rows["kind"] != "program", "programs"))
    panels = sorted(rows["panel"].unique())
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols + 0.5, 3.4 * nrows), squeeze=False, sharey=True)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels):
        group = rows[rows["panel"] == panel]
        proven = group[group[f"{ref}_status"] == "optimal"]
        labels = sorted(group[strategy].unique())
        data = [(proven.loc[proven[strategy] == s, value] / proven.loc[proven[strategy] == s, ref].where(
            proven.loc[proven[strategy] == s, ref] > 0)).dropna() for s in labels]
        ax.boxplot(data, tick_labels=labels, showmeans=True)
        unproven = len(group) - len(proven)
        ax.set_title(f"{panel} ({len(group)} rows)" + (f"\n{unproven} without a proven optimum" if unproven else ""),
                     fontsize=9)
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    for row in axes:
        row[0].set_ylabel(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fusion_ratio(table: pd.DataFrame, out: Path) -> Path | None:
    return _ratio_panels(table, "traffic", "fusion", "traffic / optimal traffic", out / "fusion_ratio.png")


def order_peak(table: pd.DataFrame, out: Path) -> Path | None:
    return _ratio_panels(table, "peak", "order", "peak / optimal peak", out / "order_peak.png")


def solver_time(table: pd.DataFrame, out: Path) -> Path | None:
    rows = _ok(table)
    if rows.empty:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (size, seconds, strategy, what) in zip(axes, (("nodes", "fusion_seconds", "fusion", "fusion"),
                                                          ("tasks", "order_seconds", "order", "order"))):
        if seconds not in rows:
            continue
        # one point per (instance, strategy): the same fusion solve appears once per order strategy
        points = rows.dropna(subset=[size, seconds]).drop_duplicates(["instance", strategy, size])
        for label, group in points.groupby(strategy):
            ax.scatter(group[size], group[seconds].clip(lower=1e-6), label=label, s=14, alpha=0.7)
        ax.set_yscale("log")
        ax.set_xlabel(f"instance size ({size})")
        ax.set_ylabel("solve seconds")
        ax.set_title(f"{what} strategies", fontsize=10)
        if len(points):
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "solver_time.png", dpi=110)
    plt.close(fig)
    return out / "solver_time.png"


def kernel_time(table: pd.DataFrame, out: Path) -> Path | None:
    if "kernel_time_median" not in table:
        return None
    rows = _ok(table).dropna(subset=["kernel_time_median", "traffic"])
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for family, group in rows.groupby("family"):
        median = group["kernel_time_median"] * 1e6
        spread = [median - group["kernel_time_min"] * 1e6, group["kernel_time_max"] * 1e6 - median]
        ax.errorbar(group["traffic"], median, yerr=spread, fmt="o", ms=4, capsize=2, label=family, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("modeled traffic (bytes, Definition 7.3)")
    ax.set_ylabel("measured time per call (us, median; bars min-max)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "kernel_time.png", dpi=110)
    plt.close(fig)
    return out / "kernel_time.png"


FIGURES = (fusion_ratio, order_peak, solver_time, kernel_time)


def plot_all(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """Draw every figure the table has data for into ``out``; return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return [path for figure in FIGURES if (path := figure(table, out)) is not None]
