"""The Schedule: every decision of the pipeline up to, not including, gcc, as one frozen value.

``stax.schedule(fn, *specs)`` returns it and ``stax.build(schedule)`` turns it into a callable;
``stax.compile`` is ``build(schedule(...))``.  A Schedule holds the traced graph, the
FusionProblem (Definition 7.3) and its partition, the kernels' OrderProblem (Definition 7.5) and
their order, the memory plan (spec 7.6 step 6), which kernels share a parallel region, each
kernel's code-generation choices (form, vector width, Algorithm 8.1's parallel depth), the code
generator's tuning values and the options.  It saves to versioned JSON and loads with every field
checked, so a schedule made in one process builds the same C++ in another.

The replay strategies take a saved schedule's answers: ``fusion="replay", fusion_params={"schedule":
"s.json"}`` its partition (or ``{"partition": [[...], ...]}`` a given one), ``order="replay"`` its
kernel order (or ``{"order": [...]}``), so a cell of an experiment, or a schedule edited by hand,
can be rebuilt and re-timed.  The problem's validator judges the answer as any strategy's; when
the problem is the one the schedule was made for, the saved status and bound are kept.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from enum import Enum
from math import prod
from pathlib import Path
from typing import Any, Sequence

from stax.codegen.kernel import Kernel
from stax.codegen.tuning import Tuning
from stax.dtypes import ITEMSIZE, SUPPORTED
from stax.errors import InstanceFormatError, InvalidScheduleError, StaxError
from stax.generation import (Products, aliased_buffers, allocated_order_problem, fusion_stage, generate_kernels,
                             inplace_check, kernel_names)
from stax.ir.graph import (ELEMENTWISE_OPS, EXTERN_OPS, REDUCTION_OPS, SCAN_OPS, VIEW_OPS, Graph, Node)
from stax.lowering import CostModel
from stax.memory.plan import MemoryPlan, Storage, check_plan
from stax.util.fields import MAX_COUNT, Fields, is_identifier, shortened, sub_fields
from stax.scheduler.problems import FusionProblem, OrderProblem, read_json
from stax.target import ISA_LEVELS, Isa
from stax.scheduler.events import event_from_dict, event_to_dict
from stax.scheduler.labels import check_labels
from stax.scheduler.legality import DEPENDENCE_RULES, FUSION_RULES
from stax.scheduler.strategies import STATUSES, FusionResult, OrderResult, Status

SCHEDULE_FORMAT = "stax.schedule"
SCHEDULE_VERSION = 1
STORAGE_KINDS = ("alloc", "reuse", "inplace", "pool")
SCHEDULE_KEYS = ("format", "version", "stax_version", "graph", "parameters", "options", "fusion_problem", "fusion",
                 "order_problem", "order", "memory", "spans", "kernels", "tuning", "labels")


@dataclass(frozen=True)
class KernelChoice:
    """The code generator's decisions for one block's kernel (spec 8.1-8.4)."""

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
    spans: tuple[tuple[int, int], ...]  # steps of the order called as one C++ function (spec 8.5)
    kernels: tuple[KernelChoice, ...]  # one per block, in the order's sequence
    tuning: Tuning  # the code generator's thresholds
    stax_version: str = ""
    #: what the passes computed on the way (program, scheduler, block kernels), so building a
    #: schedule just made does not lower and generate again; not saved
    products: Products | None = field(default=None, compare=False, repr=False)
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
        """A schedule from its JSON form, every field checked (the error names the field), its
        graph lowered and its kernels generated again (no gcc) to check the saved choices."""
        r = Fields(data, source, error=InstanceFormatError, known=SCHEDULE_KEYS)
        r.check_format(SCHEDULE_FORMAT, SCHEDULE_VERSION)
        graph = graph_from_fields(sub_fields(r, "graph", r.get("graph", dict, "an object")))
        parameters = tuple(r.names("parameters"))
        if len(parameters) != len(graph.inputs):
            r.fail("parameters", f"a name for each of the graph's {len(graph.inputs)} inputs", list(parameters))
        options = _options_from_fields(sub_fields(r, "options", r.get("options", dict, "an object")))
        fusion_problem = r.read("fusion_problem", lambda d: FusionProblem.from_dict(d, f"{source}: fusion_problem"))
        order_problem = r.read("order_problem", lambda d: OrderProblem.from_dict(d, f"{source}: order_problem"))
        fusion = _result_from_fields(FusionResult, sub_fields(r, "fusion", r.get("fusion", dict, "an object")),
                                     "partition")
        order = _result_from_fields(OrderResult, sub_fields(r, "order", r.get("order", dict, "an object")), "order")
        r.check("fusion.partition", lambda: fusion_problem.validate(fusion.partition))
        r.check("order.order", lambda: order_problem.validate(order.order))
        if order_problem.tasks != tuple(kernel_names(fusion.partition)):
            r.fail("order_problem.tasks", "one task per block of fusion.partition, named as stax names kernels",
                   order_problem.tasks)
        memory = _memory_from_fields(sub_fields(r, "memory", r.get("memory", dict, "an object")))
        if memory.order != order.order:
            r.fail("memory.order", f"the kernel order {list(order.order)}", list(memory.order))
        allocated = {b.name for b in order_problem.buffers}
        if set(memory.storage) != allocated:
            r.fail("memory.storage", f"one entry per allocated buffer ({sorted(allocated)})", sorted(memory.storage))
        r.check("memory", lambda: check_plan(memory, order_problem))
        spans = r.get("spans", list, f"consecutive [first, last] steps covering 0..{len(order.order) - 1}",
                      check=lambda v: _tiles(v, len(order.order)))
        kernels = tuple(KernelChoice(**r.sub(f"kernels[{i}]", k).typed(KernelChoice))
                        for i, k in enumerate(r.list_of("kernels", dict)))
        if [k.name for k in kernels] != list(order.order):
            r.fail("kernels", f"one choice per kernel, in the order {list(order.order)}", [k.name for k in kernels])
        tuning = r.read("tuning", Tuning.from_values)
        labels = dict(r.get("labels", dict, "a JSON object of node -> label", default={}))
        r.check("labels", lambda: check_labels(labels, fusion_problem.nodes))
        sched = cls(graph, parameters, options, fusion_problem, fusion, order_problem, order, memory,
                    tuple(tuple(span) for span in spans), kernels, tuning,
                    r.get("stax_version", str, "a string", default=""), labels=labels)
        return replace(sched, products=r.check("graph", lambda: _products(sched, source)))


def kernel_choices(block_kernels: list[Kernel], isa: Isa) -> tuple[KernelChoice, ...]:
    return tuple(KernelChoice(k.name, k.form, 1 if k.extern else isa.width, max(k.depths, default=0))
                 for k in block_kernels)


def products_of(sched: Schedule) -> Products:
    """A schedule's products: those kept when it was made, else lowered and generated again from
    its graph and checked to give the schedule's problems and kernel choices."""
    if sched.products is not None:
        return sched.products
    opts = sched.options
    program, scheduler, problem = fusion_stage(sched.graph, opts.cost_model, opts.rule, opts.dependence)
    stale = "; make the schedule again with this stax"
    if problem != sched.fusion_problem:
        raise InvalidScheduleError(f"the schedule's FusionProblem is not the one its graph gives here{stale}")
    blocks = sched.partition
    order_problem = allocated_order_problem(problem, blocks, kernel_names(blocks), aliased_buffers(scheduler))
    if order_problem != sched.order_problem:
        raise InvalidScheduleError(f"the schedule's OrderProblem is not the one its partition gives here{stale}")
    isa = ISA_LEVELS[opts.isa]
    block_kernels = generate_kernels(scheduler, problem, blocks, sched.order.order, kernel_names(blocks), isa,
                                     opts.threads, sched.tuning, dependence=opts.dependence, labels=sched.labels)
    for made, saved in zip(kernel_choices(block_kernels, isa), sched.kernels):
        if made != saved:
            raise InvalidScheduleError(f"kernel {saved.name}: the schedule chose {saved}, this stax generates {made}"
                                       f"{stale}")
    inplace_ok = inplace_check(block_kernels)
    for name, where in sched.memory.storage.items():
        if where.kind == "inplace" and not inplace_ok(name, where.source):
            raise InvalidScheduleError(f"the schedule stores {name!r} in place of {where.source!r}, but its kernel "
                                       "reads that buffer elsewhere than where it writes (Proposition 7.2)")
    return Products(program, scheduler, block_kernels)


def _products(sched: Schedule, source: str) -> Products:
    """The schedule's products, lowered and generated again from its graph; a choice this stax
    would not make is refused naming the file (an error lowering the graph names the graph)."""
    try:
        return products_of(sched)
    except InvalidScheduleError as exc:
        raise InstanceFormatError(f"{source}: {exc}") from None


def _tiles(spans: list[Any], steps: int) -> bool:
    expected = 0
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2 and all(_whole(t) for t in span)
                and span[0] == expected and span[1] >= span[0]):
            return False
        expected = span[1] + 1
    return expected == steps


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def _result_from_fields(cls: type, r: Fields, answer: str) -> FusionResult | OrderResult:
    values = r.typed(cls)
    r.get("status", str, f"one of {', '.join(STATUSES)}", choices=STATUSES)
    info = r.get("info", dict, "an object", default={})
    if answer == "partition":
        blocks = r.get("partition", list, "a list of blocks, each a list of node names",
                       check=lambda v: all(isinstance(b, list) and all(is_identifier(n) for n in b) for b in v))
        values["partition"] = tuple(tuple(block) for block in blocks)
        if "events" in info:
            events = r.sub("info", info).list_of("events", dict)
            values["info"] = info | {"events": [r.check(f"info.events[{i}]", lambda: event_from_dict(e))
                                                for i, e in enumerate(events)]}
    else:
        values["order"] = tuple(r.names("order"))
    return cls(**values)


def _options_from_fields(r: Fields) -> ScheduleOptions:
    values = r.typed(ScheduleOptions)
    values["cost_model"] = CostModel(**sub_fields(r, "cost_model", values["cost_model"]).typed(CostModel))
    checks = {"rule": FUSION_RULES, "dependence": DEPENDENCE_RULES, "isa": tuple(ISA_LEVELS),
              "memory_plan": ("wrapper", "pool")}
    for name, allowed in checks.items():
        r.get(name, str, f"one of {', '.join(allowed)}", choices=tuple(allowed))
    r.get("threads", int, "a whole number of threads from 1 to 1024", check=lambda v: 1 <= v <= 1024)
    for name in ("fusion_params", "order_params"):
        r.read(name, lambda v: _check_jsonable(v, 0), default={})
    return ScheduleOptions(**values)


def _check_jsonable(value: Any, depth: int) -> Any:
    """``value`` when it is JSON data nested at most four levels deep (strategy parameters)."""
    if depth > 4:
        raise ValueError("expected parameters nested at most four levels deep")
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        _check_jsonable(item, depth + 1)
    return value


def _memory_from_fields(r: Fields) -> MemoryPlan:
    values = r.typed(MemoryPlan)
    values["order"] = tuple(r.names("order"))
    for key in ("pool_size", "estimate", "reuses", "inplace"):
        r.count(key, 0)
    storage = {}
    for name, where in r.get("storage", dict, "an object mapping buffer names to storages").items():
        w = sub_fields(r, f"storage.{name}"[:120], where)
        where = Storage(**w.typed(Storage))
        if where.name != name:
            w.fail("name", f"the buffer's name {name!r}", where.name)
        w.get("kind", str, f"one of {', '.join(STORAGE_KINDS)}", choices=STORAGE_KINDS)
        if where.kind in ("reuse", "inplace") and where.source not in r.table["storage"]:
            w.fail("source", "an allocated buffer whose storage this one takes", where.source)
        w.count("offset", default=0)
        storage[name] = where
    values["storage"] = storage
    values["live"] = r.get("live", list, "a list of byte counts", check=lambda v: all(_count(x) for x in v))
    releases = r.get("releases", dict, "an object mapping steps to lists of buffer names")
    for step, names in releases.items():
        if not step.isdigit() or int(step) >= len(values["order"]) or not isinstance(names, list) or \
                not all(n in storage for n in names):
            r.fail(f"releases.{step}"[:120], "a step of the order and a list of allocated buffers", names)
    values["releases"] = {int(step): list(names) for step, names in releases.items()}
    values["candidates"] = r.get("candidates", dict, "an object of counts", default={},
                                 check=lambda v: all(_count(x) for x in v.values()))
    return MemoryPlan(**values)


def _count(value: Any) -> bool:
    return _whole(value) and 0 <= value < MAX_COUNT


# --- the traced graph as JSON: attribute values are numbers, strings, booleans, None or tuples -----

def graph_to_dict(graph: Graph) -> dict[str, Any]:
    return {"nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs), "shape": list(n.shape), "dtype": n.dtype,
                       "attrs": [[k, _jsonable(v, f"node {n.name} attribute {k}")] for k, v in n.attrs]}
                      for n in graph.nodes.values()],
            "inputs": list(graph.inputs), "outputs": list(graph.outputs), "mutations": dict(graph.mutations)}


#: the ops of a traced graph (stax.ir.graph)
GRAPH_OPS = frozenset({"input", "constant", "pad"}) | ELEMENTWISE_OPS | REDUCTION_OPS | SCAN_OPS | VIEW_OPS | EXTERN_OPS
NODE_KEYS = ("name", "op", "inputs", "shape", "dtype", "attrs")
ATTR_DEPTH = 3  # an attribute is a scalar, a tuple of them or a tuple of tuples
#: attributes that are whole numbers (positions, sizes) and tuples of whole numbers (stax.ir.graph)
INTEGER_ATTRS = frozenset({"index", "dim", "start", "stop", "step", "size", "rows", "stream"})
INTEGER_TUPLE_ATTRS = frozenset({"strides", "dims", "shape", "low", "high", "interior"})
#: the attributes each op needs (stax.ir.graph's list of ops)
REQUIRED_ATTRS = {"input": ("index",), "constant": ("value",), "permute": ("dims",), "flip": ("dims",),
                  "reshape": ("shape",), "expand": ("shape",), "slice": ("dim", "start", "stop", "step"),
                  "unfold": ("dim", "size", "step"), "pad": ("low", "high", "interior", "value"),
                  "bernoulli": ("p", "stream"), "uniform": ("stream",), "add_rows": ("rows",),
                  **{op: ("dims", "keepdim") for op in REDUCTION_OPS}, **{op: ("dim",) for op in SCAN_OPS}}


def _attr_value(value: Any, depth: int = 0) -> Any:
    """An attribute value from JSON: null, a boolean, an int64, a float, an identifier string
    or (lists as) tuples of them nested at most ATTR_DEPTH deep; else a ValueError."""
    if isinstance(value, list) and depth < ATTR_DEPTH:
        return tuple(_attr_value(v, depth + 1) for v in value)
    if value is None or isinstance(value, (bool, float)) or is_identifier(value):
        return value
    if isinstance(value, int) and -2**63 <= value < 2**63:
        return value
    raise ValueError(f"expected null, true/false, a 64-bit integer, a number, an identifier or a list of them "
                     f"(nested at most {ATTR_DEPTH} deep), found {shortened(value)}")


def _node_from_fields(f: Fields, defined: dict[str, Node]) -> Node:
    name = f.name("name")
    if name in defined:
        f.fail("name", "a node name not given before (names must be unique)", name)
    op = f.get("op", str, "an op of stax's graph (stax.ir.graph)", choices=tuple(sorted(GRAPH_OPS)))
    inputs = f.names("inputs")
    for i, inp in enumerate(inputs):
        if inp not in defined:
            f.fail(f"inputs[{i}]", "a node defined before this one", inp)
    dtype = f.get("dtype", str, f"a dtype ({', '.join(SUPPORTED)})", choices=SUPPORTED)
    shape = f.get("shape", list, "at most 16 whole numbers from 0 whose product, in bytes, is below 2^62",
                  check=lambda v: all(_count(d) for d in v) and len(v) <= 16 and prod(v) * ITEMSIZE[dtype] < MAX_COUNT)
    pairs = f.get("attrs", list, "a list of [name, value] pairs with distinct identifier names",
                  check=lambda v: all(isinstance(p, list) and len(p) == 2 and is_identifier(p[0]) for p in v)
                  and len({p[0] for p in v}) == len(v))
    attrs = tuple((key, f.check(f"attrs.{key}", lambda: _attr_value(value))) for key, value in pairs)
    for key, value in attrs:
        if key in INTEGER_ATTRS and not _whole(value):
            f.fail(f"attrs.{key}", "a whole number (a dim, a position or a size)", value)
        if key in INTEGER_TUPLE_ATTRS and not (isinstance(value, tuple) and all(_whole(v) for v in value)):
            f.fail(f"attrs.{key}", "a list of whole numbers", value)
        if key in ("keepdim", "relu") and not isinstance(value, bool):
            f.fail(f"attrs.{key}", "true or false", value)
        if key == "dtype" and value not in SUPPORTED:
            f.fail(f"attrs.{key}", f"a dtype ({', '.join(SUPPORTED)})", value)
        if key == "p" and not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1):
            f.fail(f"attrs.{key}", "a probability from 0 to 1", value)
    missing = [key for key in REQUIRED_ATTRS.get(op, ()) if key not in dict(attrs)]
    if missing:
        f.fail("attrs", f"the attributes of a {op} node ({', '.join(REQUIRED_ATTRS[op])})", [k for k, _ in attrs])
    if op == "constant":
        _check_constant(f, dict(attrs).get("value"), dtype)
    return Node(name, op, tuple(inputs), tuple(shape), dtype, attrs)


def _check_constant(f: Fields, value: Any, dtype: str) -> None:
    """A constant's value fits its dtype: a boolean, an integer in the dtype's range, or a number."""
    if dtype == "bool":
        ok = isinstance(value, bool)
    elif dtype in ("int32", "int64"):
        bits = 31 if dtype == "int32" else 63
        ok = _whole(value) and -2**bits <= value < 2**bits
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        f.fail("attrs.value", f"a constant of dtype {dtype}", value)


def graph_from_fields(f: Fields) -> Graph:
    """The traced graph of a schedule file, every node checked (names, ops, shapes, dtypes,
    attributes, inputs defined before use)."""
    Fields(f.table, f.source, f.where, known=("nodes", "inputs", "outputs", "mutations"), error=f.error)
    f.at_most("nodes", "nodes")
    nodes: dict[str, Node] = {}
    for i, n in enumerate(f.list_of("nodes", dict)):
        node = _node_from_fields(f.sub(f"nodes[{i}]", n, NODE_KEYS), nodes)
        nodes[node.name] = node
    inputs, outputs = f.names("inputs"), f.names("outputs")
    mutations = f.get("mutations", dict, "an object mapping input names to node names",
                      check=lambda v: all(k in inputs and is_identifier(x) for k, x in v.items()))
    for key, names in (("inputs", inputs), ("outputs", outputs), ("mutations", list(mutations.values()))):
        for i, name in enumerate(names):
            if name not in nodes:
                f.fail(f"{key}[{i}]", "the name of a node in nodes", name)
    for i, name in enumerate(inputs):
        if nodes[name].op != "input" or nodes[name].attr("index") != i:
            f.fail(f"inputs[{i}]", f"an input node with index {i}", name)
    return Graph(nodes, inputs, outputs, mutations)


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


# --- replay: a saved schedule's partition or order as a strategy's answer -------------------------

def _saved(kind: str, schedule: str | None, given: Any, given_name: str) -> Schedule | None:
    if (schedule is None) == (given is None):
        raise StaxError(f"the replay {kind} strategy takes either schedule=FILE.json or {given_name}=..., "
                        f"not {'both' if schedule else 'neither'}")
    return Schedule.load(schedule) if schedule is not None else None


class ReplayFusion:
    """The partition of a saved schedule (``schedule``: its JSON file), or ``partition`` itself."""

    name = "replay"

    def __init__(self, schedule: str | None = None, partition: Sequence[Sequence[str]] | None = None):
        self.saved = _saved("fusion", schedule, partition, "partition")
        self.partition = self.saved.partition if self.saved else tuple(tuple(b) for b in partition)

    def solve(self, problem: FusionProblem) -> FusionResult:
        if self.saved is not None and self.saved.fusion_problem == problem:
            return FusionResult(self.partition, self.saved.fusion.status, bound=self.saved.fusion.bound)
        return FusionResult(self.partition, Status.HEURISTIC)


class ReplayOrder:
    """The kernel order of a saved schedule (``schedule``: its JSON file), or ``order`` itself."""

    name = "replay"

    def __init__(self, schedule: str | None = None, order: Sequence[str] | None = None):
        self.saved = _saved("order", schedule, order, "order")
        self.order = self.saved.order.order if self.saved else tuple(order)

    def solve(self, problem: OrderProblem) -> OrderResult:
        if self.saved is not None and self.saved.order_problem == problem:
            return OrderResult(self.order, self.saved.order.status, bound=self.saved.order.bound)
        return OrderResult(self.order, Status.HEURISTIC)
