"""Measure one cell: solve (or compile and run) an instance with a fusion and an order strategy.

Columns (``None`` where a measure does not apply, e.g. kernel time of an abstract instance):

- fusion: ``nodes``, ``kernels``, ``traffic`` (Definition 7.3, bytes), ``traffic_unfused``,
  ``fusion_status``, ``fusion_bound``, ``fusion_seconds``;
- order: ``tasks``, ``peak`` (Definition 7.5 estimate, bytes), ``order_status``, ``order_bound``,
  ``order_seconds``;
- reference (measure ``optimum``): ``traffic_ref`` / ``peak_ref`` from CP-SAT (for orders
  ``dp`` first when the config's ``reference.order`` says so) with its status (``*_ref_status``:
  ``optimal``, ``bounded`` or ``heuristic``, see :func:`solve_reference`), a valid lower bound
  (``*_ref_bound``) and seconds, and the cell's ``*_gap_abs`` = value - reference and
  ``*_gap_rel`` = gap / reference; ``*_problem`` is the content key of the problem compared;
- Pareto front (measure ``pareto``, fusion problems of abstract instances and files up to
  ``reference.pareto_nodes`` nodes): ``pareto_front`` (the exact traffic-peak front's points as
  JSON, computed once per problem like a reference, :func:`solve_pareto`), ``pareto_proven``,
  ``pareto_seconds``, the cell's point (``traffic``, ``point_peak``: its order's peak, or for an
  unordered cell the least peak found of its kernels) and ``pareto_dominated``;
- programs (compiled under the cell's dependence rule, so the fusion problem, and its
  reference, are that rule's): ``compile_seconds``, ``peak_measured`` (bytes the wrapper held at most),
  ``max_abs_error`` against the numpy reference, ``kernel_time_median`` (s) with the 95% confidence
  interval of that median (``_min``/``_max``), ``_iqr``, ``_repeats``, ``_threads``, ``_isa``,
  ``load_average``, ``_noisy`` (the interval stayed wider than 5%: ``stax.measure.timing.measure``) and
  ``_best`` (the fastest batch's seconds per call).

- ``decision``: the content key of the cell's decisions in the results directory
  (``OUT/decisions/KEY.json``: a program's :class:`stax.decisions.Schedule`, which
  ``stax.build(Schedule.load(...))`` rebuilds, or an abstract instance's partition and order).

A cell does not solve its reference: it returns what it needs (:class:`ReferenceTask`, keyed by
the problem's content and the reference settings) and the sweep solves each key once for all
cells (:func:`solve_reference`) and completes their rows (:func:`complete`).
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from instances import store
from instances.status import StatusTable, reconcile, shipped_table
from solvers.fusion.bounds import compulsory_traffic
from solvers.order.decompose import live_set_lower_bound
from solvers.order.dp import bounded_order
from solvers.pareto_regions import regional_pareto_front
from stax.errors import StaxError
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.scheduler.strategies import FusionResult, OrderResult, run_fusion, run_order

from experiments.sweep.cells import NO_ORDER, Cell, content_key
from experiments.sweep.config import ReferenceSpec


#: the column of a cell's decisions: its Schedule (programs) or its partition and order (abstract
#: instances); the results directory stores them by content and keeps the key (``ResultDir.record``)
DECISION_COLUMN = "decision"


def run_cell(cell: Cell) -> tuple[dict[str, Any], dict[str, ReferenceTask]]:
    """The metric columns of ``cell`` and the references its row still needs (measure ``optimum``),
    by column prefix; :func:`complete` adds their columns once they are solved."""
    inst = store.load(cell.file) if cell.file else store.instance(cell.family, cell.size, cell.seed)
    if inst.content_hash() != cell.instance_hash:
        raise StaxError(f"instance {inst.name} has hash {inst.content_hash()}, the sweep planned "
                        f"{cell.instance_hash}: its {'file' if cell.file else 'generator'} changed during the "
                        "sweep; rerun it")
    if inst.program is not None:
        metrics, fusion_problem, order_problem = _program_metrics(cell, inst)
    else:
        metrics, fusion_problem, order_problem = _abstract_metrics(cell, inst)
    needs = {}
    if "optimum" in cell.measures:
        for prefix, problem in (("traffic", fusion_problem), ("peak", order_problem)):
            if problem is not None:
                needs[prefix] = ReferenceTask.of(problem, cell.reference)
                metrics[f"{prefix}_problem"] = needs[prefix].key
    if _wants_pareto(cell, inst):
        needs["pareto"] = ReferenceTask.of(inst.fusion, cell.reference, "pareto")
        metrics["pareto_problem"] = needs["pareto"].key
        metrics.setdefault("point_peak", metrics.get("peak"))
    return metrics, needs


def _wants_pareto(cell: Cell, inst: store.Instance) -> bool:
    """Whether the cell's row gets the traffic-peak front (measure ``pareto``): abstract and file
    fusion problems up to ``pareto_nodes`` nodes (a program's compiled kernels drop aliased
    buffers, so its peaks are not those of the front's ``kernel_order_problem``)."""
    return ("pareto" in cell.measures and inst.program is None and inst.fusion is not None
            and len(inst.fusion.nodes) <= cell.reference.pareto_nodes)


def _abstract_metrics(cell: Cell, inst: store.Instance) -> tuple[dict, FusionProblem | None, OrderProblem | None]:
    metrics: dict[str, Any] = {}
    decision: dict[str, Any] = {}  # the strategies' answers, for a replay of the cell
    partition = None
    if inst.fusion is not None:
        fusion = run_fusion(cell.fusion.name, inst.fusion, **cell.fusion.kwargs())
        metrics |= _fusion_columns(inst.fusion, fusion)
        partition = decision["partition"] = fusion.partition
    if cell.order == NO_ORDER:
        if _wants_pareto(cell, inst):  # the cell's point: the least peak found of its kernels
            metrics["point_peak"] = bounded_order(inst.order_problem(partition), time_limit=cell.reference.time_limit).peak
        return metrics | {DECISION_COLUMN: decision}, inst.fusion, None
    order_problem = inst.order_problem(partition)
    order = run_order(cell.order.name, order_problem, **cell.order.kwargs())
    metrics |= _order_columns(order_problem, order)
    decision["order"] = order.order
    return metrics | {DECISION_COLUMN: decision}, inst.fusion, order_problem


def _program_metrics(cell: Cell, inst: store.Instance) -> tuple[dict, FusionProblem, OrderProblem]:
    import stax
    from stax.reference import evaluate
    from stax.measure import timing

    arrays = inst.program.inputs(cell.size, cell.seed)
    start = time.perf_counter()
    compiled = stax.compile(inst.program.fn, *arrays, fusion=cell.fusion.name, order=cell.order.name,
                            fusion_params=cell.fusion.kwargs(), order_params=cell.order.kwargs(),
                            threads=cell.timing.threads, cost_model=inst.program.cost_model,
                            dependence=cell.dependence)
    metrics = {"compile_seconds": time.perf_counter() - start}
    metrics |= _fusion_columns(compiled.fusion_problem, compiled.fusion)
    metrics |= _order_columns(compiled.order_problem, compiled.order)
    metrics[DECISION_COLUMN] = compiled.schedule.to_dict()
    if "measured_peak" in cell.measures:
        got = compiled(*[a.copy() for a in arrays])
        metrics["peak_measured"] = compiled.memory.peak
        want = evaluate(compiled.graph, *[a.copy() for a in arrays], upcast=True)
        got = got if isinstance(got, tuple) else (got,)
        metrics["max_abs_error"] = max((float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)), initial=0))
                                        for g, w in zip(got, want)), default=0.0)
    if "kernel_time" in cell.measures:
        work = [a.copy() for a in arrays]
        t = timing.measure(lambda: compiled(*work), cell.timing.threads, compiled.isa.name, min_repeats=cell.timing.repeat)
        metrics |= {"kernel_time_median": t.median, "kernel_time_min": t.ci_low, "kernel_time_max": t.ci_high,
                    "kernel_time_iqr": t.iqr, "kernel_time_repeats": t.repeats, "kernel_time_threads": t.threads,
                    "kernel_time_isa": t.isa, "load_average": t.load_average, "kernel_time_noisy": t.noisy,
                    "kernel_time_best": t.best}
    return metrics, compiled.fusion_problem, compiled.order_problem


def _fusion_columns(problem: FusionProblem, result: FusionResult) -> dict[str, Any]:
    return {"nodes": len(problem.nodes), "kernels": len(result.partition), "traffic": result.cost,
            "traffic_unfused": problem.unfused_cost(), "fusion_status": result.status,
            "fusion_bound": result.bound, "fusion_seconds": result.seconds}


def _order_columns(problem: OrderProblem, result: OrderResult) -> dict[str, Any]:
    return {"tasks": len(problem.tasks), "peak": result.peak, "order_status": result.status,
            "order_bound": result.bound, "order_seconds": result.seconds}


def _compare(prefix: str, value: float, ref: dict[str, Any]) -> dict[str, Any]:
    """The reference columns of one measure: the reference's value, status, bound and seconds,
    and the cell's gap to it (absolute and relative)."""
    best = ref["value"]
    gap = None if best is None else value - best
    return {f"{prefix}_ref": best, f"{prefix}_ref_status": ref["status"], f"{prefix}_ref_bound": ref["bound"],
            f"{prefix}_ref_seconds": ref["seconds"], f"{prefix}_gap_abs": gap,
            f"{prefix}_gap_rel": None if gap is None else (gap / best if best else 0.0 if gap == 0 else None)}


def complete(row: dict[str, Any], needs: dict[str, ReferenceTask], refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``row`` with the reference columns of every measure in ``needs``, from ``refs`` (by key)."""
    for prefix, task in needs.items():
        row |= _front(row, refs[task.key]) if prefix == "pareto" else _compare(prefix, row[prefix], refs[task.key])
    return row


def _front(row: dict[str, Any], front: dict[str, Any]) -> dict[str, Any]:
    """The Pareto columns of a row: the front's (traffic, peak) points as JSON, whether it is
    proven, its seconds, and whether the cell's point (``traffic``, ``point_peak``) is dominated."""
    points = [(p["traffic"], p["peak"]) for p in front["points"] or ()]
    mine = (row["traffic"], row["point_peak"])
    return {"pareto_front": json.dumps(points) if front["points"] is not None else None,
            "pareto_proven": front["proven"], "pareto_seconds": front["seconds"],
            "pareto_dominated": any(t <= mine[0] and p <= mine[1] and (t, p) != mine for t, p in points)}


#: how a reference was obtained: proven optimum, a solver's answer with a lower bound below it,
#: or a heuristic's answer (the exact solver found nothing in time) with the best bound known
REFERENCE_STATUSES = ("optimal", "bounded", "heuristic")

#: what computes references, in their keys: references stored by other solvers are not reused
REFERENCE_SOLVERS = ("cpsat pieces", "bounded_order", "compulsory_traffic", "live_set_lower_bound")


@dataclass(frozen=True)
class ReferenceTask:
    """One reference to compute: the exact solver's answer on ``problem`` under ``spec``, or
    (``measure`` "pareto") the traffic-peak Pareto front of a fusion problem.

    ``key`` hashes the problem's content (not its name) and the settings, so every cell of a
    sweep whose problem is the same shares one reference, wherever it runs."""

    key: str
    problem: FusionProblem | OrderProblem
    spec: ReferenceSpec
    measure: str = "optimum"

    @classmethod
    def of(cls, problem: FusionProblem | OrderProblem, spec: ReferenceSpec, measure: str = "optimum") -> ReferenceTask:
        kind = "pareto" if measure == "pareto" else "fusion" if isinstance(problem, FusionProblem) else "order"
        content = json.dumps({"problem": problem.to_dict() | {"name": "", "node_info": {}},
                              "spec": [spec.time_limit, spec.workers, spec.order], "statuses": REFERENCE_STATUSES,
                              "solvers": REFERENCE_SOLVERS, "measure": measure}, sort_keys=True)
        return cls(f"{kind}-{content_key(content)}", problem, spec, measure)


def solve_reference(task: ReferenceTask, table: StatusTable | None = None) -> dict[str, Any]:
    """The exact solver's answer on ``task.problem``: value, status (``REFERENCE_STATUSES``),
    a valid lower bound (the solver's, or :func:`problem_bound` where that is higher) and seconds.
    A problem in the instance library's status table (``table``, default the shipped one) is
    checked against its row (``StatusConflict`` when the solver contradicts it) and takes the
    row's value and bound where they are better; ``status_table`` is the row's status."""
    problem, spec = task.problem, task.spec
    if task.measure == "pareto":
        return solve_pareto(problem, spec)
    table = shipped_table() if table is None else table
    if isinstance(problem, FusionProblem):
        result = exact_fusion(problem, spec)
        value = result.cost
    else:
        result = exact_order(problem, spec)
        value = result.peak
    status = {"optimal": "optimal", "feasible": "bounded"}.get(result.status, "heuristic")
    claimed = value if status == "optimal" else max(result.bound or 0, problem_bound(problem))
    known = table.known(problem)
    value, bound = reconcile(known, value, claimed, status == "optimal", f"the reference ({result.info.strategy})")
    bound = min(value, bound)
    if value == bound:
        status = "optimal"
    return {"value": value, "status": status, "bound": bound, "seconds": result.seconds,
            "status_table": known and known.status}


def unsolved_reference(task: ReferenceTask, why: str, table: StatusTable | None = None) -> dict[str, Any]:
    """The reference of a problem the exact solver could not answer (it failed or ran out of the
    cell's time limit): the status table's row where it has one (``table``, default the shipped
    one), else no value (the results table's best-known value stands in) and the problem's bound."""
    if task.measure == "pareto":
        return {"points": None, "proven": False, "seconds": None, "error": why}
    known = (shipped_table() if table is None else table).known(task.problem)
    bound = max(problem_bound(task.problem), known.bound if known else 0)
    if known is None:
        return {"value": None, "status": "heuristic", "bound": bound, "seconds": None, "error": why}
    return {"value": known.value, "status": "optimal" if known.value == bound else "bounded", "bound": bound,
            "seconds": None, "error": why, "status_table": known.status}


def solve_pareto(problem: FusionProblem, spec: ReferenceSpec) -> dict[str, Any]:
    """The traffic-peak Pareto front (``solvers.pareto``, composed region by region by
    ``solvers.pareto_regions``; ``spec.time_limit`` per solve): its points by increasing traffic,
    each with its partition and kernel order, and whether it is proven."""
    began = time.perf_counter()
    front = regional_pareto_front(problem, time_limit=spec.time_limit, workers=spec.workers)
    points = [{"traffic": p.traffic, "peak": p.peak, "partition": p.partition, "order": p.order} for p in front.points]
    return {"points": points, "proven": front.proven, "seconds": time.perf_counter() - began}


def problem_bound(problem: FusionProblem | OrderProblem) -> int:
    """A lower bound every answer respects, from the problem alone and without a solver:
    compulsory traffic for fusion (Definition 7.3, ``solvers.fusion.bounds``) and the largest
    forced live set for orders (Definition 7.5, ``solvers.order.decompose``)."""
    if isinstance(problem, FusionProblem):
        return compulsory_traffic(problem)
    return live_set_lower_bound(problem)


def exact_fusion(problem: FusionProblem, spec: ReferenceSpec) -> FusionResult:
    """The least-traffic fusion: the strategy "cpsat" (CP-SAT piece by piece, the pieces' bounds
    adding up)."""
    return run_fusion("cpsat", problem, time_limit=spec.time_limit, workers=spec.workers)


def exact_order(problem: OrderProblem, spec: ReferenceSpec) -> OrderResult:
    """The least-peak order by ``spec.order``: ``dp`` (the down-set programme on series segments,
    CP-SAT finishing the segments it cannot, ``bounded_order``: optimal, or the best order found
    with a certified bound) or ``cpsat``."""
    if spec.order == "dp":
        result = bounded_order(problem, time_limit=spec.time_limit, cpsat_workers=spec.workers)
        return replace(result, info=replace(result.info, strategy=result.info.strategy or "dp"))
    return run_order("cpsat", problem, time_limit=spec.time_limit, workers=spec.workers)


def _writer() -> str:
    """Who writes a temporary file: this host and process (``host@pid``)."""
    return f"{socket.gethostname()}@{os.getpid()}"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one; the
    temporary file is named after its writer (:func:`remove_orphaned_writes`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}@{_writer()}@", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_orphaned_writes(directory: Path) -> None:
    """Remove the temporary files of :func:`write_atomic` left in ``directory`` by a process of
    this host that is gone (killed between its write and its rename); a live writer's, or another
    host's (a cluster worker's), are left alone."""
    host = socket.gethostname()
    for tmp in directory.glob(".*@*@*.tmp"):
        _, writer_host, pid, _ = tmp.name.rsplit("@", 3)
        if writer_host == host and pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
