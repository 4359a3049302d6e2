"""Tracing: run a plain Python function on proxy tensors (:class:`~stax.frontend.tensor.Tensor`)
and record a :class:`~stax.ir.graph.Graph` (spec 4.x, 6.3), the way torch.fx / TorchInductor's
front end does it, simplified:

- **CSE by hash-consing** (:class:`~stax.frontend.tracer.Tracer`): a node identical in (op,
  inputs, attrs, shape, dtype) to an existing one is not created again.
- **Functionalization** (spec 7.1, renaming): an in-place method (``x.add_(y)``, ``x += y``)
  rebinds the proxy to a new node; at the end ``Graph.mutations`` maps each mutated input to the
  node holding its final value (:mod:`stax.frontend.inplace`).
- **Dead-code elimination** after tracing; nodes are then named ``arg<i>`` (inputs) and ``n0``,
  ``n1``, ... in program order, so names are stable for a given program.
"""
from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from stax import dtypes
from stax.environment import resolve_isa
from stax.errors import ShapeError, StaxError, UnsupportedError
from stax.frontend.elementwise import tracer_of
from stax.frontend.shapes import as_int, broadcast_shapes
from stax.frontend.tensor import Tensor
from stax.frontend.tracer import Tracer, expand_to
from stax.frontend.user_frames import at_user_line
from stax.ir.graph import Graph
from stax.ir.indexing import contiguous_strides
from stax.target import Isa


@dataclass(frozen=True)
class TensorSpec:
    """Shape, dtype and (element) strides of an input; ``strides=None`` means contiguous."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        shape = tuple(as_int(s, "TensorSpec shape") for s in self.shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"TensorSpec shape {shape} has a negative size")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.canonical(self.dtype))
        if self.strides is not None:
            strides = tuple(as_int(s, "TensorSpec strides") for s in self.strides)
            if len(strides) != len(shape):
                raise ShapeError(f"TensorSpec strides {strides} do not match the rank of shape {shape}")
            object.__setattr__(self, "strides", strides)


def _spec_of(spec: Any, index: int) -> TensorSpec:
    if isinstance(spec, TensorSpec):
        return spec
    if isinstance(spec, np.ndarray):
        if spec.dtype.name not in dtypes.SUPPORTED:
            raise UnsupportedError(f"input {index}: numpy dtype {spec.dtype} is not supported; "
                                   f"use one of {', '.join(dtypes.SUPPORTED)}")
        dtype = spec.dtype.name
        itemsize = spec.dtype.itemsize
        if any(s % itemsize for s in spec.strides):
            raise UnsupportedError(f"input {index}: strides {spec.strides} (bytes) are not a multiple of the itemsize {itemsize}")
        return TensorSpec(spec.shape, dtype, tuple(s // itemsize for s in spec.strides))
    hint = (f"; a number is a constant of the function (write it into fn, or pass np.array({spec!r}, np.float32) "
            "to make it an input)" if isinstance(spec, (int, float)) else "")
    raise UnsupportedError(f"input {index}: expected a numpy array or a stax.TensorSpec, got {type(spec).__name__}"
                           f"{hint}")


def _outputs(result: Any, tracer: Tracer) -> list[Tensor]:
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    if not items:
        raise StaxError("the traced function returned an empty tuple/list; return at least one Tensor")
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
            where_ = f"element {i} of the returned {type(result).__name__}" if item is not result else "the return value"
            raise StaxError(f"the traced function must return a Tensor or a tuple/list of Tensors; "
                            f"{where_} is {type(item).__name__} ({item!r:.60})")
        if item._tracer is not tracer:
            raise StaxError("the traced function returned a tensor from another trace")
    return items


def _finalize(graph: Graph, outputs: list[str], mutations: dict[str, str]) -> Graph:
    """Dead-code elimination, then sequential names ``n0, n1, ...`` in program order."""
    live = set(outputs) | set(mutations.values()) | set(graph.inputs)
    for node in reversed(graph.nodes.values()):
        if node.name in live:
            live.update(node.inputs)
    rename = {name: name for name in graph.inputs}
    result = Graph(inputs=list(graph.inputs))
    for node in graph.nodes.values():
        if node.name in live:
            rename.setdefault(node.name, f"n{len(rename) - len(graph.inputs)}")
            new = replace(node, name=rename[node.name], inputs=tuple(rename[i] for i in node.inputs))
            result.nodes[new.name] = new
    result.outputs = [rename[o] for o in outputs]
    result.mutations = {inp: rename[val] for inp, val in mutations.items()}
    result.conv_plans = {rename[name]: plan for name, plan in graph.conv_plans.items() if name in live}
    result.sources = {rename[name]: where for name, where in graph.sources.items() if name in live}
    return result


def parameter_names(fn: Callable[..., Any], count: int) -> tuple[str, ...]:
    """The names of the ``count`` parameters of ``fn`` that ``trace`` binds to its specs, in
    order: its positional parameters, then ``arg<i>`` for those ``*args`` takes (or for all of
    them when its signature cannot be read)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in itertools.takewhile(lambda p: p.kind in positional, parameters)][:count]
    for i in range(len(names), count):
        name = f"arg{i}"
        while name in names:
            name += "_"
        names.append(name)
    return tuple(names)


def trace(fn: Callable[..., Any], *specs: np.ndarray | TensorSpec, isa: Isa | str | None = None) -> Graph:
    """Call ``fn`` on proxy tensors described by ``specs`` (numpy arrays or TensorSpecs) and return
    the recorded graph; ``fn`` returns a Tensor or a tuple/list of Tensors.  ``isa`` is the target
    the graph is for (as ``Options.isa``; None: ``STAX_ISA``, else this CPU's widest level)."""
    tracer = Tracer(Tensor, resolve_isa(isa))
    args = []
    for i, spec in enumerate(specs):
        spec = _spec_of(spec, i)
        strides = spec.strides if spec.strides is not None else contiguous_strides(spec.shape)
        proxy = tracer.emit("input", (), spec.shape, spec.dtype, index=i, strides=strides)
        tracer.graph.inputs.append(proxy._name)
        args.append(Tensor(tracer, proxy._name, input_name=proxy._name))
    try:
        tracer.in_fn = True
        result = fn(*args)
        tracer.in_fn = False  # the outputs' copies and casts are stax's, at no line of the user's
        outputs = _outputs(result, tracer)
    except StaxError as exc:
        exc.args = (at_user_line(str(exc), exc.__traceback__),)
        raise
    except TypeError as exc:
        if not (message := _numpy_keyword(str(exc))):
            raise
        raise UnsupportedError(at_user_line(message, exc.__traceback__)) from None
    finally:
        tracer.done = True
    mutations = {a._input: a._name for a in args if a._name != a._input}
    return _finalize(tracer.graph, [t._name for t in outputs], mutations)


#: numpy's keyword arguments that torch's tensor methods spell otherwise
NUMPY_KEYWORDS = {"axis": "dim", "keepdims": "keepdim", "a_min": "min", "a_max": "max"}


def _numpy_keyword(message: str) -> str:
    """For a method called with a numpy keyword (``x.sum(axis=1)``), the line saying torch's
    spelling; else ``""``."""
    for numpy_name, torch_name in NUMPY_KEYWORDS.items():
        if f"got an unexpected keyword argument '{numpy_name}'" in message:
            return f"{numpy_name}= is numpy's keyword; stax's tensor methods take torch's: use {torch_name}= instead"
    return ""


# ---------------------------------------------------------------------------------------------
# write-back of a functionalized program's inputs

def write_back(target: Tensor, value: Tensor) -> None:
    """Make ``value`` (cast to the input's dtype and broadcast to its shape) the final value of
    the graph input ``target``: ``Graph.mutations``, written into the caller's array after every
    output (spec 7.1, renaming).  For the epilogue of a functionalized program (torch's
    ``copy_`` of an input's new value), whose reads all see the old value by construction, so
    that views of the input taken earlier do not block it as they block ``copy_``."""
    if not isinstance(target, Tensor) or target._input is None or target._base is not None:
        raise UnsupportedError("write_back: the target must be an input of the traced function")
    tracer_of((target, value), "write_back")
    if broadcast_shapes("write_back", [target.shape, value.shape]) != target.shape:
        raise ShapeError(f"write_back: a value of shape {value.shape} does not broadcast to the input's shape "
                         f"{target.shape}")
    target._name = expand_to(value._cast(target.dtype), target.shape)._name
