"""Measure one cell: solve (or compile and run) an instance with a fusion and an order strategy.

Columns (``None`` where a measure does not apply, e.g. kernel time of an abstract instance):

- fusion: ``nodes``, ``kernels``, ``traffic`` (Definition 7.3, bytes), ``traffic_unfused``,
  ``fusion_status``, ``fusion_bound``, ``fusion_seconds``;
- order: ``tasks``, ``peak`` (Definition 7.5 estimate, bytes), ``order_status``, ``order_bound``,
  ``order_seconds``;
- reference (measure ``optimum``): ``traffic_ref`` / ``peak_ref`` from CP-SAT (for orders
  ``dp`` first when the config's ``reference.order`` says so) with its proof
  status (``*_ref_status``: optimal, or feasible when not proven), bound and seconds, and the cell's
  ``*_gap_abs`` = value - reference and ``*_gap_rel`` = gap / reference.  The reference is the
  solver's best answer; only ``*_ref_status == "optimal"`` makes it the optimum;
- programs (compiled under the cell's dependence rule, so the fusion problem, and its
  reference, are that rule's): ``compile_seconds``, ``peak_measured`` (bytes the wrapper held at most),
  ``max_abs_error`` against the numpy reference, ``kernel_time_median``/``_min``/``_max`` (s).

References are cached on disk by problem content (``cache_dir``), so cells that share a
problem solve it once.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from instances import store
from stax.errors import StaxError
from stax.problems import FusionProblem, OrderProblem
from stax.strategy import FusionResult, OrderResult, run_fusion, run_order

from .cells import NO_ORDER, Cell
from .config import ReferenceSpec


def run_cell(cell: Cell, cache_dir: str | None = None) -> dict[str, Any]:
    """The metric columns of ``cell``."""
    inst = store.load(cell.file) if cell.file else store.instance(cell.family, cell.size, cell.seed)
    if inst.content_hash() != cell.instance_hash:
        raise StaxError(f"instance {inst.name} has hash {inst.content_hash()}, the sweep planned "
                        f"{cell.instance_hash}: its {'file' if cell.file else 'generator'} changed during the "
                        "sweep; rerun it")
    if inst.program is not None:
        metrics, fusion_problem, order_problem = _program_metrics(cell, inst)
    else:
        metrics, fusion_problem, order_problem = _abstract_metrics(cell, inst)
    if "optimum" in cell.measures:
        if fusion_problem is not None:
            metrics |= _compare("traffic", metrics["traffic"], reference(fusion_problem, cell.reference, cache_dir))
        if order_problem is not None:
            metrics |= _compare("peak", metrics["peak"], reference(order_problem, cell.reference, cache_dir))
    return metrics


def _abstract_metrics(cell: Cell, inst: store.Instance) -> tuple[dict, FusionProblem | None, OrderProblem | None]:
    metrics: dict[str, Any] = {}
    partition = None
    if inst.fusion is not None:
        fusion = run_fusion(cell.fusion.name, inst.fusion, **cell.fusion.kwargs())
        metrics |= _fusion_columns(inst.fusion, fusion)
        partition = fusion.partition
    if cell.order == NO_ORDER:
        return metrics, inst.fusion, None
    order_problem = inst.order_problem(partition)
    metrics |= _order_columns(order_problem, run_order(cell.order.name, order_problem, **cell.order.kwargs()))
    return metrics, inst.fusion, order_problem


def _program_metrics(cell: Cell, inst: store.Instance) -> tuple[dict, FusionProblem, OrderProblem]:
    import stax
    from stax.reference import evaluate
    from stax.timing import time_spread

    arrays = inst.program.inputs(cell.size, cell.seed)
    start = time.perf_counter()
    compiled = stax.compile(inst.program.fn, *arrays, fusion=cell.fusion.name, order=cell.order.name,
                            fusion_params=cell.fusion.kwargs(), order_params=cell.order.kwargs(),
                            threads=cell.timing.threads, cost_model=inst.program.cost_model,
                            dependence=cell.dependence)
    metrics = {"compile_seconds": time.perf_counter() - start}
    metrics |= _fusion_columns(compiled.fusion_problem, compiled.fusion)
    metrics |= _order_columns(compiled.order_problem, compiled.order)
    if "measured_peak" in cell.measures:
        got = compiled(*[a.copy() for a in arrays])
        metrics["peak_measured"] = compiled.memory.peak
        want = evaluate(compiled.graph, *[a.copy() for a in arrays], upcast=True)
        got = got if isinstance(got, tuple) else (got,)
        metrics["max_abs_error"] = max((float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)), initial=0))
                                        for g, w in zip(got, want)), default=0.0)
    if "kernel_time" in cell.measures:
        work = [a.copy() for a in arrays]
        low, median, high = time_spread(lambda: compiled(*work), repeat=cell.timing.repeat, min_seconds=0.01)
        metrics |= {"kernel_time_median": median, "kernel_time_min": low, "kernel_time_max": high}
    return metrics, compiled.fusion_problem, compiled.order_problem


def _fusion_columns(problem: FusionProblem, result: FusionResult) -> dict[str, Any]:
    return {"nodes": len(problem.nodes), "kernels": len(result.partition), "traffic": result.cost,
            "traffic_unfused": problem.unfused_cost(), "fusion_status": result.status,
            "fusion_bound": result.bound, "fusion_seconds": result.seconds}


def _order_columns(problem: OrderProblem, result: OrderResult) -> dict[str, Any]:
    return {"tasks": len(problem.tasks), "peak": result.peak, "order_status": result.status,
            "order_bound": result.bound, "order_seconds": result.seconds}


def _compare(prefix: str, value: float, ref: dict[str, Any]) -> dict[str, Any]:
    best = ref["value"]
    gap = None if best is None else value - best
    return {f"{prefix}_ref": best, f"{prefix}_ref_status": ref["status"], f"{prefix}_ref_bound": ref["bound"],
            f"{prefix}_ref_seconds": ref["seconds"], f"{prefix}_gap_abs": gap,
            f"{prefix}_gap_rel": None if gap is None else (gap / best if best else 0.0 if gap == 0 else None)}


def reference(problem: FusionProblem | OrderProblem, spec: ReferenceSpec, cache_dir: str | None) -> dict[str, Any]:
    """The exact solver's answer on ``problem``: value, status, bound, seconds (cached by content)."""
    kind = "fusion" if isinstance(problem, FusionProblem) else "order"
    solver = [] if spec.order == "cpsat" else [spec.order]  # cached references of the default keep their names
    content = json.dumps({"problem": problem.to_dict() | {"name": "", "node_info": {}}, "spec": [
        spec.time_limit, spec.workers, *solver]}, sort_keys=True)
    path = Path(cache_dir or ".") / f"{kind}-{hashlib.sha256(content.encode()).hexdigest()[:20]}.json"
    if cache_dir and path.exists():
        return json.loads(path.read_text())
    if kind == "fusion":
        result = run_fusion("cpsat", problem, time_limit=spec.time_limit, workers=spec.workers)
        value = result.cost
    else:
        result = exact_order(problem, spec)
        value = result.peak
    # without a proof the answer (CP-SAT's or its warm start's) is only a feasible upper bound
    status = "optimal" if result.status == "optimal" else "feasible"
    ref = {"value": value, "status": status, "bound": result.bound, "seconds": result.seconds}
    if cache_dir:
        write_atomic(path, json.dumps(ref))
    return ref


def exact_order(problem: OrderProblem, spec: ReferenceSpec) -> OrderResult:
    """The least-peak order by ``spec.order``: ``dp`` (falling back to CP-SAT when it refuses a
    problem with too many down-sets or runs out of time) or ``cpsat``."""
    if spec.order == "dp":
        try:
            return run_order("dp", problem, time_limit=spec.time_limit)
        except StaxError:
            pass
    return run_order("cpsat", problem, time_limit=spec.time_limit, workers=spec.workers)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
