"""Peak memory of the four candidate orders of spec 7.5 (original, lpmf, bfs, dfs), relative to
the best of them, on random DAGs and on the compiled program suite; how often each wins.

    python -m experiments.studies.order_table [--instances 50] [--programs]
"""
from __future__ import annotations

import argparse

import pandas as pd

from instances.dags import layered_dag, order_problem, series_parallel_dag
from stax.scheduler.strategies import run_order

CANDIDATES = ("original", "lpmf", "bfs", "dfs")


def peaks(problem) -> dict[str, int]:
    return {name: run_order(name, problem).peak for name in CANDIDATES}


def dag_rows(count: int) -> list[dict]:
    rows = []
    for seed in range(count):
        n = 20 + (seed * 37) % 181  # 20..200 nodes
        maker = layered_dag if seed % 2 == 0 else series_parallel_dag
        problem = order_problem(maker(n, seed), seed)
        rows.append({"instance": problem.name, "family": maker.__name__, "tasks": n, **peaks(problem)})
    return rows


def program_rows(size: int) -> list[dict]:
    import stax
    from instances.programs import PROGRAMS
    rows = []
    for name, program in PROGRAMS.items():
        compiled = stax.compile(program.fn, *program.inputs(size), order="original")
        rows.append({"instance": name, "family": "program", "tasks": len(compiled.order_problem.tasks),
                     **peaks(compiled.order_problem)})
    return rows


def summarize(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    best = table[list(CANDIDATES)].min(axis=1)
    for name in CANDIDATES:
        table[f"{name}/best"] = table[name] / best.where(best > 0, 1)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=50, help="random DAGs, 20 to 200 nodes (default 50)")
    parser.add_argument("--programs", action="store_true", help="also the program suite (compiles it)")
    parser.add_argument("--size", type=int, default=256, help="size of the suite's programs with --programs (default 256)")
    args = parser.parse_args()
    rows = dag_rows(args.instances) + (program_rows(args.size) if args.programs else [])
    table = summarize(rows)
    ratio_cols = [f"{n}/best" for n in CANDIDATES]
    for family, group in table.groupby("family"):
        best = group[list(CANDIDATES)].min(axis=1)
        wins = {n: int((group[n] == best).sum()) for n in CANDIDATES}
        print(f"\n{family}: {len(group)} instances, {group['tasks'].min()}-{group['tasks'].max()} kernels")
        print(f"{'order':10s} {'mean peak/best':>15s} {'worst':>8s} {'wins (ties count)':>18s}")
        for name, col in zip(CANDIDATES, ratio_cols):
            print(f"{name:10s} {group[col].mean():15.3f} {group[col].max():8.3f} {wins[name]:18d}")


if __name__ == "__main__":
    main()
