"""How far the exact models go: the largest random DAG each solves to proven optimality in time,
and what each exact solver proves (or bounds) on whole training graphs.

For each family (layered, series-parallel) and growing size n, ``--seeds`` instances are solved
by the fusion model (CP-SAT, Definition 7.3) and the two order models (CP-SAT and the down-set
DP, Definition 7.5) with the larger time limit.  A model climbs the size ladder until some
instance of a size is not proven optimal within that limit.  Along the way every proven
optimum is compared with the heuristics: greedy fusion cost / optimal cost, and best-of-four
order peak / optimal peak (spec section 7.5).

Second table, whole graphs: the synthetic training family (``instances/training.py``, 500 to
5,000 tasks) and the shipped whole-model graphs (``instances/data/models``).  Per graph and exact
solver: its status and gap (value - bound) / bound at each limit, the seconds it took, and the
gap of the best heuristic (fusion: greedy; order: best-of-four) to the best bound found.  The
order solvers are the decomposed, pruned down-set DP (``solvers.order.dp.bounded_order``: the
best heuristic order improved by exact windows, bounded by minimum cuts at its highest steps,
then the programme on the segments that can still set the peak), the strategy "cpsat" (the
same with CP-SAT on the segments the DP cannot finish), and its model alone
(``decompose=False``) warm-started from best-of-four; fusion is the strategy "cpsat" (CP-SAT on
each piece, ``solvers.fusion.decompose``: regions between extern separators, refined by
compatible sharing components) and its model alone (``decompose=False``, up to 500 nodes),
both with the compulsory-traffic bound.

First table, greedy Algorithm 7.1 at scale: on a chain, on a wider random family
(``instances.dags.local_dag``, forbidden pairs among near nodes) and on the chain with one
input every node reads (every pair shares a buffer: the window is what bounds the
candidates), 1,000 to 100,000 nodes, each size in a fresh process: seconds to build the
problem, wall and CPU seconds of ``run_fusion("greedy")`` (validation included) and CPU
microseconds per node, the kernels, whether the windowed partition equals the unbounded one
(``window=None``, up to ``UNBOUNDED_MAX`` nodes), and the process's peak RSS.

    python -m experiments.studies.solver_scaling            # limits 10 s and 60 s
    python -m experiments.studies.solver_scaling --quick    # small ladder and graphs, limits 1 s and 3 s
    python -m experiments.studies.solver_scaling --greedy-only
"""
from __future__ import annotations

import argparse
import multiprocessing
import resource
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from instances.dags import chain_dag, fusion_problem, layered_dag, local_dag, order_problem, series_parallel_dag
from instances.store import load, shipped
from instances.training import training_fusion, training_order
from solvers.fusion.bounds import compulsory_traffic
from solvers.order.decompose import live_set_lower_bound
from solvers.order.dp import bounded_order
from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.scheduler.strategies import FusionResult, OrderResult, run_fusion, run_order

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


TRAINING_SIZES, QUICK_TRAINING_SIZES = (500, 1000, 2000, 5000), (300, 1000)
FUSION_NODES_MAX = 500  # CP-SAT's fusion model alone has a literal per node pair: skipped on larger graphs
TRAINING_FUSION_MAX = 2000  # building the synthetic FusionProblem takes long beyond


GREEDY_FAMILIES = {"chain": lambda n, seed: chain_dag(n), "local": local_dag, "chain+shared": lambda n, seed: chain_dag(n)}
GREEDY_SIZES, QUICK_GREEDY_SIZES = (1000, 2000, 10_000, 100_000), (1000, 2000, 10_000)
#: up to how many nodes the unbounded greedy is run beside (on the shared input it has n^2 / 2 pairs)
UNBOUNDED_MAX = {"chain": 10_000, "local": 10_000, "chain+shared": 0}
FORBIDDEN_SPAN = 16  # forbidden pairs are drawn among nodes this close, so a problem's size stays linear


def greedy_row(family: str, n: int, seed: int = 0) -> dict:
    """One greedy run on a fresh problem, in the calling process (run each in its own for its peak RSS)."""
    start = time.perf_counter()
    problem = fusion_problem(GREEDY_FAMILIES[family](n, seed), seed, forbidden_span=FORBIDDEN_SPAN,
                             shared_input=family.endswith("+shared"))
    built = time.perf_counter() - start
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_fusion("greedy", problem)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    same = run_fusion("greedy", problem, window=None).partition == result.partition if n <= UNBOUNDED_MAX[family] else None
    return {"family": family, "nodes": n, "buffers": len(problem.buffers), "build s": round(built, 2),
            "greedy s": round(wall, 2), "cpu s": round(cpu, 2), "cpu us/node": round(1e6 * cpu / n),
            "kernels": len(result.partition), "= unbounded": same,
            "peak RSS MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def greedy_table(sizes: tuple[int, ...]) -> pd.DataFrame:
    """``greedy_row`` for every family and size, each in a fresh interpreter."""
    context = multiprocessing.get_context("spawn")
    rows = []
    for family in GREEDY_FAMILIES:
        for n in sizes:
            with context.Pool(1) as pool:
                rows.append(pool.apply(greedy_row, (family, n)))
    return pd.DataFrame(rows)


def whole_graphs(quick: bool) -> list[tuple[str, OrderProblem | None, FusionProblem | None]]:
    """(name, OrderProblem or None, FusionProblem or None): the training family, the shipped
    models, and the large fusion files (``data/large``, whose order problems ship in ``data/models``)."""
    graphs = [(f"training/{n}/0", training_order(n, 0), training_fusion(n, 0) if n <= TRAINING_FUSION_MAX else None)
              for n in (QUICK_TRAINING_SIZES if quick else TRAINING_SIZES)]
    for name in shipped():
        if name.startswith("data/models/") and not (quick and "forward" not in name):
            inst = load(name)
            graphs.append((name, inst.order_problem(), inst.fusion))
        elif name.startswith("data/large/") and not quick:
            graphs.append((name, None, load(name).fusion))
    return graphs


def gap(value: float, bound: float | None) -> float | None:
    return None if bound is None else (value - bound) / bound if bound else 0.0


Answer = tuple[str, int, float]  # status, value, certified lower bound
ORDER_SOLVERS: dict[str, Callable[[OrderProblem, float, int], OrderResult]] = {
    "decomposed dp": lambda p, limit, workers: bounded_order(p, time_limit=limit),
    "cpsat": lambda p, limit, workers: run_order("cpsat", p, time_limit=limit, workers=workers),
    "cpsat decompose=False": lambda p, limit, workers: run_order("cpsat", p, time_limit=limit, workers=workers,
                                                                 decompose=False),
}
FUSION_SOLVERS: dict[str, Callable[[FusionProblem, float, int], FusionResult]] = {
    "cpsat": lambda p, limit, workers: run_fusion("cpsat", p, time_limit=limit, workers=workers),
    "cpsat decompose=False": lambda p, limit, workers: run_fusion("cpsat", p, time_limit=limit, workers=workers,
                                                                  decompose=False),
}


def solver_rows(head: dict, solvers: dict[str, Callable[[float], tuple[Answer, float]]], heuristic: int,
                bound: float, limits: tuple[float, float]) -> list[dict]:
    """One row per solver: status, gap and seconds at each limit (a proof within the smaller
    limit stands for both), and the heuristic's gap to the best bound any solver found."""
    rows = []
    for solver, solve in solvers.items():
        row = head | {"solver": solver}
        for limit in limits:
            (status, value, lower), seconds = solve(limit)
            bound = max(bound, lower)
            for at in (limits if status == "optimal" else (limit,)):
                row |= {f"status {at:g} s": status, f"gap {at:g} s": gap(value, lower), f"seconds {at:g} s": round(seconds, 2)}
            if status == "optimal":
                break
        rows.append(row)
    return [row | {"heuristic gap": gap(heuristic, bound)} for row in rows]


def order_rows(name: str, p: OrderProblem, limits: tuple[float, float], workers: int) -> list[dict]:
    def runner(solver: str) -> Callable[[float], tuple[Answer, float]]:
        def solve(limit: float) -> tuple[Answer, float]:
            r = ORDER_SOLVERS[solver](p, limit, workers)
            return (r.status, r.peak, r.bound or 0.0), r.seconds
        return solve
    head = {"graph": name, "problem": "order", "nodes": len(p.tasks)}
    return solver_rows(head, {s: runner(s) for s in ORDER_SOLVERS}, run_order("best", p).peak,
                       float(live_set_lower_bound(p)), limits)


def fusion_rows(name: str, p: FusionProblem, limits: tuple[float, float], workers: int) -> list[dict]:
    compulsory = compulsory_traffic(p)

    def runner(solver: str) -> Callable[[float], tuple[Answer, float]]:
        def solve(limit: float) -> tuple[Answer, float]:
            r = FUSION_SOLVERS[solver](p, limit, workers)
            return (r.status, r.cost, max(r.bound or 0.0, compulsory)), r.seconds
        return solve
    head = {"graph": name, "problem": "fusion", "nodes": len(p.nodes)}
    solvers = [s for s in FUSION_SOLVERS if s != "cpsat decompose=False" or len(p.nodes) <= FUSION_NODES_MAX]
    return solver_rows(head, {s: runner(s) for s in solvers}, run_fusion("greedy", p).cost, compulsory, limits)


def whole_graph_table(quick: bool, limits: tuple[float, float], workers: int) -> pd.DataFrame:
    rows = []
    for name, order, fusion in whole_graphs(quick):
        if order is not None:
            rows += order_rows(name, order, limits, workers)
        if fusion is not None:
            rows += fusion_rows(name, fusion, limits, workers)
    table = pd.DataFrame(rows)
    for column in table.columns:
        if column.startswith(("gap", "heuristic")):
            table[column] = table[column].map(lambda v: None if v is None or v != v else f"{100 * v:.2f}%")
    return table


def closing_note(table: pd.DataFrame, large: float) -> str:
    """The largest real-model graph each problem proved within ``large`` seconds, beside MODeL's
    ILP (Gurobi), which orders OPT's graph of 2,043 operators in 1,813 s."""
    lines = []
    for problem in ("order", "fusion"):
        proven = table[(table.problem == problem) & (table[f"status {large:g} s"] == "optimal")
                       & table.graph.str.startswith("data/")]
        if proven.empty:
            lines.append(f"{problem}: no real-model graph proven within {large:g} s")
            continue
        top = proven.sort_values(["nodes", f"seconds {large:g} s"], ascending=[False, True]).iloc[0]
        lines.append(f"{problem}: largest real-model graph proven, {top.graph} ({top.nodes} nodes) by "
                     f"{top.solver} in {top[f'seconds {large:g} s']:g} s")
    lines.append("MODeL (ILP, Gurobi) orders OPT's graph of 2,043 operators in 1,813 s.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small ladder, 1 seed, limits 1 s and 3 s")
    parser.add_argument("--seeds", type=int, default=3, help="instances per (family, n)")
    parser.add_argument("--limits", type=float, nargs=2, default=(10.0, 60.0), metavar=("SMALL", "LARGE"))
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT search workers")
    parser.add_argument("--whole-graphs-only", action="store_true", help="skip the ladder of random DAGs")
    parser.add_argument("--greedy-only", action="store_true", help="only the table of greedy at scale")
    args = parser.parse_args(argv)
    sizes, seeds, (small, large) = SIZES, args.seeds, args.limits
    if args.quick:
        sizes, seeds, (small, large) = QUICK_SIZES, 1, (1.0, 3.0)
    print("Greedy Algorithm 7.1 (window 64) at scale, each size in a fresh process (a shared machine: noisy):")
    print(greedy_table(QUICK_GREEDY_SIZES if args.quick else GREEDY_SIZES).to_string(index=False))
    if args.greedy_only:
        return
    if not args.whole_graphs_only:
        rows = pd.DataFrame([row for family in FAMILIES for model in MODELS
                             for row in climb(family, model, sizes, seeds, large, args.workers)])
        detail = rows.pivot_table(index=["family", "n"], columns="model", values="seconds", aggfunc="max", sort=False)
        print("Seconds to prove optimality (max over seeds; the last size of a ladder may have failed):")
        print(detail.round(2).to_string())
        print("\nLargest size proven optimal, and heuristic/optimal ratios (fusion: greedy cost; "
              "order: best-of-four peak):")
        print(summary(rows, small, large).to_string(index=False))
    print("\nWhole graphs: status and gap (value - bound) / bound at each limit, seconds, and the best "
          "heuristic's gap to the best bound found (timings on a shared machine are noisy):")
    table = whole_graph_table(args.quick, (small, large), args.workers)
    print(table.to_string(index=False))
    print("\n" + closing_note(table, large))


if __name__ == "__main__":
    main()
