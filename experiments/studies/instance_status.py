"""Regenerate the instance library's status table (``instances/data/status.csv``, ``instances.status``).

    python -m experiments.studies.instance_status --time-limit 60            # every shipped instance
    python -m experiments.studies.instance_status --only gpt2 --redo         # recompute matching rows

Each problem of each shipped instance gets, in order: the bounds that need no solver
(compulsory traffic, the largest forced live set), the heuristics (greedy; the best of the
order heuristics), then the exact strategies through the registry (``run_fusion`` /
``run_order``: fusion ``cpsat``, which decomposes the problem into pieces, then ``mwc``; order
``dp``, then ``cpsat``, which runs dp's bounded search first), stopping at the first that proves the best value (``--every``: running them all).
Every attempt runs in its own process, killed at ``3 * time limit + 120`` s, and every answer
is validated and priced by the problem itself.

Resumable: a row whose problem content is unchanged is kept when it is solved or was given at
least the asked time limit (``--redo`` recomputes it: after a solver changes, so that the table
names the strategy that proves each row now), and the table is written after every row.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click
from tqdm import tqdm

from instances import store
from instances.status import (TABLE_PATH, Standing, StatusConflict, StatusRow, StatusTable, integral_bound,
                              problem_key, problems_of)
from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.scheduler.strategies import (Status, check_time_limit, fusion_strategies, order_strategies, run_fusion, run_order,
                           strategy_signature)

from experiments.sweep import provenance
from experiments.sweep.isolate import call_with_limit
from experiments.sweep.measure import write_atomic


@dataclass(frozen=True)
class Attempt:
    """One way to answer or bound a problem: ``exact`` ones are skipped once the row is solved."""

    name: str
    exact: bool
    run: Callable[[Any, float], dict[str, Any]]


def _registered(kind: str, name: str) -> Callable[[Any, float], dict[str, Any]]:
    """Run strategy ``name`` through the registry, with ``time_limit`` (and 2 workers) when it takes them."""
    registry, run = (fusion_strategies, run_fusion) if kind == "fusion" else (order_strategies, run_order)

    def attempt(problem: Any, time_limit: float) -> dict[str, Any]:
        signature = strategy_signature(registry.factory(name))
        takes = set(signature.parameters) if signature else set()
        params = {k: v for k, v in (("time_limit", time_limit), ("workers", 2)) if k in takes}
        return _answer(run(name, problem, **params))
    return attempt


def _answer(result: Any) -> dict[str, Any]:
    value = result.cost if hasattr(result, "cost") else result.peak
    return {"status": str(result.status), "value": value, "seconds": result.seconds,
            "bound": value if result.status == Status.OPTIMAL else result.bound}


def _compulsory(problem: FusionProblem, time_limit: float) -> dict[str, Any]:
    from solvers.fusion.bounds import compulsory_traffic
    began = time.perf_counter()
    return {"bound": compulsory_traffic(problem), "seconds": time.perf_counter() - began}


def _live_set(problem: OrderProblem, time_limit: float) -> dict[str, Any]:
    from solvers.order.decompose import live_set_lower_bound
    began = time.perf_counter()
    return {"bound": live_set_lower_bound(problem), "seconds": time.perf_counter() - began}


ATTEMPTS: dict[str, tuple[Attempt, ...]] = {
    "fusion": (Attempt("compulsory_traffic", False, _compulsory), Attempt("greedy", False, _registered("fusion", "greedy")),
               Attempt("cpsat", True, _registered("fusion", "cpsat")), Attempt("mwc", True, _registered("fusion", "mwc"))),
    "order": (Attempt("live_set_lower_bound", False, _live_set), Attempt("best", False, _registered("order", "best")),
              Attempt("dp", True, _registered("order", "dp")), Attempt("cpsat", True, _registered("order", "cpsat"))),
}


def _run_attempt(kind: str, index: int, problem: Any, time_limit: float) -> dict[str, Any]:
    """Attempt ``index`` of ``kind`` on ``problem`` (module-level, so a child process can run it)."""
    return ATTEMPTS[kind][index].run(problem, time_limit)


def solve_row(name: str, kind: str, problem: FusionProblem | OrderProblem, time_limit: float,
              isolated: bool = True, every: bool = False) -> StatusRow:
    """The status row of one problem: every attempt (module doc) until one proves the best value
    (with ``every``, all of them: the attempts column then compares every strategy)."""
    load = os.getloadavg()[0]
    attempts: dict[str, dict[str, Any]] = {}
    value = bound = None
    value_by = bound_by = ""
    value_seconds = bound_seconds = 0.0
    for index, attempt in enumerate(ATTEMPTS[kind]):
        if attempt.exact and not every and value is not None and value == bound:
            break
        if isolated:
            outcome, got = call_with_limit(_run_attempt, (kind, index, problem, time_limit), 3 * time_limit + 120)
        else:
            outcome, got = "ok", _run_attempt(kind, index, problem, time_limit)
        if outcome != "ok":
            attempts[attempt.name] = {"error": f"{outcome}: {str(got).strip().splitlines()[-1]}"}
            continue
        attempts[attempt.name] = got = got | {"seconds": round(got["seconds"], 3)}
        if got.get("value") is not None and (value is None or got["value"] < value):
            value, value_by, value_seconds = got["value"], attempt.name, got["seconds"]
        if got.get("bound") is not None and (bound is None or integral_bound(got["bound"]) > bound):
            bound, bound_by, bound_seconds = integral_bound(got["bound"]), attempt.name, got["seconds"]
    if value is None:
        raise StaxError(f"{name} ({kind}): no strategy gave an answer: {json.dumps(attempts)}")
    if bound is not None and bound > value:
        raise StatusConflict(f"{name} ({kind}): {bound_by} proves a bound {bound} above {value_by}'s value {value}, "
                             f"so one of them is wrong: {json.dumps(attempts)}")
    return StatusRow(instance=name, problem=kind, key=problem_key(problem), nodes=_size(problem),
                     buffers=len(problem.buffers), value=value, bound=bound or 0,
                     status=(Standing.SOLVED if value == (bound or 0) else Standing.OPEN).value, value_by=value_by,
                     value_seconds=round(value_seconds, 3), bound_by=bound_by, bound_seconds=round(bound_seconds, 3),
                     time_limit=time_limit, stax_version=provenance.code_version(), date=provenance.now(),
                     load_average=round(load, 2), attempts=json.dumps(attempts, sort_keys=True))


def _size(problem: FusionProblem | OrderProblem) -> int:
    return len(problem.nodes) if isinstance(problem, FusionProblem) else len(problem.tasks)


def regenerate(time_limit: float, only: str = "", redo: bool = False, path: Path = TABLE_PATH,
               isolated: bool = True, every: bool = False, echo: Callable[[str], None] = print) -> StatusTable:
    """Solve the rows of instances whose name contains ``only`` that the table at ``path`` lacks, that
    changed, or that are open with a shorter time limit (with ``redo``, all of them), writing the
    table after each; rows of instances no longer shipped are dropped."""
    names = store.shipped()
    table = StatusTable.load(path).only(names)
    chosen = [n for n in names if only in n]
    work = []
    for name in chosen:
        for kind, problem in problems_of(store.load(name)):
            row = table.row(name, kind)
            if redo or row is None or row.key != problem_key(problem) or (row.status == Standing.OPEN
                                                                           and row.time_limit < time_limit):
                work.append((name, kind, problem))
    echo(f"{len(chosen)} instances match, {len(work)} problems to solve at {time_limit:g} s; table {path}")
    for name, kind, problem in tqdm(work, unit="problem"):
        row = solve_row(name, kind, problem, time_limit, isolated, every)
        table = table.with_row(row, names)
        write_atomic(path, table.to_csv())
        echo(f"{name} {kind}: {row.status} value {row.value} bound {row.bound} ({row.bound_by}, {row.bound_seconds} s)")
    if not work:
        write_atomic(path, table.to_csv())
    return table


@click.command()
@click.option("--time-limit", type=float, default=60.0, show_default=True, help="Seconds per exact strategy")
@click.option("--only", default="", help="Only instances whose name contains this text")
@click.option("--redo", is_flag=True, help="Recompute the chosen rows even when they are up to date")
@click.option("--every", is_flag=True, help="Run every strategy, not only until one proves the row")
@click.option("--out", type=click.Path(dir_okay=False), default=str(TABLE_PATH), show_default=True)
def main(time_limit: float, only: str, redo: bool, every: bool, out: str) -> None:
    """Regenerate the status table of the shipped instances."""
    try:
        regenerate(check_time_limit(time_limit, "--time-limit"), only, redo, Path(out), every=every)
    except StaxError as exc:
        raise click.ClickException(str(exc))


if __name__ == "__main__":  # through the module's own name, so child processes find _run_attempt
    from experiments.studies.instance_status import main as run_main
    run_main()
