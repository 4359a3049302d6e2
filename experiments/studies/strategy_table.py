"""The registered strategies on every shipped whole-model graph, through ``stax.scheduler.strategies``.

For each graph of ``instances/data/models`` and ``instances/data/large`` and each strategy a user
reaches by name, one row: its status, value (fusion traffic, Definition 7.3; order peak,
Definition 7.5), certified lower bound, gap (value - bound) / value and the wall-clock seconds of
``run_fusion`` / ``run_order`` (validation included).  Fusion strategies: cpsat, greedy and mwc;
order strategies: cpsat and dp, each on the order files and on the kernels of the fusion files
(every node its own kernel).  Strategies that take one are given ``--time-limit``; ``kept``
says whether the call returned within 1.25 times it.  A strategy that refuses (dp, when it
cannot prove the order and has no limit) gets its error as the note.

    python -m experiments.studies.strategy_table                      # time limit 60 s
    python -m experiments.studies.strategy_table --time-limit 5 --graphs resnet-8-forward
    python -m experiments.studies.strategy_table --zoo --graphs zoo      # the real-model zoo only
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from instances.store import load, shipped
from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.scheduler.strategies import run_fusion, run_order
from experiments.textable import text_table

FUSION_STRATEGIES = ("cpsat", "greedy", "mwc")
ORDER_STRATEGIES = ("cpsat", "dp")
TIMED = {"cpsat", "mwc", "dp"}  # the strategies that take a time limit
SLACK = 1.25  # a call kept its limit when it returned within SLACK times it
HEADERS = ("graph", "problem", "size", "strategy", "status", "value", "bound", "gap", "seconds", "kept", "note")


@dataclass(frozen=True)
class Graph:
    """A shipped whole-model problem: its instance name, kind ("fusion" or "order") and problem."""

    name: str
    kind: str
    problem: FusionProblem | OrderProblem

    @property
    def size(self) -> int:
        return len(self.problem.nodes if isinstance(self.problem, FusionProblem) else self.problem.tasks)


def whole_model_graphs(only: tuple[str, ...] = (), zoo: bool = False) -> list[Graph]:
    """The fusion and order problems of the shipped whole-model files whose names contain one of
    ``only`` (all when empty).  ``data/large``'s order problems are those of ``data/models``.
    ``zoo``: also the real-model zoo's files (``data/torch/zoo``, each a fusion or an order problem)."""
    graphs = []
    for name in shipped():
        ours = name.startswith(("data/models/", "data/large/")) or (zoo and name.startswith("data/torch/zoo/"))
        if not ours or (only and not any(o in name for o in only)):
            continue
        inst = load(name)
        if inst.fusion is not None:
            graphs.append(Graph(name, "fusion", inst.fusion))
        if name.startswith("data/models/") or inst.fusion is None:
            graphs.append(Graph(name, "order", inst.order_problem()))
    return graphs


def measure(graph: Graph, strategy: str, time_limit: float, workers: int) -> dict[str, Any]:
    """One row: ``strategy`` on ``graph`` through ``run_fusion`` / ``run_order``."""
    params: dict[str, Any] = {"time_limit": time_limit} if strategy in TIMED else {}
    if strategy == "cpsat":
        params["workers"] = workers
    run = run_fusion if graph.kind == "fusion" else run_order
    began = time.perf_counter()
    row: dict[str, Any] = {"graph": graph.name, "problem": graph.kind, "size": graph.size, "strategy": strategy}
    try:
        result = run(strategy, graph.problem, **params)
    except StaxError as refused:
        return row | {"status": "refused", "seconds": time.perf_counter() - began, "note": str(refused)}
    seconds = time.perf_counter() - began
    value = result.cost if graph.kind == "fusion" else result.peak
    bound = None if result.bound is None else int(result.bound)
    return row | {"status": str(result.status), "value": value, "bound": bound,
                  "gap": None if bound is None else (value - bound) / value if value else 0.0,
                  "seconds": seconds, "kept": seconds <= SLACK * time_limit if strategy in TIMED else None,
                  "note": result.info.note}


def strategy_rows(graphs: list[Graph], time_limit: float, workers: int,
                  fusion: tuple[str, ...] = FUSION_STRATEGIES, order: tuple[str, ...] = ORDER_STRATEGIES,
                  echo: bool = False) -> list[dict[str, Any]]:
    """A row per graph and strategy of its kind (``echo``: print each row as it is measured)."""
    rows = []
    for graph in graphs:
        for strategy in fusion if graph.kind == "fusion" else order:
            rows.append(measure(graph, strategy, time_limit, workers))
            if echo:
                print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table (gap in percent, seconds to 0.1 s)."""
    def cell(row: dict[str, Any], column: str) -> object:
        value = row.get(column)
        if column == "gap" and value is not None:
            return f"{100 * value:.3f}%"
        if column == "seconds":
            return f"{value:.1f}"
        if column == "kept" and value is not None:
            return "yes" if value else "NO"
        return value
    return text_table(HEADERS, [[cell(row, c) for c in HEADERS] for row in rows],
                      right=("size", "value", "bound", "gap", "seconds"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds for each timed strategy")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT search workers")
    parser.add_argument("--graphs", nargs="*", default=(), help="only graphs whose names contain one of these")
    parser.add_argument("--zoo", action="store_true", help="also the real-model zoo (instances/data/torch/zoo)")
    parser.add_argument("--fusion", nargs="*", default=FUSION_STRATEGIES, help="fusion strategies to run")
    parser.add_argument("--order", nargs="*", default=ORDER_STRATEGIES, help="order strategies to run")
    args = parser.parse_args(argv)
    graphs = whole_model_graphs(tuple(args.graphs), args.zoo)
    if not graphs:
        raise SystemExit(f"no shipped whole-model graph matches {args.graphs}; see `stax instances`")
    print(f"time limit {args.time_limit:g} s, {args.workers} CP-SAT workers (timings on a shared machine are noisy)")
    print(format_table([]))
    rows = strategy_rows(graphs, args.time_limit, args.workers, tuple(args.fusion), tuple(args.order), echo=True)
    print("\n" + format_table(rows))


if __name__ == "__main__":
    main()
