"""Check Theorem 7.1 and Proposition 7.4 numerically on seeded graphs; print a table, save plots.

Statements checked, one row per graph:

* ``thm7.1``: the least fusion cost of the reduced instance (``cpsat``) is exactly twice the
  least multiway cut (CP-SAT), and the proof's partition is valid and attains it;
* ``isolating``: the isolating-cut weight is at most (2 - 2/k) times the least cut (k = 3);
* ``prop7.4``: the least peak over all orders (``dp``, the exact down-set DP) lies in
  [K(vs+1), K(vs+1) + |F|], and the proof's order stays <= the upper bound.

On the reduced instances of Theorem 7.1 it also records the cost of the ``greedy`` and ``mwc``
fusion strategies relative to the optimum.  Usage::

    python -m experiments.studies.check_reductions --quick          # < 1 minute
    python -m experiments.studies.check_reductions          # 200 graphs per statement, a few minutes
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import pandas as pd  # noqa: E402

from instances.graphs import FAMILIES, choose_terminals  # noqa: E402
from solvers.fusion.multiway_cut import exact_multiway_cut, isolating_multiway_cut  # noqa: E402
from solvers.theory.reductions import (fusion_from_multiway_cut, order_from_separation,  # noqa: E402
                                order_from_vertex_separation, partition_from_cut)
from solvers.theory.vertex_separation import vs_dp  # noqa: E402
from stax.scheduler.strategies import run_fusion, run_order  # noqa: E402

FUSION_SIZES = {"quick": (5, 7), "full": (5, 7, 9, 11, 13)}
ORDER_SIZES = {"quick": (4, 5), "full": (4, 5, 6, 7, 8)}
SEEDS = {"quick": 5, "full": 10}


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def graphs(sizes: tuple[int, ...], seeds: int) -> Iterator[tuple[str, int, int, nx.Graph]]:
    for family, make in FAMILIES.items():
        for n in sizes:
            for seed in range(seeds):
                yield family, n, seed, make(n, seed)


def check_fusion(family: str, n: int, seed: int, h: nx.Graph, time_limit: float) -> list[dict[str, Any]]:
    """Rows for Theorem 7.1 and for the isolating-cut guarantee on one graph."""
    terminals = choose_terminals(h, seed)
    cut, t_cut = timed(exact_multiway_cut, h, terminals)
    approx = isolating_multiway_cut(h, terminals)
    reduction = fusion_from_multiway_cut(h, terminals)
    problem = reduction.problem
    optimum, t_fusion = timed(run_fusion, "cpsat", problem, time_limit=time_limit, workers=1)
    proof = problem.validate(partition_from_cut(reduction, cut.edges))
    base = {"family": family, "n": h.number_of_nodes(), "m": h.number_of_edges(), "seed": seed}
    fusion_row = base | {
        "statement": "thm7.1", "seconds": t_fusion, "proven": optimum.status == "optimal",
        "held": optimum.cost == 2 * cut.weight and problem.cost(proof) == 2 * cut.weight,
        "optimum": optimum.cost,
    }
    for strategy, params in (("greedy", {}), ("mwc", {}), ("mwc-isolating", {"method": "isolating"})):
        result = run_fusion(strategy.split("-")[0], problem, **params)
        fusion_row[f"ratio_{strategy}"] = result.cost / optimum.cost if optimum.cost else 1.0
    k = len(terminals)
    isolating_row = base | {
        "statement": "isolating", "seconds": t_cut, "proven": cut.status == "optimal",
        "held": k * approx.weight <= (2 * k - 2) * cut.weight,
        "ratio_isolating": approx.weight / cut.weight if cut.weight else 1.0,
    }
    return [fusion_row, isolating_row]


def check_order(family: str, n: int, seed: int, h: nx.Graph) -> dict[str, Any]:
    """One row for Proposition 7.4 on one graph (isolated vertices cannot occur: graphs are connected)."""
    reduction = order_from_vertex_separation(h)
    separation = vs_dp(h)
    low, high = reduction.bounds(separation.vs)
    proof = reduction.problem.peak(reduction.problem.validate(order_from_separation(reduction, separation.order)))
    optimum, seconds = timed(run_order, "dp", reduction.problem)
    return {"family": family, "n": h.number_of_nodes(), "m": h.number_of_edges(), "seed": seed,
            "statement": "prop7.4", "seconds": seconds, "proven": optimum.status == "optimal",
            "held": low <= optimum.peak <= high and proof <= high, "vs": separation.vs,
            "peak_position": (optimum.peak - low) / (high - low)}


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """The table: per statement and family, sizes, graphs checked, held, exact-solver times."""
    grouped = rows.groupby(["statement", "family"], sort=False)
    return pd.DataFrame({
        "n": grouped["n"].agg(lambda s: f"{s.min()}-{s.max()}"),
        "|E|": grouped["m"].agg(lambda s: f"{s.min()}-{s.max()}"),
        "checked": grouped.size(),
        "held": grouped["held"].sum(),
        "proven": grouped["proven"].sum(),
        "median s": grouped["seconds"].median().round(3),
        "max s": grouped["seconds"].max().round(3),
    }).reset_index()


def plot_ratios(rows: pd.DataFrame, columns: list[str], title: str, path: Path) -> None:
    """One box per (family, column) of cost ratios to the optimum."""
    families = list(FAMILIES)
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(families) * len(columns) / 2, 4))
    data, labels = [], []
    for family in families:
        for column in columns:
            data.append(rows.loc[rows["family"] == family, column].dropna())
            labels.append(f"{family}\n{column.removeprefix('ratio_')}")
    ax.boxplot(data, showmeans=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_ylabel("cost / optimum")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few graphs per family (under a minute)")
    parser.add_argument("--seeds", type=int, help="seeds per family and size (default 3 quick, 10 full)")
    parser.add_argument("--time-limit", type=float, default=30.0, help="CP-SAT seconds per fusion instance")
    parser.add_argument("--out", type=Path, default=Path("results/reductions"), help="directory for CSV and plots")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    seeds = args.seeds or SEEDS[mode]
    args.out.mkdir(parents=True, exist_ok=True)

    rows: list[dict[str, Any]] = []
    for family, n, seed, h in graphs(FUSION_SIZES[mode], seeds):
        rows += check_fusion(family, n, seed, h, args.time_limit)
    for family, n, seed, h in graphs(ORDER_SIZES[mode], seeds):
        rows.append(check_order(family, n, seed, h))
    frame = pd.DataFrame(rows)
    frame.to_csv(args.out / "rows.csv", index=False)
    table = summary(frame)
    print(table.to_string(index=False))
    failed = frame[~frame["held"]]
    if len(failed):
        print("statements that did not hold:\n" + failed[["statement", "family", "n", "m", "seed", "proven"]].to_string())
    plot_ratios(frame[frame["statement"] == "isolating"], ["ratio_isolating"],
                "isolating-cut weight / least multiway cut (bound 4/3)", args.out / "isolating_ratio.png")
    plot_ratios(frame[frame["statement"] == "thm7.1"], ["ratio_greedy", "ratio_mwc", "ratio_mwc-isolating"],
                "fusion cost / optimum on Theorem 7.1 instances", args.out / "fusion_ratios.png")
    fusion = frame[frame["statement"] == "thm7.1"]
    for column in ("ratio_greedy", "ratio_mwc", "ratio_mwc-isolating"):
        print(f"{column.removeprefix('ratio_'):>14}: optimal on {(fusion[column] == 1).sum()}/{len(fusion)}, "
              f"mean ratio {fusion[column].mean():.3f}, worst {fusion[column].max():.3f}")
    print(f"wrote {args.out / 'rows.csv'}, {args.out / 'isolating_ratio.png'}, {args.out / 'fusion_ratios.png'}")
    return table


if __name__ == "__main__":
    main()
