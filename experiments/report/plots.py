"""Figures of a sweep's results table (matplotlib, Agg backend), drawn to be read at page width:
one colour per strategy in every figure (:func:`colour`), fonts of 12 points, at most two panels
across, and a caption (:data:`CAPTIONS`) saying what every mark means.

- ``profiles.png``: Dolan-More performance profiles: the share of instances on which a strategy is
  within a factor tau of the best known value (traffic for fusion, Definition 7.3; peak for orders,
  Definition 7.5);
- ``fusion_gap.png``, ``order_gap.png``: the gap to the best known value against instance size,
  one panel per family (the program suite in one);

The best known value of a problem (``*_best``) is its reference's, or a strategy's where that is
lower (a reference without a proof can be beaten), so every finished row is compared.
- ``order_peak.png``: the peak of each order strategy per instance against its size, with the
  reference's optimum and, where it is not proven, its lower bound;
- ``pareto.png``: each fusion strategy's (traffic, peak) point against the exact traffic-peak
  Pareto front of its problem (measure ``pareto``), one panel per problem;
- ``kernel_time.png``: measured time per call (median, bars to the spread) against modeled traffic;
- ``time_tau.png``: per family, each instance's Kendall tau between modeled traffic and measured
  time across its strategies (does a lower modeled cost make faster kernels?);
- ``solver_time.png``: strategy solve seconds against instance size.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.report.rank_correlation import per_instance  # noqa: E402

#: fixed colours of the registered strategies (cpsat is one strategy name for both problems)
COLOURS = {"none": "#7f7f7f", "greedy": "#0072B2", "random": "#CC79A7", "mwc": "#009E73", "cpsat": "#D55E00",
           "original": "#8c564b", "best": "#56B4E9", "lpmf": "#E69F00", "bfs": "#bcbd22", "dfs": "#17becf",
           "dp": "#9467bd"}
#: the strategy that is the reference's own solver (a sweep's reference is CP-SAT), and each kind's
#: baseline: no fusion, and the program's own order
REFERENCE = "cpsat"
BASELINES = {"fusion": "none", "order": "original"}
SPARE = ("#1b9e77", "#e7298a", "#66a61e", "#a6761d", "#666666", "#7570b3")
STYLE = {"font.size": 12, "axes.titlesize": 12, "axes.labelsize": 12, "legend.fontsize": 10,
         "xtick.labelsize": 11, "ytick.labelsize": 11, "figure.dpi": 100}
WIDTH = 10.0  # inches: 1000 pixels, the report's column

CAPTIONS = {
    "profiles": "Performance profiles (Dolan-More): for each strategy, the share of problems (y) on which its "
                "value is at most tau times the best known (x, log scale: the reference's, or a strategy's where "
                "lower). The dot at tau = 1 is the share where the strategy is at the best known (a curve at 1 "
                "there is at the best known everywhere), the dot on the right where its curve reaches 1 (its "
                "worst ratio). Each curve is drawn thinner than the one before it in the legend, on top, so "
                "overlapping curves both show; a curve equal to another's is dashed, with a cross, and the legend "
                "names the one it equals. Left: fusion traffic (Definition 7.3), a problem is an instance; right: order peak "
                "(Definition 7.5), a problem is an instance's kernels under one fusion strategy. Only problems "
                "whose best known value is positive count.",
    "fusion_gap": "Gap of each fusion strategy's traffic to the best known (%, y: the reference's, or a strategy's "
                  "where lower) against instance size (nodes, x), one "
                  "panel per family. A filled dot is an instance whose reference is a proven optimum, a hollow one "
                  "an instance whose reference is only the best found; dots of one size are spread sideways; the "
                  "line joins the strategy's geometric-mean gap per size. The axis ends a little above the worst "
                  "gap of the strategies other than none (no fusion, the baseline); none's gaps above it are "
                  "triangles on the top edge, and the panel's title gives its largest.",
    "order_gap": "Gap of each order strategy's peak to the best known (%, y) against instance size (tasks, x), one "
                 "panel per family. A dot is an order problem (an instance's kernels under one fusion strategy). "
                 "Filled dot: proven optimal reference; hollow: best found only; the line joins "
                 "the geometric-mean gap per size.",
    "order_peak": "Peak memory (bytes, log scale) of each order strategy (coloured dots) on each instance, against "
                  "its size (tasks, x; dots of one size spread sideways). A black bar, drawn over the dots, is "
                  "the reference's peak when proven optimal, a grey bar when only the best found, and a grey "
                  "triangle its lower bound when that is below it.",
    "pareto": "Traffic (bytes, Definition 7.3, x) against peak memory (bytes, Definition 7.5, y) of each cell, "
              "one panel per fusion problem: the staircase joins the points of the exact traffic-peak Pareto front "
              "(CP-SAT with an epsilon-constraint on peak; black when every point is proven, grey dashed when the "
              "solver ran out of time), a hollow square marking each point. A dot is a cell, coloured by its fusion strategy "
              "(coinciding dots drawn smaller on top of each other); its peak is its order "
              "strategy's, or for a problem file the least peak found over its kernels' orders. A dot on the "
              "staircase is Pareto-optimal; one above or right of it is dominated.",
    "kernel_time": "Measured time per call of each compiled program (us, log scale): the dot is the median, the bar "
                   "spans the spread the table records (min to max of the repeats), against the modeled traffic of "
                   "the fusion (bytes, Definition 7.3, log scale); colour is the fusion strategy.",
    "time_tau": "Does a lower modeled traffic (Definition 7.3) make faster kernels? One dot per timed instance "
                "(dots spread sideways): the Kendall rank correlation (tau-b, y) between the modeled traffic and "
                "the measured median time per call across the strategies that ran it, by family (x, with its "
                "instance count). +1: the strategies rank the same by traffic and by time; 0: traffic tells "
                "nothing of time; -1: the opposite order. The black bar is the family's mean.",
    "solver_time": "Solve time of each strategy (seconds, log scale) against instance size: nodes for fusion "
                   "(left), tasks for orders (right). One dot per instance and strategy.",
}


def colour(label: str) -> str:
    """The colour of a strategy in every figure: its registered name's, else a spare one chosen by
    the label, so the same label has the same colour in every report."""
    name = str(label).split("(")[0]
    if name in COLOURS:
        return COLOURS[name]
    return SPARE[sum(map(ord, str(label))) % len(SPARE)]


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "ok"]


def rules(table: pd.DataFrame) -> list[str]:
    """``["dependence"]`` if the table has the dependence rule column (tables of older sweeps do not)."""
    return ["dependence"] if "dependence" in table else []


def base(table: pd.DataFrame, value: str) -> str:
    """The column ``value`` is compared with: the best value known on the row's problem (the
    reference's, or a strategy's where that is lower: ``*_best``), or in tables of older sweeps
    the reference."""
    return f"{value}_best" if f"{value}_best" in table else f"{value}_ref"


def compared(table: pd.DataFrame, value: str, strategy: str) -> pd.DataFrame:
    """Finished rows with ``value`` and its reference, one per (instance, dependence rule, strategies
    deciding it): a fusion result repeats once per order strategy, so fusion rows are deduplicated."""
    if f"{value}_ref_status" not in table:
        return table.iloc[0:0]
    keys = ["instance", *rules(table), "fusion"] + ([] if strategy == "fusion" else ["order"])
    return _ok(table).dropna(subset=[value, base(table, value)]).drop_duplicates(keys)


def _ratios(rows: pd.DataFrame, value: str) -> pd.Series:
    best = rows[base(rows, value)]
    return (rows[value] / best.where(best > 0)).astype(float)


def _figure(nrows: int, ncols: int, height: float = 3.6, **kwargs):
    with plt.rc_context(STYLE):
        return plt.subplots(nrows, ncols, figsize=(WIDTH, height * nrows), squeeze=False, **kwargs)


def _save(fig, path: Path, legend: list[str] | None = None) -> Path:
    """Lay out and write ``fig``; with ``legend``, one legend of those strategies above the panels."""
    for ax in fig.axes:
        for axis, scale, (low, high) in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()),
                                         (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
            if scale == "log":  # plain numbers (3, 20, 1e+06), not 3x10^0; at 1, 2, 5 x 10^k on short axes
                short = high / low < 300
                axis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5) if short else (1,), numticks=12))
                axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(ticker.NullFormatter())
    top = 1 - 0.5 / fig.get_figheight() if legend else 1
    fig.tight_layout(rect=(0, 0, 1, top))
    if legend:
        handles = [plt.Line2D([], [], color=colour(s), marker="o", ls="", ms=8) for s in legend]
        fig.legend(handles, legend, loc="upper center", ncol=min(len(legend), 7), frameon=False)
    fig.savefig(path)
    plt.close(fig)
    return path


#: the columns naming one problem of each kind (a fusion result is shared by its instance's cells)
PROBLEM_KEYS = {"fusion": ["instance"], "order": ["instance", "fusion"]}


def problem_count(rows: pd.DataFrame, strategy: str) -> int:
    """How many problems (not cells) ``rows`` compare: instances for fusion, an instance's kernels
    under one fusion strategy for orders."""
    return len(rows.drop_duplicates([*PROBLEM_KEYS[strategy], *rules(rows)]))


def coinciding(curves: dict[str, np.ndarray]) -> dict[str, str]:
    """Each strategy whose profile is another's (the same ratios) -> the first such strategy."""
    same: dict[str, str] = {}
    labels = list(curves)
    for i, label in enumerate(labels):
        for first in labels[:i]:
            if first not in same and len(curves[first]) == len(curves[label]) and \
                    np.allclose(curves[first], curves[label]):
                same[label] = first
                break
    return same


def profiles(table: pd.DataFrame, out: Path) -> Path | None:
    """Each curve starts at tau = 1 with a marker at its share there (the problems where the
    strategy is at the best known), inside the axes; a curve equal to another is drawn dashed on
    top of it and the legend says which it equals."""
    kinds = [(s, v) for s, v in (("fusion", "traffic"), ("order", "peak")) if not compared(table, v, s).empty]
    if not kinds:
        return None
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, 2, 4.2)
        for ax, (strategy, value) in zip(axes[0], kinds):
            rows = compared(table, value, strategy)
            curves = {label: np.sort(_ratios(group, value).dropna().to_numpy()) for label, group in rows.groupby(strategy)}
            curves = {label: ratios for label, ratios in curves.items() if len(ratios)}
            right = max(2.0, 1.15 * max((r[-1] for r in curves.values()), default=1.0))
            same = coinciding(curves)
            for i, (label, ratios) in enumerate(curves.items()):
                taus = np.r_[1.0, np.unique(ratios[ratios > 1.0])]
                share = np.searchsorted(ratios, taus, side="right") / len(ratios)
                first = same.get(label)
                # each curve thinner than the one before, on top of it: where two overlap both colours show
                ax.step(np.r_[taus, right], np.r_[share, share[-1]], where="post", color=colour(label),
                        lw=max(1.2, 4.0 - 0.8 * i), ls=(0, (4, 3)) if first else "-", zorder=2 + i,
                        label=f"{label} (= {first}'s curve)" if first else label)
                ax.plot([1.0, taus[-1]], [share[0], share[-1]], ls="", marker="o" if not first else "x",
                        ms=7, color=colour(label), zorder=4, clip_on=False)
            ax.set_xscale("log")
            ax.set_xlim(0.94, right)
            ax.set_ylim(-0.02, 1.06)
            ax.axvline(1.0, color="gray", lw=0.8, ls=":", zorder=1)
            ax.set_xlabel(f"tau: {value} / best known {value}")
            ax.set_ylabel("share of problems within tau")
            ax.set_title(f"{strategy}: {problem_count(rows, strategy)} problems, {len(curves)} strategies")
            ax.legend(loc="lower right")
        for ax in axes[0][len(kinds):]:
            ax.set_visible(False)
        return _save(fig, out / "profiles.png")


def _panels(rows: pd.DataFrame) -> pd.Series:
    """The panel of each row: its family, or ``programs`` for the program suite."""
    return rows["family"].where(rows["kind"] != "program", "programs")


def _dodge(labels: list[str], width: float) -> dict[str, float]:
    """Sideways offsets that spread the strategies' dots of one size."""
    step = width / max(len(labels), 1)
    return {s: (i - (len(labels) - 1) / 2) * step for i, s in enumerate(labels)}


def _size_axis(ax, sizes: list, size: str) -> None:
    """The x axis of instance sizes; a panel of one size shows that size alone, centred."""
    ax.set_xlabel(f"instance size ({size})")
    if len(sizes) == 1:
        ax.set_xticks(sizes)
        ax.set_xlim(sizes[0] - 1, sizes[0] + 1)
        ax.set_xlabel(f"instance size ({size}; one size)")


def clip_limit(group: pd.DataFrame, strategy: str, clipped: str | None) -> float | None:
    """With ``clipped`` (a baseline far above the rest), where the gap axis ends: a little above
    the other strategies' worst gap (at least 5%); None when nothing needs clipping."""
    others = group.loc[group[strategy] != clipped, "gap"].dropna()
    mine = group.loc[group[strategy] == clipped, "gap"].dropna()
    limit = max(5.0, 1.25 * others.max()) if len(others) else None
    if clipped is None or limit is None or not len(mine) or mine.max() <= limit:
        return None
    return limit


def _gap(table: pd.DataFrame, out: Path, strategy: str, value: str, size: str,
         clipped: str | None = None) -> Path | None:
    """The gap panels; ``clipped``: a strategy whose gaps above the others' scale are drawn as
    triangles on the top edge (the baseline ``none``, up to several hundred percent)."""
    rows = compared(table, value, strategy)
    if rows.empty or size not in rows:
        return None
    rows = rows.dropna(subset=[size])
    if rows.empty:
        return None
    rows = rows.assign(panel=_panels(rows), gap=(_ratios(rows, value) - 1) * 100,
                       proven=rows[f"{value}_ref_status"] == "optimal")
    panels = sorted(rows["panel"].unique())
    labels = sorted(rows[strategy].unique())
    ncols = min(2, len(panels))
    fig, axes = _figure(-(-len(panels) // ncols), ncols, 3.4)
    for ax, panel in zip(axes.flat, panels):
        group = rows[rows["panel"] == panel]
        sizes = sorted(group[size].unique())
        spread = 0.6 * (min(np.diff(sizes)) if len(sizes) > 1 else 1)
        offsets = _dodge(labels, spread)
        limit = clip_limit(group, strategy, clipped)
        for label in labels:
            mine = group[group[strategy] == label].dropna(subset=["gap"])
            x = mine[size] + offsets[label]
            over = mine["gap"] > limit if limit is not None else pd.Series(False, index=mine.index)
            for shown, fill in ((mine["proven"] & ~over, colour(label)), (~mine["proven"] & ~over, "none")):
                ax.scatter(x[shown], mine.loc[shown, "gap"], facecolors=fill, edgecolors=colour(label), s=22)
            ax.scatter(x[over], np.full(int(over.sum()), limit), marker="^", color=colour(label), s=30, clip_on=False,
                       zorder=4)
            if limit is None or label != clipped:
                means = mine.groupby(size)["gap"].apply(lambda g: (np.exp(np.log1p(g / 100).mean()) - 1) * 100)
                ax.plot(means.index + offsets[label], means.to_numpy(), color=colour(label), lw=1.2)
        ax.axhline(0, color="gray", lw=0.8, ls="--")
        count = group["instance"].nunique()
        title = f"{panel} ({count} instance{'s' * (count != 1)}"
        if limit is not None:
            ax.set_ylim(-0.06 * limit, limit)
            top = group.loc[group[strategy] == clipped, "gap"].max()
            title += f")\n{clipped} above {limit:.0f}% on the edge (max {top:+.0f}%"
        elif group["gap"].max() < 5.0:  # all at the best known, or nearly: a readable scale
            ax.set_ylim(-0.3, 5.0)
        ax.set_title(title + ")")
        _size_axis(ax, sizes, size)
        ax.set_ylabel("gap to best known (%)")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    return _save(fig, out / f"{strategy}_gap.png", labels)


def fusion_gap(table: pd.DataFrame, out: Path) -> Path | None:
    return _gap(table, out, "fusion", "traffic", "nodes", clipped=BASELINES["fusion"])


def order_gap(table: pd.DataFrame, out: Path) -> Path | None:
    return _gap(table, out, "order", "peak", "tasks")


def order_peak(table: pd.DataFrame, out: Path) -> Path | None:
    rows = compared(table, "peak", "order")
    if rows.empty or "tasks" not in rows:
        return None
    rows = rows[rows["tasks"].notna() & (rows["peak"] > 0)]
    if rows.empty:
        return None
    rows = rows.assign(panel=_panels(rows))
    panels = sorted(rows["panel"].unique())
    labels = sorted(rows["order"].unique())
    ncols = min(2, len(panels))
    fig, axes = _figure(-(-len(panels) // ncols), ncols, 3.4)
    for ax, panel in zip(axes.flat, panels):
        group = rows[rows["panel"] == panel]
        sizes = sorted(group["tasks"].unique())
        spread = 0.7 * (min(np.diff(sizes)) if len(sizes) > 1 else 1)
        offsets = _dodge(labels, spread)
        for label in labels:
            mine = group[group["order"] == label]
            ax.scatter(mine["tasks"] + offsets[label], mine["peak"], color=colour(label), s=16, zorder=3)
        refs = group.drop_duplicates(["instance", *rules(group), "fusion"])
        proven = refs["peak_ref_status"] == "optimal"
        for mask, shade in ((proven, "black"), (~proven, "gray")):
            ax.hlines(refs.loc[mask, "peak_ref"], refs.loc[mask, "tasks"] - spread / 2,
                      refs.loc[mask, "tasks"] + spread / 2, colors=shade, lw=1.5, zorder=4)
        if "peak_ref_bound" in refs:
            below = refs[refs["peak_ref_bound"].notna() & (refs["peak_ref_bound"] < refs["peak_ref"])]
            ax.scatter(below["tasks"], below["peak_ref_bound"].clip(lower=1), marker="v", color="gray", s=30, zorder=2)
        ax.set_yscale("log")
        ax.set_title(f"{panel} ({refs['instance'].nunique()} instance{'s' * (refs['instance'].nunique() != 1)})")
        _size_axis(ax, sizes, "tasks")
        ax.set_ylabel("peak (bytes)")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    return _save(fig, out / "order_peak.png", labels)


def solver_time(table: pd.DataFrame, out: Path) -> Path | None:
    rows = _ok(table)
    kinds = [k for k in (("nodes", "fusion_seconds", "fusion"), ("tasks", "order_seconds", "order"))
             if k[1] in rows and not rows.dropna(subset=[k[0], k[1]]).empty]
    if not kinds:
        return None
    fig, axes = _figure(1, 2, 4.0)
    for ax, (size, seconds, strategy) in zip(axes[0], kinds):
        # one point per (instance, strategy): the same fusion solve appears once per order strategy
        points = rows.dropna(subset=[size, seconds]).drop_duplicates(["instance", strategy, size])
        for label, group in points.groupby(strategy):
            ax.scatter(group[size], group[seconds].clip(lower=1e-6), label=label, s=18, alpha=0.8,
                       color=colour(label))
        ax.set_yscale("log")
        ax.set_xlabel(f"instance size ({size})")
        ax.set_ylabel("solve seconds")
        ax.set_title(f"{strategy} strategies")
        ax.legend()
    for ax in axes[0][len(kinds):]:
        ax.set_visible(False)
    return _save(fig, out / "solver_time.png")


def kernel_time(table: pd.DataFrame, out: Path) -> Path | None:
    if "kernel_time_median" not in table:
        return None
    rows = _ok(table).dropna(subset=["kernel_time_median", "traffic"]).drop_duplicates(
        ["instance", *rules(table), "fusion"])
    if rows.empty:
        return None
    fig, axes = _figure(1, 1, 5.0)
    ax = axes[0][0]
    for label, group in rows.groupby("fusion"):
        median = group["kernel_time_median"] * 1e6
        spread = [median - group["kernel_time_min"] * 1e6, group["kernel_time_max"] * 1e6 - median] \
            if "kernel_time_min" in group else None
        ax.errorbar(group["traffic"], median, yerr=spread, fmt="o", ms=5, capsize=3, label=label, alpha=0.85,
                    color=colour(label))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("modeled traffic (bytes, Definition 7.3)")
    ax.set_ylabel("time per call (us)")
    ax.legend(title="fusion")
    return _save(fig, out / "kernel_time.png")


def time_tau(table: pd.DataFrame, out: Path) -> Path | None:
    taus = per_instance(table).dropna(subset=["tau"])
    if taus.empty:
        return None
    families = sorted(taus["family"].unique())
    fig, axes = _figure(1, 1, 4.0)
    ax = axes[0][0]
    spread = np.random.default_rng(0)
    for x, family in enumerate(families):
        mine = taus.loc[taus["family"] == family, "tau"].to_numpy(dtype=float)
        ax.scatter(x + spread.uniform(-0.2, 0.2, len(mine)), mine, color="#0072B2", s=22, alpha=0.8)
        ax.hlines(mine.mean(), x - 0.3, x + 0.3, colors="black", lw=2)
    ax.axhline(0, color="gray", lw=0.8, ls="--")
    ax.set_xticks(range(len(families)), [f"{f} ({(taus['family'] == f).sum()})" for f in families],
                  rotation=30 if len(families) > 4 else 0, ha="right" if len(families) > 4 else "center")
    ax.set_ylim(-1.1, 1.1)
    ax.set_ylabel("Kendall tau (traffic, time)")
    ax.set_title("modeled traffic against measured time, per instance")
    return _save(fig, out / "time_tau.png")


def pareto(table: pd.DataFrame, out: Path, panels: int = 8) -> Path | None:
    if "pareto_front" not in table:
        return None
    rows = _ok(table).dropna(subset=["pareto_front", "traffic", "point_peak"])
    if rows.empty:
        return None
    problems = rows.drop_duplicates("pareto_problem").sort_values(["family", "instance"]).head(panels)
    labels = sorted(rows["fusion"].unique())
    ncols = min(2, len(problems))
    fig, axes = _figure(-(-len(problems) // ncols), ncols, 3.6)
    for ax, (_, problem) in zip(axes.flat, problems.iterrows()):
        front = np.array(json.loads(problem["pareto_front"]), dtype=float).reshape(-1, 2)
        proven = bool(problem["pareto_proven"])
        if len(front):
            shade = "black" if proven else "gray"
            ax.step(front[:, 0], front[:, 1], where="post", color=shade, ls="-" if proven else "--", lw=1.2, zorder=2)
            ax.scatter(front[:, 0], front[:, 1], marker="s", s=110, facecolors="none", edgecolors=shade, zorder=4)
        mine = rows[rows["pareto_problem"] == problem["pareto_problem"]]
        for i, label in enumerate(labels):  # later strategies smaller, so coinciding points stay visible
            group = mine[mine["fusion"] == label]
            ax.scatter(group["traffic"], group["point_peak"], color=colour(label), s=max(100 - 35 * i, 14), zorder=3)
        ax.set_title(f"{problem['instance']} ({len(front)} point{'s' * (len(front) != 1)}{'' if proven else ', unproven'})")
        ax.set_xlabel("traffic (bytes)")
        ax.set_ylabel("peak (bytes)")
    for ax in axes.flat[len(problems):]:
        ax.set_visible(False)
    return _save(fig, out / "pareto.png", labels)


FIGURES = (profiles, fusion_gap, order_gap, order_peak, pareto, kernel_time, time_tau, solver_time)


def plot_all(table: pd.DataFrame, out: str | Path) -> list[Path]:
    """Draw every figure the table has data for into ``out``; return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with plt.rc_context(STYLE):
        return [path for figure in FIGURES if (path := figure(table, out)) is not None]
