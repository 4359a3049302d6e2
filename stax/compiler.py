"""``stax.compile``: the pipeline as a list of named passes, each one a call you can stop after.
``stax.schedule`` runs the passes up to gcc and returns their decisions as a ``Schedule``;
``stax.build`` turns a Schedule into a callable; ``compile`` is ``build(schedule(...))``.

    graph     = trace(fn, *specs)                      # front end
    program   = lower(graph, cost_model)               # loop IR, materialization (6.x)
    scheduler = Scheduler(program)                     # scheduler nodes, dependencies (7.1)
    problem   = scheduler.fusion_problem(rule)         # the FusionProblem seam (7.2)
    fusion    = run_fusion(strategy, problem)          # a validated partition (7.3)
    order     = run_order(strategy, kernel problem)    # a validated kernel order (7.5)
    kernels   = generate_kernels(...)                  # C++ per block (8.1-8.4)
    memory    = plan_memory_for(...)                   # reuse, in-place reuse or a pool (7.5, 7.6 step 6)
    spans     = group_steps(...)                       # adjacent kernels sharing a parallel region (8.5)
    schedule  = Schedule(...)                          # all of the above, as data (stax.decisions)
    library   = build_library(translation unit)        # gcc, cached
    wrapper   = build_wrapper(...)                     # the call path (8.5)
"""
from __future__ import annotations

import inspect
import numbers
import operator
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

import numpy as np

from stax.codegen.generate import merge_kernels
from stax.codegen.kernel import Kernel
from stax.codegen.entry import compiled_call_plan, compiled_call_source, python_entry_points
from stax.codegen.plans import WrapperPlan
from stax.codegen.wrapper import MemoryTracker, build_wrapper
from stax.codegen.tuning import Tuning
from stax.environment import caching_allocator_from_env, resolve_isa, threads_from_env
from stax.generation import (Products, aliased_buffers, allocated_order_problem, buffer_meta, fusion_stage,
                             generate_kernels, inplace_check, kernel_names, merged_kernel_name)
from stax.explain import Stopwatch, block_names, kernel_lines, memory_lines, order_lines
from stax.util.logs import configure_from_env, log
from stax.errors import CallError, StaxError
from stax.util.suggest import did_you_mean
from stax.util.version import installed_version
from stax.runtime.allocator import NO_CACHING, allocator
from stax.memory.plan import MemoryPlan, grouped_live, plan_memory
from stax.memory.report import MemoryReport
from stax.frontend.tracing import parameter_names, trace
from stax.ir.graph import Graph
from stax.ir.loops import LoweredProgram
from stax.lowering import CostModel
from stax.scheduler.problems import FusionProblem, OrderProblem
from stax.runtime.build import load_module
from stax.runtime.build import build as build_library
from stax.scheduler.labels import node_labels
from stax.scheduler.legality import DEFAULT_FUSION_RULE, DEPENDENCE_RULES, FUSION_RULES
from stax.scheduler.nodes import Scheduler
from stax.scheduler.fusion_log import fusion_decisions, fusion_log
from stax.decisions import Schedule, ScheduleOptions, kernel_choices, products_of
from stax.target import ISA_LEVELS, Isa, native_isa, runs_here
from stax.scheduler.strategies import (FusionResult, FusionStrategy, OrderResult, OrderStrategy, fusion_strategies, order_strategies,
                       ordered_blocks, run_fusion, run_order)


@dataclass
class Options:
    """Compilation choices; every field is a knob an experiment may turn.  Checked when made, so a
    wrong value fails before tracing or compiling starts."""

    fusion: str | FusionStrategy | Callable = "greedy"  # a registry name, a strategy or a function
    order: str | OrderStrategy | Callable = "best"
    rule: str = DEFAULT_FUSION_RULE  # Definition 7.2's CPU rule splitting pointwise loops; "cpu" is the spec's
    dependence: str = "parallel"  # Proposition 7.3 (2), or "sequential": (1), blocks keep loops sequential
    cost_model: CostModel = field(default_factory=CostModel)
    fusion_params: dict[str, Any] = field(default_factory=dict)
    order_params: dict[str, Any] = field(default_factory=dict)
    isa: Isa | str | None = None  # an Isa or its name (stax.target.ISA_LEVELS); None: STAX_ISA, else the CPU's widest
    threads: int | None = None  # None: STAX_THREADS, else every core
    reuse: bool = True
    inplace: bool = True
    group_kernels: bool = True  # adjacent kernels share one C++ function and parallel region
    memory_plan: str = "wrapper"  # or "pool": every intermediate at a fixed offset (inference)
    caching_allocator: bool | None = None  # buffers from the caching allocator; None: STAX_CACHING_ALLOCATOR
    tuning: Tuning = field(default_factory=Tuning)  # the kernel generator's thresholds

    def __post_init__(self):
        """Check every field and fill in what was left unset (``None``) from the environment
        (``stax.environment``: STAX_ISA, STAX_THREADS and STAX_CACHING_ALLOCATOR)."""
        if self.rule not in FUSION_RULES:
            raise StaxError(f"rule={self.rule!r}: use 'cpu-split' (the default: Definition 7.2's CPU rule, "
                            "splitting a pointwise loop where a reduction's outer loops end), 'cpu' (the CPU rule "
                            "as the spec states it) or 'gpu' (element counts only)")
        if self.dependence not in DEPENDENCE_RULES:
            raise StaxError(f"dependence={self.dependence!r}: use 'parallel' (distance 0, the spec's rule) or "
                            "'sequential' (distances <= 0, kernels with sequential loops)")
        if self.memory_plan not in ("wrapper", "pool"):
            raise StaxError(f"memory_plan={self.memory_plan!r}: use 'wrapper' (allocate and free per call, "
                            "with reuse) or 'pool' (one preallocated pool, for inference)")
        if self.threads is None:
            self.threads = threads_from_env()
        elif isinstance(self.threads, bool) or not isinstance(self.threads, numbers.Integral) or self.threads < 1:
            raise StaxError(f"threads={self.threads!r}: give a whole number of threads, at least 1, or None "
                            "(STAX_THREADS, else every core)")
        self.threads = int(self.threads)
        self.isa = resolve_isa(self.isa)
        if self.caching_allocator is None:
            self.caching_allocator = caching_allocator_from_env()
        elif not isinstance(self.caching_allocator, bool):
            raise StaxError(f"caching_allocator={self.caching_allocator!r}: give True, False or None "
                            "(STAX_CACHING_ALLOCATOR, 0 for off)")
        if not isinstance(self.tuning, Tuning):
            raise StaxError(f"tuning must be a stax.Tuning, got {type(self.tuning).__name__}; "
                            "write tuning=stax.Tuning(...)")
        if not isinstance(self.cost_model, CostModel):
            raise StaxError(f"cost_model must be a stax.CostModel, got {type(self.cost_model).__name__}; "
                            "write cost_model=stax.CostModel(...)")
        for registry, spec, params in ((fusion_strategies, self.fusion, self.fusion_params),
                                       (order_strategies, self.order, self.order_params)):
            if not isinstance(params, dict):
                raise StaxError(f"{registry.kind}_params must be a dict of the strategy's keyword arguments, "
                                f"got {type(params).__name__}")
            registry.check(spec, params)

    @classmethod
    def from_keywords(cls, caller: str = "stax.compile", /, **kwargs: Any) -> Options:
        """Options from keyword arguments, naming any that is not a field and the closest field
        (``caller``: what the error says was given them)."""
        known = [f.name for f in fields(cls)]
        for name in kwargs:
            if name not in known:
                raise StaxError(f"{caller} has no option {name!r}; {did_you_mean(name, known)}"
                                f"the options are {', '.join(known)}")
        return cls(**kwargs)


class _CallSignature:
    """``inspect.signature`` of a compiled function: its inputs, by the traced function's names
    (of the class itself: its constructor's, as inspect finds it)."""

    def __get__(self, instance: CompiledFunction | None, owner: type) -> inspect.Signature | None:
        if instance is None:
            return None
        return inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=np.ndarray)
                                  for p in instance.parameters])


@dataclass
class CompiledFunction:
    """A compiled program: call it with numpy arrays (by position, or by the traced function's parameter
    names); inspect every stage's result."""

    graph: Graph
    program: LoweredProgram
    scheduler: Scheduler
    fusion_problem: FusionProblem
    fusion: FusionResult
    order_problem: OrderProblem
    order: OrderResult
    kernels: list[Kernel]  # the C++ functions the wrapper calls (blocks sharing a region are one)
    block_kernels: list[Kernel]  # one per block of the partition, in the chosen order
    kernel_source: str
    wrapper_source: str
    memory_plan: MemoryPlan
    memory: MemoryTracker
    _call: Callable
    isa: Isa
    library_path: str = ""
    dependence: str = "parallel"  # Proposition 7.3's case the partition was validated under
    parameters: tuple[str, ...] = ()  # each input's name, by which a call may pass it
    schedule: Schedule | None = None  # every decision it was built from (``schedule.save(path)``)

    #: calling the function calls ``_call`` (the compiled call, else the Python wrapper) with no
    #: Python frame between: a method forwarding the arguments is a large part of a small call
    __call__ = property(operator.attrgetter("_call"))
    __signature__ = _CallSignature()

    def __repr__(self) -> str:
        """Two lines: the inputs and kernels, then the strategies and the peak (``f.source``,
        ``f.fusion_log``, ``f.memory_report`` have the rest)."""
        externs = sum(k.extern is not None for k in self.block_kernels)
        count, calls = len(self.block_kernels), len(self.kernels)
        return (f"<stax.CompiledFunction({', '.join(self.parameters)}): {count} kernel{'s' * (count != 1)}"
                f"{f' ({externs} extern)' if externs else ''} in {calls} call{'s' * (calls != 1)}, {self.isa.name}>\n"
                f"  fusion {self.fusion.info.strategy or '?'} ({self.fusion.status}, traffic "
                f"{self.fusion.cost} B), order {self.order.info.strategy or '?'} ({self.order.status}, "
                f"peak {self.order.peak} B)")

    @property
    def source(self) -> str:
        return f"# wrapper\n{self.wrapper_source}\n// kernels\n{self.kernel_source}"

    @property
    def fusion_log(self) -> str:
        """Algorithm 7.1's log, each op named by its kind and source line (``exp@model.py:12``)."""
        return fusion_log(self.fusion_problem, self.fusion, labels=self.schedule.labels if self.schedule else None)

    @property
    def modeled_traffic(self) -> int:
        """Definition 7.3's cost of the chosen partition, in bytes (an attribute, like
        ``fusion_log``; the former method call ``f.modeled_traffic()`` still works, and warns)."""
        return _Bytes(self.fusion_problem.cost(self.fusion.partition))

    @property
    def memory_report(self) -> MemoryReport:
        measured = self.memory.peak if self.memory.calls else None
        return MemoryReport.of(self.order_problem, self.order, self.memory_plan, measured)


class _Bytes(int):
    """A byte count that may still be called as the method it was (deprecated)."""

    def __call__(self) -> int:
        warnings.warn("CompiledFunction.modeled_traffic is an attribute now; drop the ()", DeprecationWarning,
                      stacklevel=2)
        return int(self)


def translation_unit(kernels: list[Kernel], counting: bool = False, graph_call: str | None = None) -> str:
    """One C++ file per graph: the kernels, and their Python entry points with the graph's
    compiled call when there is one (or, for the counting build, plain C functions called
    through ctypes)."""
    header = "stax_count.h" if counting else "stax_py.h"
    parts = [f"#include \"{header}\"\n#include <algorithm>", *(k.source for k in kernels if k.source)]
    if not counting:
        parts.append(python_entry_points(kernels, graph_call))
    return "\n\n".join(parts) + "\n"


def _fusion_stage(graph: Graph, options: Options, name: str = "") -> tuple[LoweredProgram, Scheduler, FusionProblem]:
    return fusion_stage(graph, options.cost_model, options.rule, options.dependence, name)


def fusion_problem_of(graph: Graph, options: Options | None = None, name: str = "") -> FusionProblem:
    """The passes up to the FusionProblem seam (lower, scheduler nodes, Definition 7.3's problem under
    ``options``' rule, dependence rule and cost model): what ``schedule_graph`` hands the fusion
    strategy, with no strategy run and no C++ made."""
    return _fusion_stage(graph, options or Options(), name)[2]


def schedule_graph(graph: Graph, options: Options | None = None, parameters: tuple[str, ...] = ()) -> Schedule:
    """Every pass after tracing, up to gcc (see the module docstring); ``None``: the default options.
    ``parameters``: the name of each input in the traced function, by which a call may pass it
    (default: the graph's input names)."""
    configure_from_env()
    options = options or Options()
    parameters = tuple(parameters) or tuple(graph.inputs)
    if len(parameters) != len(graph.inputs) or len(set(parameters)) != len(parameters):
        raise StaxError(f"parameters {parameters} must name each of the graph's {len(graph.inputs)} inputs once")
    isa, threads = options.isa, options.threads
    clock = Stopwatch()
    program, scheduler, problem = _fusion_stage(graph, options)
    labels = node_labels(graph, scheduler)
    clock.lap("lower")
    fusion = run_fusion(options.fusion, problem, **options.fusion_params)
    fusion = replace(fusion, partition=ordered_blocks(problem, fusion.partition))
    clock.lap("fusion")
    log("fusion", lambda: fusion_decisions(problem, fusion, labels))
    names = kernel_names(fusion.partition)
    ops = block_names(fusion.partition, names, labels)
    order_problem = allocated_order_problem(problem, fusion.partition, names, aliased_buffers(scheduler))
    order = run_order(options.order, order_problem, **options.order_params)
    clock.lap("order")
    log("order", lambda: order_lines(order_problem, order, ops))
    block_kernels = generate_kernels(scheduler, problem, fusion.partition, order.order, names, isa, threads,
                                     options.tuning, dependence=options.dependence, labels=labels)
    clock.lap("codegen")
    log("kernels", lambda: kernel_lines(block_kernels, ops, isa.width))
    meta = buffer_meta(program, order_problem)
    memory = plan_memory_for(block_kernels, order_problem, order.order, meta, options)
    spans = group_steps(block_kernels, memory, order_problem) if options.group_kernels else \
        [(t, t) for t in range(len(block_kernels))]
    memory = replace(memory, live=grouped_live(memory, order_problem, spans))
    clock.lap("memory")
    log("memory", lambda: memory_lines(memory))
    log("schedule", lambda: [f"{strategy_name(options.fusion)} fusion, {strategy_name(options.order)} order: "
                             f"{len(problem.nodes)} nodes -> {len(block_kernels)} kernels in {len(spans)} calls, "
                             f"planned peak {memory.peak} bytes"])
    log("timing", lambda: [clock.line("schedule")])
    resolved = ScheduleOptions(strategy_name(options.fusion), strategy_name(options.order), options.rule,
                               options.dependence, options.cost_model, isa.name, threads, options.reuse,
                               options.inplace, options.group_kernels, options.memory_plan,
                               dict(options.fusion_params), dict(options.order_params), options.caching_allocator)
    return Schedule(graph, parameters, resolved, problem, fusion, order_problem, order, memory, tuple(spans),
                    kernel_choices(block_kernels, isa), options.tuning, installed_version(),
                    Products(program, scheduler, block_kernels), labels)


def schedule(fn: Callable, *specs: Any, fusion: Any = "greedy", order: Any = "best", **kwargs: Any) -> Schedule:
    """Trace ``fn`` on ``specs`` and run every pass up to, not including, gcc (no compiler needed);
    the options are ``compile``'s."""
    configure_from_env()
    options = Options.from_keywords(fusion=fusion, order=order, **kwargs)
    clock = Stopwatch()
    graph = trace(fn, *specs, isa=options.isa)
    clock.lap("trace")
    log("timing", lambda: [clock.line(getattr(fn, "__name__", "function"))])
    return schedule_graph(graph, options, parameter_names(fn, len(specs)))


def _linked(sched: Schedule, made: Products) -> tuple[list[Kernel], WrapperPlan, Any, str]:
    """The kernels as called (each span of steps merged into one function), the wrapper's plan,
    the compiled call's plan and the translation unit that gcc builds (spec 8.5)."""
    program, block_kernels, memory, spans = made.program, made.block_kernels, sched.memory, list(sched.spans)
    kernels = [block_kernels[a] if a == b else merge_kernels(merged_kernel_name(block_kernels[a:b + 1]),
                                                             [g for k in block_kernels[a:b + 1] for g in k.generators])
               for a, b in spans]
    meta = buffer_meta(program, sched.order_problem)
    plan = WrapperPlan(program.inputs, kernels, spans, meta, program.outputs, sched.parameters, set(program.mutations))
    call_plan = compiled_call_plan(plan, memory)
    source = translation_unit(kernels, graph_call=None if call_plan is None else
                              compiled_call_source(plan, memory, call_plan))
    return kernels, plan, call_plan, source


def translation_unit_of(sched: Schedule) -> str:
    """The C++ that ``build(sched)`` hands gcc, made without gcc."""
    return _linked(sched, products_of(sched))[3]


def build(sched: Schedule) -> CompiledFunction:
    """``stax.build``: the kernels' translation unit, built by gcc, and the wrapper that calls them."""
    configure_from_env()
    clock = Stopwatch()
    made = products_of(sched)
    program, block_kernels, memory = made.program, made.block_kernels, sched.memory
    kernels, plan, call_plan, source = _linked(sched, made)
    isa = ISA_LEVELS[sched.options.isa]
    clock.lap("codegen")
    library_path = build_library(source, isa)
    clock.lap("gcc (or the cache)")
    wrapper_src, call, tracker = build_wrapper(plan, memory, load_module(library_path), call_plan,
                                               allocator if sched.options.caching_allocator else NO_CACHING)
    clock.lap("wrapper")
    log("timing", lambda: [clock.line("build")])
    if not runs_here(isa):
        call = _refusing_call(isa)
    return CompiledFunction(sched.graph, program, made.scheduler, sched.fusion_problem, sched.fusion,
                            sched.order_problem, sched.order, kernels, block_kernels, source, wrapper_src, memory,
                            tracker, call, isa, str(library_path), sched.options.dependence, sched.parameters, sched)


def compile_graph(graph: Graph, options: Options | None = None, parameters: tuple[str, ...] = ()) -> CompiledFunction:
    """``build(schedule_graph(...))``: every pass after tracing, then gcc."""
    return build(schedule_graph(graph, options, parameters))


def strategy_name(spec: Any) -> str:
    return spec if isinstance(spec, str) else getattr(spec, "name", getattr(spec, "__name__", type(spec).__name__))


def _refusing_call(isa: Isa) -> Callable:
    """The call of a function built for a vector level this CPU does not have (its code can be read
    and its kernels are built, but running them would end the process on an illegal instruction)."""
    def call(*args: Any, **named: Any) -> Any:
        native = native_isa().name
        raise CallError(f"this function was compiled for {isa.name}, which this CPU does not have (its widest level "
                        f"is {native}); compile it with isa={native!r} (or without STAX_ISA) to run it")
    return call


def group_steps(kernels: list[Kernel], memory: MemoryPlan, order_problem: OrderProblem) -> list[tuple[int, int]]:
    """Spans of consecutive C++ kernels called as one function sharing a parallel region (spec 8.5),
    grown while taking the span's storage before the call does not raise the plan's peak."""
    spans: list[tuple[int, int]] = []
    for t, kernel in enumerate(kernels):
        if spans and not kernel.extern and not kernels[spans[-1][0]].extern:
            trial = spans[:-1] + [(spans[-1][0], t)]
            if max(grouped_live(memory, order_problem, trial), default=0) <= memory.peak:
                spans = trial
                continue
        spans.append((t, t))
    return spans


def plan_memory_for(kernels: list[Kernel], order_problem: OrderProblem, order: tuple[str, ...],
                    meta: dict[str, tuple[tuple[int, ...], str]], options: Options) -> MemoryPlan:
    """Spec 7.6 step 6: storage for every allocated buffer (reuse, in-place reuse or a pool)."""
    return plan_memory(order_problem, order, reuse=options.reuse, inplace=options.inplace,
                       pool=options.memory_plan == "pool", dtypes={n: m[1] for n, m in meta.items()},
                       inplace_ok=inplace_check(kernels))


def compile(fn: Callable, *specs: Any, fusion: Any = "greedy", order: Any = "best", **kwargs: Any) -> CompiledFunction:
    """Trace ``fn`` on ``specs`` (numpy arrays or ``TensorSpec``) and compile it.

    ``fusion`` / ``order``: a strategy name from the registries, a strategy object or a function.
    Other keyword arguments are ``Options`` fields (rule="cpu-split"|"cpu"|"gpu", dependence="parallel"|"sequential",
    cost_model, threads, isa, fusion_params...), checked before tracing.
    """
    return build(schedule(fn, *specs, fusion=fusion, order=order, **kwargs))
