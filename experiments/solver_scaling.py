"""How far the exact models go: the largest random DAG each solves to proven optimality in time.

For each family (layered, series-parallel) and growing size n, ``--seeds`` instances are solved
by the fusion model (CP-SAT, Definition 7.3) and the two order models (CP-SAT and the down-set
DP, Definition 7.5) with the larger time limit.  A model climbs the size ladder until some
instance of a size is not proven optimal within that limit.  Along the way every proven
optimum is compared with the heuristics: greedy fusion cost / optimal cost, and best-of-four
order peak / optimal peak (seed section 7.5).

    python -m experiments.solver_scaling            # limits 10 s and 60 s
    python -m experiments.solver_scaling --quick    # small ladder, limits 1 s and 3 s, < 1 minute
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from instances.dags import fusion_problem, layered_dag, order_problem, series_parallel_dag
from stax.errors import StaxError
from stax.strategy import run_fusion, run_order

FAMILIES = {"layered": layered_dag, "series-parallel": series_parallel_dag}
SIZES = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128)
QUICK_SIZES = (8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class Outcome:
    """One model on one instance: proven optimal or not, seconds, and heuristic / optimum."""

    optimal: bool
    seconds: float
    ratio: float | None


def fusion_cpsat(g, seed: int, limit: float, workers: int) -> Outcome:
    p = fusion_problem(g, seed)
    exact = run_fusion("cpsat", p, time_limit=limit, workers=workers)
    greedy = run_fusion("greedy", p).cost
    optimal = exact.status == "optimal"
    return Outcome(optimal, exact.seconds, greedy / exact.cost if optimal and exact.cost else None)


def order_model(name: str) -> Callable[..., Outcome]:
    def solve(g, seed: int, limit: float, workers: int) -> Outcome:
        p = order_problem(g, seed)
        params = {"time_limit": limit} | ({"workers": workers} if name == "cpsat" else {})
        try:
            exact = run_order(name, p, **params)
        except StaxError:  # the DP's guard: too many down-sets or out of time
            return Outcome(False, limit, None)
        best = run_order("best", p).peak
        optimal = exact.status == "optimal" and exact.seconds <= limit
        return Outcome(optimal, exact.seconds, best / exact.peak if optimal and exact.peak else None)
    return solve


MODELS = {"fusion cpsat": fusion_cpsat, "order cpsat": order_model("cpsat"), "order dp": order_model("dp")}


def climb(family: str, model: str, sizes: tuple[int, ...], seeds: int, limit: float, workers: int) -> list[dict]:
    """Rows (one per instance) for growing n until an instance is not proven optimal within ``limit``."""
    rows = []
    for n in sizes:
        outcomes = [MODELS[model](FAMILIES[family](n, seed), seed, limit, workers) for seed in range(seeds)]
        rows += [{"family": family, "model": model, "n": n, "seed": seed, "optimal": o.optimal,
                  "seconds": o.seconds, "ratio": o.ratio} for seed, o in enumerate(outcomes)]
        if not all(o.optimal for o in outcomes):
            break
    return rows


def largest(group: pd.DataFrame, limit: float) -> int | None:
    """The largest n whose every instance was proven optimal within ``limit`` seconds."""
    ok = group.groupby("n").apply(lambda g: bool((g.optimal & (g.seconds <= limit)).all()), include_groups=False)
    return max(ok.index[ok], default=None)


def summary(rows: pd.DataFrame, small: float, large: float) -> pd.DataFrame:
    table = []
    for (family, model), group in rows.groupby(["family", "model"], sort=False):
        ratios = group.ratio.dropna()
        table.append({"family": family, "model": model,
                      f"largest n <= {small:g} s": largest(group, small),
                      f"largest n <= {large:g} s": largest(group, large),
                      "tried up to n": group.n.max(),
                      "heuristic/optimal mean": round(ratios.mean(), 3) if len(ratios) else None,
                      "heuristic/optimal max": round(ratios.max(), 3) if len(ratios) else None})
    return pd.DataFrame(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small ladder, 1 seed, limits 1 s and 3 s")
    parser.add_argument("--seeds", type=int, default=3, help="instances per (family, n)")
    parser.add_argument("--limits", type=float, nargs=2, default=(10.0, 60.0), metavar=("SMALL", "LARGE"))
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT search workers")
    args = parser.parse_args(argv)
    sizes, seeds, (small, large) = SIZES, args.seeds, args.limits
    if args.quick:
        sizes, seeds, (small, large) = QUICK_SIZES, 1, (1.0, 3.0)
    rows = pd.DataFrame([row for family in FAMILIES for model in MODELS
                         for row in climb(family, model, sizes, seeds, large, args.workers)])
    detail = rows.pivot_table(index=["family", "n"], columns="model", values="seconds", aggfunc="max", sort=False)
    print("Seconds to prove optimality (max over seeds; the last size of a ladder may have failed):")
    print(detail.round(2).to_string())
    print("\nLargest size proven optimal, and heuristic/optimal ratios (fusion: greedy cost; "
          "order: best-of-four peak):")
    print(summary(rows, small, large).to_string(index=False))


if __name__ == "__main__":
    main()
