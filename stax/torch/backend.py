"""``torch.compile(model, backend="stax")``: a TorchDynamo backend, the PyTorch front end's entry
point for whole programs beside :func:`~stax.torch.capture.import_module` and
:func:`~stax.torch.capture.import_training_step` (which capture one graph, for the solvers).

Dynamo hands the backend one FX graph per region between graph breaks.  AOTAutograd
(``torch._dynamo.backends.common.aot_autograd``) functionalizes it and decomposes it into core
ATen with the front end's table (as :func:`~stax.torch.capture.capture` does); when a gradient
is needed it splits the joint graph into a forward and a backward with the min-cut
rematerialization partitioner (Inductor's: it chooses which activations the forward saves and
which the backward recomputes).  Stax compiles each graph AOTAutograd makes, translated by
:func:`~stax.torch.capture.translate`, with ``torch.compile(..., options={...})`` as
:class:`stax.Options`; autograd calls the compiled backward on ``loss.backward()``.

Shapes: stax compiles static shapes.  Dynamo guards each graph on its inputs' shapes and
recompiles for a new one.  A graph it hands over with symbolic sizes (its automatic dynamic
shapes after a size changed, or ``dynamic=True``) is specialized: each concrete input
signature gets its own AOTAutograd and stax compilation, on its first call.

Every graph is a :class:`CompiledGraph` in :func:`compiled_graphs` (in compile order), with its
Schedule.  A graph stax cannot translate or compile runs eagerly (the graph AOTAutograd made, so
autograd still works), with one warning line naming the op (:class:`StaxFallbackWarning`);
:func:`summary` counts them, and is printed at exit when any graph ran eagerly.
"""
from __future__ import annotations

import atexit
import itertools
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from stax.compiler import CompiledFunction, Options, build, compile_graph
from stax.errors import StaxError, UnsupportedError
from stax.frontend.tracing import TensorSpec, trace
from stax.ir.graph import Graph
from stax.decisions import Schedule
from stax.torch.capture import _decompositions, _streams, _to_numpy, _without_onednn, require_torch, translate
from stax.torch.aten import dtype_name
from stax.torch.rewrites import rewrites

#: the graphs AOTAutograd makes, and the dynamo graph it could not handle
KINDS = ("forward", "backward", "inference", "region")


class StaxFallbackWarning(UserWarning):
    """A graph that runs eagerly because stax could not translate or compile it."""


@dataclass
class CompiledGraph:
    """One graph the backend was handed: what stax made of it, or why it runs eagerly."""

    number: int  # its place in compile order
    region: int  # the dynamo graph it comes from (one per region between graph breaks, per compilation)
    kind: str  # one of KINDS
    inputs: tuple[tuple[tuple[int, ...], str], ...]  # each input's shape and dtype
    fx_graph: Any  # the ATen graph (a torch.fx.GraphModule), or dynamo's graph for a "region"
    graph: Graph | None = None  # its stax translation
    compiled: CompiledFunction | None = None  # what runs it, when stax does
    fallback: str = ""  # why it runs eagerly (one line), "" when stax runs it
    eager_calls: int = 0  # calls that stax's function refused at run time, which then ran eagerly

    @property
    def schedule(self) -> Schedule | None:
        """Every decision stax took for the graph (``schedule.save(path)``; ``stax.build`` replays it)."""
        return self.compiled.schedule if self.compiled is not None else None

    @property
    def op(self) -> str:
        """The ATen op the fallback names (``aten.cumprod.default``), else the reason's first words."""
        found = re.search(r"\bop ([\w.]+)", self.fallback)
        return found.group(1) if found else re.split(r"[;:]", self.fallback)[0]

    def recompile(self, **options: Any) -> CompiledFunction:
        """Compile the graph again with other options (``fusion="none"``, ``order="dp"``, ...);
        its later calls run the new function."""
        options = Options.from_keywords(f"recompile of graph {self.number}", **options)
        return self._use(compile_graph(self._graph(), options, self.compiled.parameters))

    def rebuild(self, schedule: Schedule) -> CompiledFunction:
        """``stax.build(schedule)`` (a saved one, or one made with other strategies) for this graph;
        its later calls run the built function."""
        if schedule.graph != self._graph():
            raise StaxError(f"the schedule is not one of graph {self.number} ({self.kind}): its traced graph "
                            "differs; save the schedule of this graph (compiled_graphs()[i].schedule) and build that")
        return self._use(build(schedule))

    def _graph(self) -> Graph:
        if self.graph is None or self.compiled is None:
            raise StaxError(f"graph {self.number} ({self.kind}) runs eagerly ({self.fallback}); stax has no program "
                            "of it to compile again")
        return self.graph

    def _use(self, compiled: CompiledFunction) -> CompiledFunction:
        if compiled.parameters != self.compiled.parameters:
            raise StaxError(f"the new function of graph {self.number} takes {compiled.parameters}, not "
                            f"{self.compiled.parameters}")
        self.compiled = compiled
        return compiled


_GRAPHS: list[CompiledGraph] = []
_REGIONS = itertools.count()


def compiled_graphs() -> list[CompiledGraph]:
    """Every graph the backend was handed since the last :func:`reset`, in compile order."""
    return list(_GRAPHS)


def reset() -> None:
    """Forget the graphs recorded so far and number regions from 0 again (the compiled code
    dynamo holds keeps running: ``torch._dynamo.reset()`` drops it)."""
    global _REGIONS
    _GRAPHS.clear()
    _REGIONS = itertools.count()


def summary() -> str:
    """One line: the graphs stax compiled, by kind, and those that run eagerly, by op."""
    compiled = Counter(g.kind for g in _GRAPHS if not g.fallback)
    eager = Counter(g.op for g in _GRAPHS if g.fallback)
    refused = sum(g.eager_calls for g in _GRAPHS)
    kinds = ", ".join(f"{compiled[k]} {k}" for k in KINDS if compiled[k]) or "none"
    line = f"stax backend: {sum(compiled.values())} graphs compiled ({kinds}); {sum(eager.values())} ran eagerly"
    if eager:
        line += " (" + ", ".join(f"{op}: {count}" for op, count in eager.most_common()) + ")"
    if refused:
        line += f"; {refused} calls of compiled graphs ran eagerly after a stax error at run time"
    return line


def _report_at_exit() -> None:
    if any(g.fallback or g.eager_calls for g in _GRAPHS):
        print(summary(), file=sys.stderr)


atexit.register(_report_at_exit)


def _options(options: dict[str, Any] | None) -> Options:
    """``torch.compile``'s ``options`` as stax Options (a key that is not a field is named, with the closest)."""
    return Options.from_keywords("torch.compile(backend='stax', options=...)", **(options or {}))


def stax_backend(gm: Any, example_inputs: Sequence[Any], *, options: dict[str, Any] | None = None,
                 mode: str | None = None) -> Callable[..., Any]:
    """The dynamo backend (``torch.compile(model, backend="stax", options={...})``): ``gm`` is one
    region's FX graph, ``example_inputs`` its (fake) inputs; returns what dynamo calls in its place."""
    stax_options = _options(options)
    if mode not in (None, "default"):
        _warn(f"torch.compile's mode={mode!r} is Inductor's; stax ignores it (pass "
              "options={'fusion': ..., 'order': ..., 'threads': ...} instead)")
    region = next(_REGIONS)
    if _symbolic(example_inputs):
        return _specializing(gm, stax_options, region)
    return _through_aot(gm, example_inputs, stax_options, region)


def _symbolic(values: Sequence[Any]) -> bool:
    """Whether any input is a symbolic number or a tensor with a symbolic size, stride or offset."""
    torch = require_torch()
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for value in values:
        if isinstance(value, torch.Tensor):
            if any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride(), value.storage_offset())):
                return True
        elif isinstance(value, symbolic):
            return True
    return False


def _through_aot(gm: Any, inputs: Sequence[Any], options: Options, region: int) -> Callable[..., Any]:
    """AOTAutograd of ``gm`` with stax compiling its graphs; dynamo's graph itself if AOTAutograd fails."""
    torch = require_torch()
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def compiler(kind: str) -> Callable[..., Any]:
        return lambda graph, example: _compile_aten(graph, example, kind, region, options)
    try:
        aot = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), partition_fn=min_cut_rematerialization_partition,
                           decompositions=_backend_decompositions())
        # the modes capture traces under: attention's math form, nn.LSTM's decomposition, F.one_hot's rewrite
        with sdpa_kernel(SDPBackend.MATH), _without_onednn(torch), rewrites(torch):
            return aot(gm, list(inputs))
    except Exception as error:  # never raise out of torch.compile: run the region eagerly instead
        if _is_dynamo_signal(error):
            raise
        record = _record(region, "region", inputs, gm)
        _fall_back(record, error, "AOTAutograd")
        return gm.forward


def _is_dynamo_signal(error: Exception) -> bool:
    """Whether ``error`` is dynamo asking to analyse the frame again or to skip it: not a failure."""
    from torch._dynamo.exc import RestartAnalysis, SkipFrame
    return isinstance(error, (RestartAnalysis, SkipFrame))


def _backend_decompositions() -> dict[Any, Callable[..., Any]]:
    """The front end's decompositions and two for what dynamo's graphs hold that a capture's do
    not: ``native_dropout``, which torch decomposes into ``rand_like`` (a random op stax
    translates) and a mask, and ``prims.fma``, dynamo's rewrite of ``add_``, ``addcmul_`` and
    ``addcdiv_`` with a ``value`` (an optimizer's step), as ``a * b + c`` (its eager form)."""
    torch = require_torch()
    from torch._decomp import decomposition_table
    from torch._inductor import inductor_prims
    dropout = torch.ops.aten.native_dropout.default
    return {**_decompositions(), dropout: decomposition_table[dropout],
            inductor_prims.fma: lambda a, b, c: a * b + c}


def _specializing(gm: Any, options: Options, region: int) -> Callable[..., Any]:
    """A dynamo graph with symbolic sizes, compiled for each concrete input signature on its first call."""
    torch = require_torch()
    compiled: dict[tuple, Callable[..., Any]] = {}

    def call(*args: Any) -> Any:
        key = (torch.is_grad_enabled(), tuple(_signature_of(a) for a in args))
        if key not in compiled:
            compiled[key] = _through_aot(gm, args, options, region)
        return compiled[key](*args)
    # dynamo must not trace the compilation a call may start
    return torch._dynamo.disable(call, reason="stax compiles this graph per input signature")


def _signature_of(value: Any) -> Any:
    """What a compilation specializes on: a tensor's layout and dtype, a number's value."""
    if hasattr(value, "stride") and hasattr(value, "dtype"):
        return (tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype, value.device,
                value.requires_grad)
    return value if isinstance(value, (bool, int, float)) else type(value)


def _record(region: int, kind: str, inputs: Sequence[Any], fx_graph: Any) -> CompiledGraph:
    signature = tuple((tuple(s if isinstance(s, int) else str(s) for s in x.shape),
                       str(x.dtype).removeprefix("torch.")) if hasattr(x, "shape") else ((), type(x).__name__)
                      for x in inputs)
    record = CompiledGraph(len(_GRAPHS), region, kind, signature, fx_graph)
    _GRAPHS.append(record)
    return record


def _one_line(error: BaseException, where: str = "stax") -> str:
    """The error's first line; one that is not a StaxError names its class and where it was
    raised (in stax: a bug, which it says)."""
    first = (str(error).strip().splitlines() or [""])[0]
    if isinstance(error, StaxError):
        return first
    return f"{type(error).__name__} in {where}{' (a bug)' if where == 'stax' else ''}: {first}"


def _fall_back(record: CompiledGraph, error: BaseException, where: str = "stax") -> None:
    record.fallback = _one_line(error, where)
    _warn(f"{record.kind} graph {record.number} runs eagerly: {record.fallback}")


def _warn(message: str) -> None:
    """One line on stderr (no source line: the graph's code is torch's, not the caller's)."""
    warnings.warn_explicit(f"stax backend: {message}", StaxFallbackWarning, "torch.compile", 0)


def _compile_aten(gm: Any, example_inputs: Sequence[Any], kind: str, region: int, options: Options) -> Callable:
    """AOTAutograd's compiler: stax's function for the ATen graph ``gm``, or the graph itself
    (run eagerly) when stax cannot translate or compile it.  Both take their inputs boxed (a
    list that the call empties, so that inputs can be freed as soon as they are read)."""
    from functorch.compile import make_boxed_func
    from torch.utils._python_dispatch import _disable_current_modes
    record = _record(region, kind, example_inputs, gm)
    try:
        with _disable_current_modes():  # AOTAutograd's fake mode: the translation folds constants with real tensors
            return _StaxCall(record, gm, example_inputs, options)
    except Exception as error:  # never raise out of torch.compile: run the graph eagerly instead
        _fall_back(record, error)
        return make_boxed_func(gm.forward)


class _StaxCall:
    """A compiled ATen graph as AOTAutograd calls it: torch tensors in a list, torch tensors out,
    each output with the strides torch traced it with (AOTAutograd regenerates views from them).
    An output that is an input is that input, as in torch's call; number inputs (the sizes of a
    specialized graph) are the values the graph was traced with, so they are not stax's inputs."""

    def __init__(self, record: CompiledGraph, gm: Any, example_inputs: Sequence[Any], options: Options):
        torch = require_torch()
        self.record, self.gm = record, gm
        self._boxed_call = True  # on the instance: the wrapper dynamo puts around a backward copies its __dict__
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.tensor_inputs = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
        numbers = [p for i, p in enumerate(placeholders) if i not in self.tensor_inputs]
        for node in numbers:
            if any(user.op != "output" for user in node.users):
                raise UnsupportedError(f"input {node.name} of the graph is a {type(node.meta.get('val')).__name__} "
                                       "that its ops read; stax compiles graphs of tensors")
        outputs = _output_node(gm).args[0]
        outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        self.template = [self._slot(v, placeholders) for v in outputs]
        computed = [v for v in outputs if _is_node(v) and v.op != "placeholder"]
        tensor_gm = _tensor_graph(gm, computed, numbers)
        specs = [_spec(example_inputs[i], i) for i in self.tensor_inputs]
        fn, self.constants = translate(tensor_gm, len(specs), f"the {record.kind} graph {record.number}")
        self.seeded = bool(_streams(tensor_gm))
        record.graph = trace(fn, *specs, *self.constants, *([np.array(0, np.int64)] * self.seeded), isa=options.isa)
        record.compiled = compile_graph(record.graph, options)

    @staticmethod
    def _slot(value: Any, placeholders: list[Any]) -> tuple[str, Any]:
        """Where an output comes from: ("input", its position), ("stax", its traced layout) or ("value", it)."""
        torch = require_torch()
        if not _is_node(value):
            return "value", value
        if value.op == "placeholder":
            return "input", placeholders.index(value)
        if not isinstance(value.meta.get("val"), torch.Tensor):
            raise UnsupportedError(f"output {value.name} of the graph is not a tensor; stax computes tensors")
        return "stax", _Layout.of(value.meta["val"])

    def __call__(self, args: list[Any]) -> list[Any]:
        tensors = list(args)
        args.clear()
        try:
            results = self.record.compiled(*[_to_numpy(tensors[i]) for i in self.tensor_inputs], *self.constants,
                                           *self._seed())
            return self._outputs(tensors, iter(results if isinstance(results, tuple) else (results,)))
        except Exception as error:  # e.g. an integer division by zero: torch's own call says what it says
            if not self.record.eager_calls:
                _warn(f"a call of {self.record.kind} graph {self.record.number} runs eagerly: {_one_line(error)}")
            self.record.eager_calls += 1
            return list(self.gm(*tensors))

    def _seed(self) -> list[np.ndarray]:
        """A fresh seed from torch's generator for a graph that draws random numbers (so that
        ``torch.manual_seed`` makes the draws repeat)."""
        if not self.seeded:
            return []
        torch = require_torch()
        return [np.array(int(torch.randint(-(1 << 63), (1 << 63) - 1, (), dtype=torch.int64)), np.int64)]

    def _outputs(self, tensors: list[Any], results: Any) -> list[Any]:
        return [_as_traced(next(results), slot) if kind == "stax" else tensors[slot] if kind == "input" else slot
                for kind, slot in self.template]


def _spec(value: Any, position: int) -> TensorSpec:
    """The TensorSpec of an example input (a fake tensor): stax compiles tensors on the CPU."""
    torch = require_torch()
    if not isinstance(value, torch.Tensor):
        raise UnsupportedError(f"input {position} of the graph is a {type(value).__name__}; stax compiles graphs "
                               "of tensors only")
    if value.device.type != "cpu":
        raise UnsupportedError(f"input {position} of the graph is on {value.device}; stax compiles for the CPU")
    return TensorSpec(tuple(int(s) for s in value.shape), dtype_name(value.dtype))


def _is_node(value: Any) -> bool:
    return isinstance(value, require_torch().fx.Node)


def _output_node(gm: Any) -> Any:
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def _tensor_graph(gm: Any, outputs: list[Any], dropped: list[Any]) -> Any:
    """A copy of ``gm`` returning only ``outputs`` (the tensors it computes: a backward graph
    also returns None for each input that needs no gradient) and without the placeholders
    ``dropped`` (number inputs no op reads)."""
    torch = require_torch()
    graph = torch.fx.Graph()
    copies: dict[Any, Any] = {}
    graph.graph_copy(gm.graph, copies)
    graph.output(tuple(copies[node] for node in outputs))
    for node in dropped:
        graph.erase_node(copies[node])
    return torch.fx.GraphModule(gm, graph)


@dataclass(frozen=True)
class _Layout:
    """An output's shape, dtype and strides as torch traced them; ``restride``: whether stax's
    contiguous result must be copied into those strides (a transposed result, say)."""

    shape: tuple[int, ...]
    dtype: Any
    stride: tuple[int, ...]
    restride: bool

    @classmethod
    def of(cls, meta: Any) -> _Layout:
        from torch._prims_common import is_non_overlapping_and_dense_or_false
        restride = not meta.is_contiguous() and is_non_overlapping_and_dense_or_false(meta)
        return cls(tuple(meta.shape), meta.dtype, tuple(meta.stride()), restride)


def _as_traced(array: np.ndarray, layout: _Layout) -> Any:
    """``array`` as a torch tensor of the traced layout."""
    torch = require_torch()
    tensor = torch.from_numpy(np.asarray(array))
    if tensor.shape != layout.shape or tensor.dtype != layout.dtype:
        raise StaxError(f"stax gave a {tensor.dtype} tensor of shape {tuple(tensor.shape)} where torch traced "
                        f"{layout.dtype} {layout.shape} (a bug in stax's translation)")
    if not layout.restride:
        return tensor
    return torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype).copy_(tensor)
