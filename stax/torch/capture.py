"""The optional PyTorch front end: capture a module or function with PyTorch's own tooling and
translate its ATen graph into a stax program (``pip install 'stax[torch]'``).

Capture (checked on torch 2.13): ``make_fx`` with ``core_aten_decompositions()`` traces the
function on real tensors (on fake ones where real tracing reads a tensor's value, as Hugging
Face's attention masks do: :func:`capture_either`) into an FX graph of core ATen ops, which is
then re-traced under ``torch.func.functionalize`` (as AOTAutograd does): in-place ops (``add_``,
``sigmoid_``, writes into slices) become out-of-place ones (``add``, ``slice_scatter``), and an
update of an input (batch norm's running statistics) becomes a ``copy_`` of its new value into
the input at the end of the graph.  The translation makes those the program's in-place updates of its inputs
(``Graph.mutations``), so the compiled call writes them into the arrays it is given: with
:meth:`TorchProgram.module_arguments` those share memory with the module's buffers, which are
then updated as torch's own call updates them.  For a training step the traced
function computes the loss and ``torch.autograd.grad`` of it with respect to every parameter,
so the graph is the joint forward + backward graph (what AOTAutograd partitions). Attention
is traced under ``sdpa_kernel(SDPBackend.MATH)`` so that its backward decomposes into matmuls
and softmax instead of the fused CPU flash-attention backward kernel, and with oneDNN off, so
that ``nn.LSTM`` decomposes into its cells. A few ops outside core ATen's decompositions are
decomposed too (ELU, Hardtanh, ``repeat``, ``isnan``), and ``F.one_hot``, whose kernel checks its
data, is rewritten (:mod:`stax.torch.rewrites`). Parameters and buffers
become graph inputs, in ``named_parameters()`` then ``named_buffers()`` order, before the call's
own tensors.

Translation: the FX graph is interpreted inside :func:`stax.trace` with stax's proxy tensors,
one ATen op at a time (table in :mod:`stax.torch.aten`); an op without a translation raises
:class:`UnsupportedError` naming it. Nodes that do not depend on any input (``arange``,
``full``, ...) are evaluated by torch at import time: a constant with one value becomes a
stax scalar constant, any other constant becomes an extra input after the call's own inputs
(as ``torch.export`` lifts tensor constants), supplied by :meth:`TorchProgram.arguments`.

Random numbers (dropout's ``bernoulli``, ``rand``, ``randn``, ``normal_``, ...) are never folded:
the k-th random node draws stream k of stax's counter-based generator (:mod:`stax.kernels.random_draws`)
from a ``seed`` input that the program takes last (``stax.torch.aten.RANDOM``).

This is the only module of stax that imports torch, and only when called.
"""
from __future__ import annotations

import contextlib
import importlib
import operator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from stax.compiler import CompiledFunction, compile
from stax.errors import StaxError, UnsupportedError
from stax.frontend.tensor import Tensor
from stax.frontend.tracing import trace, write_back
from stax.ir.graph import Graph
from stax.reference import evaluate
from stax.torch.strided_views import Layout
from stax.torch.aten import ATEN, RANDOM, STORAGE_OPS, dtype_name, full
from stax.torch.rewrites import rewrites


def require_torch() -> ModuleType:
    """The ``torch`` module, or a StaxError that says how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise StaxError("the PyTorch front end needs torch: pip install 'stax[torch]' "
                        f"(the CPU build of torch 2.13.0) [{error}]") from error


@dataclass(frozen=True)
class Splat:
    """A folded constant whose elements are all ``value``."""

    value: bool | int | float
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Lifted:
    """A folded constant passed as the extra input number ``index`` (after the captured inputs)."""

    index: int


@dataclass
class TorchProgram:
    """A PyTorch computation translated to stax.

    ``fn`` is a stax-traceable function of ``len(input_names)`` tensors: the captured inputs
    (parameters, buffers, then the call's tensors) followed by the lifted constants.
    ``example`` holds the example inputs and ``expected`` PyTorch's eager outputs on them.
    """

    name: str
    fn: Callable[..., tuple[Tensor, ...]]
    input_names: list[str]
    example: list[np.ndarray]
    constants: list[np.ndarray]
    expected: list[np.ndarray]
    provenance: dict[str, Any] = field(default_factory=dict)
    fx_graph: Any = None
    #: the inputs the program updates in place (buffers such as running statistics), and their
    #: values after PyTorch's eager call on the example
    updated: list[str] = field(default_factory=list)
    expected_updates: list[np.ndarray] = field(default_factory=list)
    #: whether the program draws random numbers (dropout, noise): its last input is then ``seed``,
    #: and ``expected`` holds torch's outputs under stax's draws of ``example_seed``
    seeded: bool = False
    example_seed: int = 0

    def arguments(self, *tensors: Any, seed: int | None = None) -> list[np.ndarray]:
        """The arrays to call the compiled program with: the captured inputs (torch tensors or
        arrays, defaults to the example) followed by the lifted constants, and the seed of a
        program that draws random numbers (defaults to the example's with the example, else to a
        draw from torch's default generator, as torch's own call draws its numbers)."""
        arrays = [_to_numpy(t) for t in tensors] if tensors else self.example
        if self.seeded and seed is None and not tensors:
            seed = self.example_seed
        return [*arrays, *self.constants, *self._seed(seed)]

    def _seed(self, seed: int | None) -> list[np.ndarray]:
        """The seed input, if the program takes one (a fresh draw for None)."""
        if not self.seeded:
            if seed is not None:
                raise StaxError(f"{self.name} draws no random numbers: it takes no seed")
            return []
        if seed is None:
            torch = require_torch()
            seed = int(torch.randint(-(1 << 63), (1 << 63) - 1, (), dtype=torch.int64))
        return [np.array(seed, np.int64)]

    def module_arguments(self, module: Any, *tensors: Any, seed: int | None = None) -> list[np.ndarray]:
        """The arrays to call a program imported from ``module`` with: its parameters and buffers
        sharing memory with the module (so that the call updates the buffers in place, as
        torch's own call does), then ``tensors`` (the call's inputs and targets), then the
        lifted constants and the seed (as :meth:`arguments`)."""
        state = [p.detach() for p in module.parameters()] + list(module.buffers())
        arrays = [t.numpy() if t.is_contiguous() else _to_numpy(t) for t in state]
        if any(not np.shares_memory(a, t.numpy()) for a, t in zip(arrays, state) if t.is_contiguous()):
            raise StaxError("module_arguments: a parameter or buffer is not a CPU tensor whose memory numpy can share")
        return [*arrays, *(_to_numpy(t) for t in tensors), *self.constants, *self._seed(seed)]

    def graph(self) -> Graph:
        return trace(self.fn, *self.arguments())

    def compile(self, **options: Any) -> CompiledFunction:
        """``stax.compile`` of the program (``fusion=``, ``order=`` and other Options)."""
        return compile(self.fn, *self.arguments(), **options)


def _to_numpy(value: Any) -> np.ndarray:
    return value.detach().contiguous().numpy() if hasattr(value, "detach") else np.asarray(value)


def _decompositions() -> dict[Any, Callable[..., Any]]:
    """Core ATen's decompositions but the pads' (see ``_KEPT_WHOLE``), and batch norm's: ``native_batch_norm``'s schema does not mark
    the running statistics it updates, so it is decomposed into ``_native_batch_norm_legit``
    (which marks them) for functionalization to see the update, and the functional form that
    functionalization gives is decomposed in turn; and the fused layers of ``fused_layers``."""
    torch = require_torch()
    from torch._decomp import core_aten_decompositions, decomposition_table
    from stax.torch.fused_layers import fused_layer_decompositions
    aten = torch.ops.aten
    batch_norm = (aten.native_batch_norm.default, aten._native_batch_norm_legit_functional.default)
    table = {**core_aten_decompositions(), **{op: decomposition_table[op] for op in batch_norm + _also_decomposed(aten)},
             **fused_layer_decompositions()}
    return {op: f for op, f in table.items() if _target_name(op) not in _KEPT_WHOLE}


def _also_decomposed(aten: Any) -> tuple[Any, ...]:
    """Ops outside core ATen's decompositions whose decompositions are ops stax translates: ELU
    and SELU, Hardtanh and ReLU6, InstanceNorm's ``repeat``, ``isnan``."""
    return aten.elu.default, aten.hardtanh.default, aten.repeat.default, aten.isnan.default


#: ops whose decompositions index with one tensor per padded (or resampled, or windowed) dim: stax
#: translates them whole
_KEPT_WHOLE = frozenset({f"{name}_pad{k}d{suffix}" for name in ("reflection", "replication") for k in (1, 2, 3)
                         for suffix in ("", "_backward")} | {"upsample_nearest2d", "upsample_bilinear2d",
                                                            "_adaptive_avg_pool2d", "im2col", "col2im"})


def _fresh(tensors: Sequence[Any]) -> list[Any]:
    """Copies of ``tensors`` (keeping ``requires_grad``), for a run that may update them in place."""
    return [t.detach().clone().requires_grad_(t.requires_grad) if hasattr(t, "detach") else t for t in tensors]


@contextlib.contextmanager
def _without_onednn(torch: Any) -> Iterator[None]:
    """oneDNN off while tracing, so that nn.LSTM is traced as its decomposition (oneDNN's fused RNN
    layer has none); set directly, as torch's own context manager warns about TF32 on Intel GPUs."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def capture(fn: Callable[..., Any], flat_inputs: Sequence[Any], tracing_mode: str = "real") -> Any:
    """The functionalized core-ATen FX graph of ``fn(*flat_inputs)`` (see the module docstring),
    traced on the real tensors or on fake ones of their shapes (``tracing_mode``: ``"real"`` or
    ``"fake"``); ``flat_inputs`` are not modified."""
    torch = require_torch()
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel
    table = _decompositions()
    with sdpa_kernel(SDPBackend.MATH), _without_onednn(torch), rewrites(torch):
        traced = make_fx(fn, decomposition_table=table, tracing_mode=tracing_mode)(*_fresh(flat_inputs))
        return make_fx(functionalize(traced, remove="mutations"), decomposition_table=table,
                       tracing_mode=tracing_mode)(*_fresh(flat_inputs))


def capture_either(fn: Callable[..., Any], flat_inputs: Sequence[Any]) -> tuple[Any, str]:
    """The graph of :func:`capture` and the tracing mode that gave it: on the real tensors, or, where
    that reads a traced tensor's value (``.item()``, a branch on a tensor), on fake tensors. Code
    that checks for tracing then takes its traceable branch: Hugging Face's attention masks build
    the packed-sequence mask as tensor ops instead of testing it for a shortcut, as under
    ``torch.compile``. Code that needs the value whatever the mode fails in both."""
    try:
        return capture(fn, flat_inputs), "real"
    except RuntimeError as error:
        if "_local_scalar_dense" not in str(error):
            raise
    return capture(fn, flat_inputs, "fake"), "fake"


def _updated_inputs(gm: Any) -> list[int]:
    """The positions of the placeholders that the functionalized graph copies new values into."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [placeholders.index(n.args[0]) for n in gm.graph.nodes if _is_write_back(n)]


def _is_write_back(node: Any) -> bool:
    return node.op == "call_function" and _target_name(node.target) == "copy_" and node.args[0].op == "placeholder"


def _target_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(target, "__name__", str(target))


#: the ATen ops whose result's values are unspecified (torch.empty): folded as zeros
_UNINITIALIZED = ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided")


def _is_random(node: Any) -> bool:
    torch = require_torch()
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded in node.target.tags


def _streams(gm: Any) -> dict[Any, int]:
    """The nodes that draw random numbers and their streams: the k-th in graph order draws
    stax's stream k."""
    return {node: k for k, node in enumerate(node for node in gm.graph.nodes if _is_random(node))}


def _overload_name(target: Any) -> str:
    """``"bernoulli.p"`` for ``aten.bernoulli.p``."""
    return f"{_target_name(target)}.{getattr(target, '_overloadname', '')}"


def _fold_constants(gm: Any) -> dict[Any, Any]:
    """Values of the nodes that depend on no placeholder and draw no random numbers, computed by
    torch (an uninitialized tensor's as zeros, so that its value does not vary from call to call)."""
    torch = require_torch()
    values: dict[Any, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            values[node] = getattr(gm, node.target)
        elif node.op == "call_function" and not _is_random(node) and all(i in values for i in node.all_input_nodes):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: values[n])
            value = node.target(*args, **kwargs)
            values[node] = torch.zeros_like(value) if _target_name(node.target) in _UNINITIALIZED else value
    return values


def _boundary_constants(values: dict[Any, Any]) -> tuple[dict[Any, Any], list[np.ndarray]]:
    """Folded values that other nodes read: a Splat, a Lifted constant, or a non-tensor value."""
    torch = require_torch()
    used: dict[Any, Any] = {}
    lifted: list[np.ndarray] = []
    for node, value in values.items():
        if all(u in values for u in node.users):
            continue
        if not isinstance(value, torch.Tensor):
            used[node] = value
            continue
        flat = value.reshape(-1)
        if flat.numel() > 0 and bool((flat == flat[0]).all()):
            used[node] = Splat(flat[0].item(), tuple(value.shape), dtype_name(value.dtype))
        else:
            used[node] = Lifted(len(lifted))
            lifted.append(_to_numpy(value))
    return used, lifted


def _conform(result: Any, expected: Any, node: Any) -> Any:
    """Cast ``result`` to the dtype torch recorded (``expected``: the node's ``meta['val']``);
    a shape mismatch is a bug in the translation table."""
    if isinstance(result, Tensor) and hasattr(expected, "shape"):
        if tuple(result.shape) != tuple(expected.shape):
            raise StaxError(f"torch front end: {node.target} gave shape {result.shape}, torch {tuple(expected.shape)} "
                            f"(node {node.name}); this is a bug in stax.torch.aten")
        dtype = dtype_name(expected.dtype)
        return result if result.dtype == dtype else result.to(dtype)
    if isinstance(result, (tuple, list)) and isinstance(expected, (tuple, list)):
        return [_conform(r, e, node) for r, e in zip(result, expected)]
    return result


def _check_supported(gm: Any, folded: dict[Any, Any]) -> None:
    """Raise before tracing if any op that stax must run has no translation."""
    for node in gm.graph.nodes:
        if _is_random(node):
            if _overload_name(node.target) not in RANDOM:
                raise UnsupportedError(f"ATen op {node.target} (node {node.name}) draws random numbers; the random "
                                       f"ops stax translates are {', '.join(sorted(RANDOM))}")
        elif node.op == "call_function" and node not in folded and node.target is not operator.getitem \
                and not _is_write_back(node):
            name = _target_name(node.target)
            if name not in ATEN:
                raise UnsupportedError(f"ATen op {node.target} (node {node.name}) has no stax translation; the ops "
                                       "stax translates are the keys of stax.torch.aten.ATEN")
        elif node.op == "call_module" or node.op == "call_method":
            raise UnsupportedError(f"FX node {node.name} ({node.op} {node.target}) is not an ATen op")


def _layout(node: Any) -> dict[str, Any]:
    """The ``layout`` keyword of an op that addresses its input's storage (``STORAGE_OPS``): where
    the input's elements lie in the storage that eager torch gives it (:func:`_laid_out`)."""
    if _target_name(node.target) not in STORAGE_OPS:
        return {}
    value = _laid_out(node.args[0])
    return {"layout": Layout(tuple(int(s) for s in value.stride()), int(value.storage_offset()))}


def _laid_out(node: Any) -> Any:
    """A meta tensor laid out as ``node``'s value is when torch runs the graph: the view ops that
    lead to it (``slice``, ``permute``, ...) replayed on the layout of the tensor they view. The
    functionalized graph's own example values give each view a storage of its own, from offset 0."""
    torch = require_torch()
    producer = node.args[0] if node.op == "call_function" and node.target is operator.getitem else node
    if producer.op == "call_function" and getattr(producer.target, "is_view", False):
        args, kwargs = torch.fx.node.map_arg((producer.args[1:], producer.kwargs), lambda n: n.meta["val"])
        value = producer.target(_laid_out(producer.args[0]), *args, **kwargs)
        return value[node.args[1]] if producer is not node else value
    value = node.meta["val"]
    return torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")


def _check_no_mutation(gm: Any, program: str) -> None:
    """Raise if an op still updates a tensor in place after functionalization: one that is not an
    input (functionalization turns the updates of inputs into the ``copy_`` epilogue)."""
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is not None and schema.is_mutable and not _is_write_back(node):
            raise UnsupportedError(f"ATen op {node.target} (node {node.name}) of {program} updates a tensor that is "
                                   "not an input (a tensor the function closes over, or a module attribute that "
                                   "is not a registered buffer), which stax cannot express: pass the tensor as an "
                                   "argument, or register it with module.register_buffer, so that its update "
                                   "becomes the program's in-place update of an input")


def translate(gm: Any, n_inputs: int, program: str = "the captured function"
              ) -> tuple[Callable[..., tuple[Tensor, ...]], list[np.ndarray]]:
    """A stax-traceable function equivalent to the functionalized FX graph ``gm``, and its lifted
    constants; the graph's ``copy_`` into an input becomes the input's in-place update.  A graph
    with random nodes (:func:`_streams`) takes the seed after the lifted constants."""
    _check_no_mutation(gm, program)
    folded = _fold_constants(gm)
    boundary, lifted = _boundary_constants(folded)
    _check_supported(gm, folded)
    streams = _streams(gm)

    def fn(*args: Tensor) -> tuple[Tensor, ...]:
        anchor = args[0]
        env: dict[Any, Any] = {}

        def value(node: Any) -> Any:
            if node not in boundary:
                return env[node]
            found = boundary[node]
            if isinstance(found, Splat):
                return full(anchor, found.value, found.shape, found.dtype)
            return args[n_inputs + found.index] if isinstance(found, Lifted) else found

        placeholders = iter(args[:n_inputs])
        for node in gm.graph.nodes:
            if node in folded:
                continue
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "call_function":
                call_args, call_kwargs = _map_nodes((node.args, node.kwargs), value)
                if node.target is operator.getitem:
                    env[node] = call_args[0][call_args[1]]
                elif _is_write_back(node):
                    write_back(*call_args)
                elif _is_random(node):
                    result = RANDOM[_overload_name(node.target)](args[n_inputs + len(lifted)], streams[node], *call_args,
                                                                 **call_kwargs)
                    env[node] = _conform(result, node.meta.get("val"), node)
                else:
                    result = ATEN[_target_name(node.target)](*call_args, **call_kwargs, **_layout(node))
                    env[node] = _conform(result, node.meta.get("val"), node)
            elif node.op == "output":
                return tuple(_flatten_outputs(_map_nodes(node.args[0], value)))
        raise StaxError("torch front end: the FX graph has no output node")
    return fn, lifted


def _map_nodes(structure: Any, fn: Callable[[Any], Any]) -> Any:
    torch = require_torch()
    return torch.fx.node.map_arg(structure, fn)


def _flatten_outputs(structure: Any) -> list[Tensor]:
    if isinstance(structure, (tuple, list)):
        return [t for item in structure for t in _flatten_outputs(item)]
    if not isinstance(structure, Tensor):
        raise UnsupportedError(f"the captured function returns {structure!r}; only tensors can be outputs")
    return [structure]


def _flatten(values: Any) -> list[Any]:
    torch = require_torch()
    return list(torch.utils._pytree.tree_leaves(values))


def import_function(fn: Callable[..., Any], *inputs: Any, name: str = "", provenance: dict[str, Any] | None = None,
                    input_names: Sequence[str] | None = None) -> TorchProgram:
    """Capture ``fn(*inputs)`` (tensors) and translate it; outputs are flattened.  Of a function
    that draws random numbers (dropout, noise), the expected outputs are torch's under stax's
    draws: the captured graph run by torch with each random node's values replaced by stax's
    (:func:`_run_with_stax_draws`)."""
    torch = require_torch()
    name = name or getattr(fn, "__name__", "function")
    gm, tracing_mode = capture_either(fn, inputs)
    stax_fn, lifted = translate(gm, len(inputs), name)
    seeded = bool(_streams(gm))
    example_seed = int(torch.randint(1 << 31, ())) if seeded else 0
    eager = _fresh(inputs)
    results = _run_with_stax_draws(gm, eager, example_seed) if seeded else fn(*eager)
    expected = [_to_numpy(t) for t in _flatten(results)]
    updated = _updated_inputs(gm)
    names = list(input_names) if input_names is not None else [f"input{i}" for i in range(len(inputs))]
    info = {"torch": torch.__version__, "inputs": {n: list(t.shape) for n, t in zip(names, inputs)},
            "tracing": tracing_mode, **(provenance or {})}
    return TorchProgram(name, stax_fn, names + [f"constant{i}" for i in range(len(lifted))] + ["seed"] * seeded,
                        [_to_numpy(t) for t in _fresh(inputs)], lifted, expected, info, gm,
                        [names[i] for i in updated], [_to_numpy(eager[i]) for i in updated], seeded, example_seed)


def _run_with_stax_draws(gm: Any, inputs: Sequence[Any], seed: int) -> Any:
    """The captured graph ``gm`` run by torch on ``inputs``, each random node's values replaced by
    stax's under ``seed`` (the node's translation, stream k for the k-th random node, evaluated
    by the reference evaluator), so that torch's results can be compared with the compiled
    program's."""
    torch = require_torch()
    streams = _streams(gm)

    class WithStaxDraws(torch.fx.Interpreter):
        def run_node(self, node: Any) -> Any:
            if node not in streams:
                return super().run_node(node)
            args, kwargs = self.fetch_args_kwargs_from_env(node)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]

            def draw(seed_tensor: Tensor, *traced: Tensor) -> Tensor:
                given = iter(traced)
                own = [next(given) if isinstance(a, torch.Tensor) else a for a in args]
                return RANDOM[_overload_name(node.target)](seed_tensor, streams[node], *own, **kwargs)
            arrays = [np.array(seed, np.int64), *(_to_numpy(t) for t in tensors)]
            (value,) = evaluate(trace(draw, *arrays), *arrays)
            return torch.from_numpy(np.asarray(value)).to(node.meta["val"].dtype)
    return WithStaxDraws(gm).run(*inputs)


def _state(module: Any, requires_grad: bool) -> tuple[list[str], list[Any]]:
    """Names and detached copies of the parameters (requiring grad if asked), then the buffers."""
    params = [(n, p.detach().clone().requires_grad_(requires_grad)) for n, p in module.named_parameters()]
    buffers = [(n, b.detach().clone()) for n, b in module.named_buffers()]
    return [n for n, _ in params + buffers], [t for _, t in params + buffers]


def import_module(module: Any, *inputs: Any, name: str = "", provenance: dict[str, Any] | None = None) -> TorchProgram:
    """The forward pass of ``module`` on ``inputs``; parameters and buffers become inputs."""
    from torch.func import functional_call
    names, state = _state(module, requires_grad=False)

    def forward(*flat: Any) -> Any:
        return functional_call(module, dict(zip(names, flat[:len(names)])), tuple(flat[len(names):]))
    return import_function(forward, *state, *inputs, name=name or type(module).__name__,
                           input_names=names + [f"input{i}" for i in range(len(inputs))],
                           provenance={"model": repr(module), "kind": "forward", **(provenance or {})})


def import_training_step(module: Any, loss_fn: Callable[..., Any], inputs: Sequence[Any], targets: Sequence[Any] = (),
                         name: str = "", provenance: dict[str, Any] | None = None) -> TorchProgram:
    """The joint forward + backward graph: outputs are ``loss_fn(module(*inputs), *targets)``
    and its gradient with respect to every parameter (in ``named_parameters()`` order)."""
    torch = require_torch()
    from torch.func import functional_call
    names, state = _state(module, requires_grad=True)
    n_params = len(list(module.parameters()))

    def step(*flat: Any) -> Any:
        params = flat[:len(names)]
        rest = flat[len(names):]
        output = functional_call(module, dict(zip(names, params)), tuple(rest[:len(inputs)]))
        loss = loss_fn(output, *rest[len(inputs):])
        return (loss, *torch.autograd.grad(loss, params[:n_params]))
    labels = names + [f"input{i}" for i in range(len(inputs))] + [f"target{i}" for i in range(len(targets))]
    return import_function(step, *state, *inputs, *targets, name=name or f"{type(module).__name__}_train",
                           input_names=labels,
                           provenance={"model": repr(module), "kind": "training step", **(provenance or {})})
