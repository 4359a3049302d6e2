"""The Schedule: every decision of the pipeline up to, not including, gcc, as one frozen value.

``stax.schedule(fn, *specs)`` returns it and ``stax.build(schedule)`` turns it into a callable;
``stax.compile`` is ``build(schedule(...))``.  A Schedule holds the traced graph, the
FusionProblem (Definition 7.3) and its partition, the kernels' OrderProblem (Definition 7.5) and
their order, the memory plan (seed 7.6 step 6), which kernels share a parallel region, each
kernel's code-generation choices (form, vector width, Algorithm 8.1's parallel depth), the code
generator's tuning values and the options.  It saves to versioned JSON and loads with every field
checked, so a schedule made in one process builds the same C++ in another.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from .codegen.tuning import Tuning
from .errors import InstanceFormatError, StaxError
from .graph import Graph, Node
from .lowering import CostModel
from .memory.plan import MemoryPlan, Storage, check_plan
from .fields import Fields
from .problems import FusionProblem, OrderProblem, read_json
from .runtime import ISA_LEVELS
from .scheduler.events import event_from_dict, event_to_dict
from .scheduler.labels import check_labels
from .scheduler.legality import DEPENDENCE_RULES, FUSION_RULES
from .strategy import STATUSES, FusionResult, OrderResult

SCHEDULE_FORMAT = "stax.schedule"
SCHEDULE_VERSION = 1
STORAGE_KINDS = ("alloc", "reuse", "inplace", "pool")


@dataclass(frozen=True)
class KernelChoice:
    """The code generator's decisions for one block's kernel (seed 8.1-8.4)."""

    name: str
    form: str  # vector, outer-vector, split-reduction, chunked-reduction, tiled-vector, tiled, interleaved, blocked-scan, scalar, extern
    width: int  # float32 lanes of a vector (the ISA level's)
    parallel_depth: int  # Algorithm 8.1: outer loops shared among threads (0: one thread)


@dataclass(frozen=True)
class ScheduleOptions:
    """The options a schedule was made with, resolved: the ISA level and thread count as chosen,
    the strategies by name (their answers are in the schedule)."""

    fusion: str
    order: str
    rule: str
    dependence: str
    cost_model: CostModel
    isa: str
    threads: int
    reuse: bool
    inplace: bool
    group_kernels: bool
    memory_plan: str
    fusion_params: dict[str, Any] = field(default_factory=dict)
    order_params: dict[str, Any] = field(default_factory=dict)
    caching_allocator: bool = True


@dataclass(frozen=True)
class Schedule:
    """Every decision up to gcc (see the module docstring); ``save``/``load`` as JSON."""

    graph: Graph
    parameters: tuple[str, ...]
    options: ScheduleOptions
    fusion_problem: FusionProblem
    fusion: FusionResult  # its partition in ``ordered_blocks`` form: kernel i is block i
    order_problem: OrderProblem
    order: OrderResult
    memory: MemoryPlan
    spans: tuple[tuple[int, int], ...]  # steps of the order called as one C++ function (seed 8.5)
    kernels: tuple[KernelChoice, ...]  # one per block, in the order's sequence
    tuning: Tuning  # the code generator's thresholds
    stax_version: str = ""
    #: what the passes computed on the way (program, scheduler, block kernels), so building a
    #: schedule just made does not lower and generate again; not saved
    products: Any = field(default=None, compare=False, repr=False)
    #: each node's op in the user's words (``exp@model.py:12``, ``stax.scheduler.labels``), for the
    #: fusion log and kernel comments; where the code was written, not a decision, so not compared
    labels: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def partition(self) -> tuple[tuple[str, ...], ...]:
        return self.fusion.partition

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCHEDULE_FORMAT, "version": SCHEDULE_VERSION, "stax_version": self.stax_version,
            "graph": graph_to_dict(self.graph), "parameters": list(self.parameters),
            "options": _jsonable(asdict(self.options), "options"),
            "fusion_problem": self.fusion_problem.to_dict(),
            "fusion": _result_dict(self.fusion, "partition"),
            "order_problem": self.order_problem.to_dict(),
            "order": _result_dict(self.order, "order"),
            "memory": _jsonable(asdict(self.memory), "memory"),
            "spans": [list(s) for s in self.spans],
            "kernels": [asdict(k) for k in self.kernels],
            "tuning": self.tuning.values(),
            "labels": dict(self.labels),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        return cls.from_dict(read_json(path), str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> Schedule:
        """A schedule from its JSON form, every field checked (the error names the field)."""
        r = Fields(data, source, error=InstanceFormatError)
        r.check_format(SCHEDULE_FORMAT, SCHEDULE_VERSION)
        graph = r.read("graph", graph_from_dict)
        parameters = tuple(r.get("parameters", list, "a JSON array"))
        if len(parameters) != len(graph.inputs) or not all(isinstance(p, str) for p in parameters):
            r.fail("parameters", f"a name for each of the graph's {len(graph.inputs)} inputs", parameters)
        options = r.read("options", _options_from_dict)
        fusion_problem = r.read("fusion_problem", lambda d: FusionProblem.from_dict(d, f"{source}: fusion_problem"))
        order_problem = r.read("order_problem", lambda d: OrderProblem.from_dict(d, f"{source}: order_problem"))
        fusion = r.read("fusion", lambda d: _result_from_dict(FusionResult, d, "partition"))
        order = r.read("order", lambda d: _result_from_dict(OrderResult, d, "order"))
        r.check("fusion.partition", lambda: fusion_problem.validate(fusion.partition))
        r.check("order.order", lambda: order_problem.validate(order.order))
        if order_problem.tasks != tuple(_kernel_names(fusion.partition)):
            r.fail("order_problem.tasks", "one task per block of fusion.partition, named as stax names kernels",
                   order_problem.tasks)
        memory = r.read("memory", _memory_from_dict)
        if memory.order != order.order:
            r.fail("memory.order", f"the kernel order {list(order.order)}", list(memory.order))
        allocated = {b.name for b in order_problem.buffers}
        if set(memory.storage) != allocated:
            r.fail("memory.storage", f"one entry per allocated buffer ({sorted(allocated)})", sorted(memory.storage))
        r.check("memory", lambda: check_plan(memory, order_problem))
        spans = tuple(tuple(s) for s in r.get("spans", list, "a JSON array"))
        if not _tiles(spans, len(order.order)):
            r.fail("spans", f"consecutive [first, last] steps covering 0..{len(order.order) - 1}", data["spans"])
        kernels = tuple(r.read("kernels", lambda ks: [KernelChoice(**_record(k, KernelChoice)) for k in ks]))
        if [k.name for k in kernels] != list(order.order):
            r.fail("kernels", f"one choice per kernel, in the order {list(order.order)}", [k.name for k in kernels])
        tuning = r.read("tuning", Tuning.from_values)
        labels = dict(r.get("labels", dict, "a JSON object of node -> label", default={}))
        r.check("labels", lambda: check_labels(labels, fusion_problem.nodes))
        return cls(graph, parameters, options, fusion_problem, fusion, order_problem, order, memory, spans, kernels,
                   tuning, str(data.get("stax_version", "")), labels=labels)


def _kernel_names(partition) -> list[str]:
    from .compiler import kernel_name  # the compiler names kernels; it imports this module
    return [kernel_name(b) for b in partition]


def _tiles(spans: tuple[tuple[int, ...], ...], steps: int) -> bool:
    expected = 0
    for span in spans:
        if len(span) != 2 or not all(isinstance(t, int) for t in span) or span[0] != expected or span[1] < span[0]:
            return False
        expected = span[1] + 1
    return expected == steps


def _record(data: dict[str, Any], cls: type) -> dict[str, Any]:
    """The fields of dataclass ``cls`` from ``data``: every one present, and no other."""
    names = [f.name for f in fields(cls)]
    if not isinstance(data, dict) or set(data) - set(names):
        raise ValueError(f"expected an object with the fields {names}, found {data!r}")
    return {name: data[name] for name in names if name in data}


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as JSON data (tuples as arrays, dataclasses as objects, enums by value)."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value), where)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, where) for v in (sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise StaxError(f"{where}: a {type(value).__name__} cannot be saved in a schedule; give strategy parameters as "
                    "numbers, strings, lists or dicts")


def _result_dict(result: FusionResult | OrderResult, answer: str) -> dict[str, Any]:
    data = {f.name: getattr(result, f.name) for f in fields(result) if f.name != "info"}
    info = result.info.as_dict()
    if "events" in info:
        info["events"] = [event_to_dict(e) for e in info["events"]]
    return _jsonable(data, answer) | {"info": _jsonable(info, f"{answer} info")}


def _result_from_dict(cls: type, data: dict[str, Any], answer: str) -> FusionResult | OrderResult:
    values = _record(data, cls)
    if values.get("status") not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, found {values.get('status')!r}")
    if not isinstance(values.get("info", {}), dict):
        raise ValueError(f"info must be an object, found {values['info']!r}")
    if answer == "partition":
        values["partition"] = tuple(tuple(block) for block in values["partition"])
        if "events" in values.get("info", {}):
            values["info"] = values["info"] | {"events": [event_from_dict(e) for e in values["info"]["events"]]}
    else:
        values["order"] = tuple(values["order"])
    return cls(**values)


def _options_from_dict(data: dict[str, Any]) -> ScheduleOptions:
    values = _record(data, ScheduleOptions)
    values["cost_model"] = CostModel(**_record(values["cost_model"], CostModel))
    checks = {"rule": FUSION_RULES, "dependence": DEPENDENCE_RULES, "isa": ISA_LEVELS,
              "memory_plan": ("wrapper", "pool")}
    for name, allowed in checks.items():
        if values.get(name) not in allowed:
            raise ValueError(f"options.{name} must be one of {', '.join(allowed)}, found {values.get(name)!r}")
    if not isinstance(values.get("caching_allocator", True), bool):
        raise ValueError(f"options.caching_allocator must be true or false, found {values['caching_allocator']!r}")
    threads = values.get("threads")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"options.threads must be a whole number of at least 1, found {threads!r}")
    return ScheduleOptions(**values)


def _memory_from_dict(data: dict[str, Any]) -> MemoryPlan:
    values = _record(data, MemoryPlan)
    storage = {}
    for name, where in values["storage"].items():
        where = Storage(**_record(where, Storage))
        if where.kind not in STORAGE_KINDS or where.name != name:
            raise ValueError(f"storage of {name!r}: kind must be one of {', '.join(STORAGE_KINDS)}, found {where}")
        if where.kind in ("reuse", "inplace") and where.source not in values["storage"]:
            raise ValueError(f"storage of {name!r} takes that of {where.source!r}, which is not an allocated buffer")
        storage[name] = where
    values["storage"] = storage
    values["order"] = tuple(values["order"])
    values["releases"] = {int(step): list(names) for step, names in values["releases"].items()}
    return MemoryPlan(**values)


# --- the traced graph as JSON: attribute values are numbers, strings, booleans, None or tuples -----

def graph_to_dict(graph: Graph) -> dict[str, Any]:
    return {"nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs), "shape": list(n.shape), "dtype": n.dtype,
                       "attrs": [[k, _jsonable(v, f"node {n.name} attribute {k}")] for k, v in n.attrs]}
                      for n in graph.nodes.values()],
            "inputs": list(graph.inputs), "outputs": list(graph.outputs), "mutations": dict(graph.mutations)}


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def graph_from_dict(data: dict[str, Any]) -> Graph:
    nodes: dict[str, Node] = {}
    for i, n in enumerate(data["nodes"]):
        missing = [name for name in n.get("inputs", ()) if name not in nodes]
        if missing:
            raise ValueError(f"nodes[{i}] ({n.get('name')!r}) reads {missing}, not defined before it")
        nodes[n["name"]] = Node(n["name"], n["op"], tuple(n["inputs"]), tuple(n["shape"]), n["dtype"],
                                tuple((k, _as_tuple(v)) for k, v in n["attrs"]))
    for name in [*data["inputs"], *data["outputs"], *data["mutations"], *data["mutations"].values()]:
        if name not in nodes:
            raise ValueError(f"names node {name!r}, which is not in nodes")
    return Graph(nodes, list(data["inputs"]), list(data["outputs"]), dict(data["mutations"]))


# --- where two schedules differ --------------------------------------------------------------

def diff(a: Schedule, b: Schedule, names: tuple[str, str] = ("A", "B")) -> str:
    """Where two schedules of one program differ: the blocks each has alone, the kernel order,
    the kernels' forms and the options; empty when they agree."""
    lines = []
    if a.fusion_problem != b.fusion_problem:
        lines.append("the fusion problems differ: these are schedules of different programs or rules")
    opts = [f"  {f.name}: {getattr(a.options, f.name)!r} vs {getattr(b.options, f.name)!r}"
            for f in fields(ScheduleOptions) if getattr(a.options, f.name) != getattr(b.options, f.name)]
    if opts:
        lines += ["options:", *opts]
    blocks_a, blocks_b = set(a.partition), set(b.partition)
    for label, only in ((names[0], blocks_a - blocks_b), (names[1], blocks_b - blocks_a)):
        if only:
            lines.append(f"blocks only in {label}: " + "; ".join(" ".join(block) for block in sorted(only)))
    if not blocks_a ^ blocks_b and a.order.order != b.order.order:
        lines.append("order:")
        lines += [f"  step {t}: {x} vs {y}" for t, (x, y) in enumerate(zip(a.order.order, b.order.order)) if x != y]
    forms_a, forms_b = {k.name: k for k in a.kernels}, {k.name: k for k in b.kernels}
    forms = [f"  {name}: {forms_a[name].form} depth {forms_a[name].parallel_depth} vs "
             f"{forms_b[name].form} depth {forms_b[name].parallel_depth}"
             for name in forms_a if name in forms_b and forms_a[name] != forms_b[name]]
    if forms:
        lines += ["kernel choices:", *forms]
    if a.spans != b.spans:
        lines.append(f"kernels sharing a parallel region: {list(a.spans)} vs {list(b.spans)}")
    if a.memory.peak != b.memory.peak:
        lines.append(f"planned peak: {a.memory.peak} B vs {b.memory.peak} B")
    return "\n".join(lines)
