"""Tracing: run a plain Python function on proxy tensors that follow ``torch.Tensor``'s method
names and semantics, and record a :class:`~stax.ir.graph.Graph` (seed 4.x, 6.3).

Design (the way torch.fx / TorchInductor's front end does it, simplified):

- **Explicit broadcasting and promotion.** Every elementwise node's operands are first cast to
  the op's compute dtype (``torch.result_type``, see :func:`stax.dtypes.result_type`) and
  expanded to the broadcast shape, so later passes never re-derive torch's rules. A Python
  scalar becomes a ``constant`` node (shape ``()``, value rounded to the compute dtype, as torch
  casts a wrapped scalar) followed by ``reshape`` + ``expand``.
- **CSE by hash-consing.** A node identical in (op, inputs, attrs, shape, dtype) to an existing
  one is not created again.
- **Functionalization** (seed 7.1, renaming): an in-place method (``x.add_(y)``, ``x += y``)
  rebinds the proxy to a new node; at the end ``Graph.mutations`` maps each mutated input to the
  node holding its final value. In-place on a view, or on a tensor whose views are alive, raises
  (the views would not see the update).
- **Dead-code elimination** after tracing; nodes are then named ``arg<i>`` (inputs) and ``n0``,
  ``n1``, ... in program order, so names are stable for a given program.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import math
import sys
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from stax import dtypes
from stax.frontend import numpy_calls
from stax.environment import resolve_isa
from stax.errors import ShapeError, StaxError, UnsupportedError
from stax.ir.graph import COMPARE_OPS, RANDOM_OPS, REDUCTION_OPS, Graph, Node
from stax.target import Isa
from stax.util.suggest import closest

Scalar = bool | int | float
_SCALAR_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)


@dataclass(frozen=True)
class TensorSpec:
    """Shape, dtype and (element) strides of an input; ``strides=None`` means contiguous."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        shape = tuple(_as_int(s, "TensorSpec shape") for s in self.shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"TensorSpec shape {shape} has a negative size")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.canonical(self.dtype))
        if self.strides is not None:
            strides = tuple(_as_int(s, "TensorSpec strides") for s in self.strides)
            if len(strides) != len(shape):
                raise ShapeError(f"TensorSpec strides {strides} do not match the rank of shape {shape}")
            object.__setattr__(self, "strides", strides)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UnsupportedError(f"{what}: expected an int, got {value!r} of type {type(value).__name__}")
    return int(value)


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


#: packages whose frames are not the user's: stax itself, and torch calling stax's backend
_INTERNAL_PACKAGES = ("stax", "torch")
#: stax modules written as a user writes programs (the spec's worked examples)
_USER_MODULES = ("stax.measure.demo",)


#: where code that is not the user's lives besides those packages: the standard library, installed packages
_LIBRARIES = tuple({Path(path).resolve() for key, path in sysconfig.get_paths().items()
                    if key in ("stdlib", "purelib", "platlib")})


@functools.lru_cache(maxsize=None)
def _in_a_library(filename: str) -> bool:
    return any(library in Path(filename).resolve().parents for library in _LIBRARIES)


def _users(frame: Any) -> bool:
    """Whether a frame runs the user's code: neither stax's nor torch's (the spec's worked
    examples excepted), nor the standard library's or an installed package's."""
    module = frame.f_globals.get("__name__", "")
    if module.partition(".")[0] in _INTERNAL_PACKAGES:
        return module in _USER_MODULES
    return not _in_a_library(frame.f_code.co_filename)


def user_location() -> tuple[str, int]:
    """The (file, line) of the innermost frame of the user's code: the line that made the op
    being traced; ("", 0) when there is none."""
    frame = sys._getframe(1)
    while frame is not None and not _users(frame):
        frame = frame.f_back
    return ("", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


class _Tracer:
    """Owns the graph being recorded and the hash-consing table; ``isa`` is the target the graph is
    traced for (ops that choose a form by it: ``conv_forms.blocked_applies_in_trace``)."""

    def __init__(self, isa: Isa) -> None:
        self.isa = isa
        self.graph = Graph()
        self.cse: dict[tuple, str] = {}
        self.done = False
        self.in_fn = False  # the traced function is running: its ops have a line of the user's

    def emit(self, op: str, inputs: Sequence[Tensor], shape: Sequence[int], dtype: str, /, **attrs: Any) -> Tensor:
        if self.done:
            raise StaxError(f"a tensor from a finished trace was used (op {op}); do not keep traced tensors across trace() calls")
        names = tuple(t._name for t in inputs)
        items = tuple(sorted(attrs.items()))
        # repr keeps -0.0 apart from 0.0 and lets NaN constants merge.
        key = (op, names, repr(items), tuple(shape), dtype)
        name = self.cse.get(key)
        if name is None:
            name = f"arg{attrs['index']}" if op == "input" else f"n{len(self.graph.nodes)}"
            self.graph.nodes[name] = Node(name, op, names, tuple(shape), dtype, items)
            if self.in_fn:
                self.graph.sources[name] = user_location()
            self.cse[key] = name
        return Tensor(self, name)

    def constant(self, value: Scalar, dtype: str, shape: Sequence[int]) -> Tensor:
        """A scalar as a ``constant`` node broadcast to ``shape``."""
        return _expand_to(self.emit("constant", (), (), dtype, value=_constant_value(value, dtype)), shape)


def _constant_value(value: Scalar, dtype: str) -> Scalar:
    """``value`` converted to ``dtype`` as torch converts a wrapped scalar (overflow raises)."""
    if dtype == "bool":
        return bool(value)
    if dtypes.is_integer(dtype):
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise UnsupportedError(f"scalar {value!r} cannot be converted to {dtype}")
        result = int(value)
        info = np.iinfo(dtype)
        if not info.min <= result <= info.max:
            raise UnsupportedError(f"scalar {value!r} cannot be converted to {dtype} without overflow")
        return result
    return float(np.dtype(dtype).type(value))


# ---------------------------------------------------------------------------------------------
# shape helpers

def _broadcast_shapes(op: str, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """torch's broadcasting: align on the right; sizes must match or be 1."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"{op}: shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                             f"(dimension {i} of the result has sizes {sorted(sizes)}; sizes must match or be 1)")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _expand_to(t: Tensor, shape: Sequence[int]) -> Tensor:
    """Explicit broadcast: ``reshape`` to add leading 1s, then ``expand`` (graph contract)."""
    shape = tuple(shape)
    if t.shape == shape:
        return t
    padded = (1,) * (len(shape) - t.ndim) + t.shape
    if padded != t.shape:
        t = t._tracer.emit("reshape", (t,), padded, t.dtype, shape=padded)
    if padded != shape:
        t = t._tracer.emit("expand", (t,), shape, t.dtype, shape=shape)
    return t


def _wrap_dim(dim: Any, ndim: int, op: str) -> int:
    """A possibly negative dim in ``[0, ndim)``; a 0-d tensor accepts 0 and -1 as torch does."""
    dim = _as_int(dim, f"{op}: dim")
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor of dimension {ndim} "
                         f"(expected a value in [{-bound}, {bound - 1}])")
    return dim % bound


def _dims_arg(dim: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``dim`` as sorted non-negative dims; None or () means all dims."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(ndim))
    items = dim if isinstance(dim, (tuple, list)) else (dim,)
    dims = [_wrap_dim(d, ndim, op) for d in items]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{op}: dim {tuple(items)} names a dimension more than once")
    return tuple(sorted(d for d in dims if d < ndim))


def _shape_args(args: tuple, op: str) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(_as_int(a, f"{op}: size") for a in args)


# ---------------------------------------------------------------------------------------------
# elementwise machinery

def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR_TYPES)


def _check_operand(value: Any, op: str) -> None:
    if isinstance(value, Tensor) or _is_scalar(value):
        return
    if isinstance(value, np.ndarray):
        raise UnsupportedError(f"{op}: numpy arrays inside a traced function are not supported; "
                               "pass the array as an input of trace()/compile()")
    raise UnsupportedError(f"{op}: operand {value!r} of type {type(value).__name__} is not supported; "
                           "use a traced Tensor or a Python bool/int/float")


def _tracer_of(operands: Sequence[Any], op: str) -> _Tracer:
    tracers = {id(o._tracer): o._tracer for o in operands if isinstance(o, Tensor)}
    if len(tracers) != 1:
        raise StaxError(f"{op}: tensors from different traces cannot be combined")
    return next(iter(tracers.values()))


def _type_operand(value: Tensor | Scalar) -> tuple[str, int] | Scalar:
    return (value.dtype, value.ndim) if isinstance(value, Tensor) else value


def _lift(tracer: _Tracer, value: Tensor | Scalar, dtype: str, shape: tuple[int, ...]) -> Tensor:
    """An operand cast to ``dtype`` and broadcast to ``shape``."""
    if isinstance(value, Tensor):
        return _expand_to(value._cast(dtype), shape)
    return tracer.constant(value, dtype, shape)


_BOOL_HINT = "cast with .int() first, or use ~ / logical_not() to invert a mask"


def _rule_same(op: str, common: str) -> tuple[str, str]:
    return common, common


def _rule_no_bool(op: str, common: str) -> tuple[str, str]:
    if common == "bool":
        raise UnsupportedError(f"{op} on bool tensors is not supported (torch rejects it too); {_BOOL_HINT}")
    return common, common


def _rule_float(op: str, common: str) -> tuple[str, str]:
    """Floating ops on integer/bool operands compute in the default dtype float32, as torch."""
    dtype = common if dtypes.is_floating(common) else "float32"
    return dtype, dtype


def _rule_compare(op: str, common: str) -> tuple[str, str]:
    return common, "bool"


def _rule_logical(op: str, common: str) -> tuple[str, str]:
    return "bool", "bool"


def _rule_integral(op: str, common: str) -> tuple[str, str]:
    if dtypes.is_floating(common):
        raise UnsupportedError(f"{op} on {common} operands is not supported (torch rejects it too); bitwise ops "
                               "take integer or bool tensors")
    return common, common


_RULES: dict[str, Callable[[str, str], tuple[str, str]]] = {
    "same": _rule_same, "no_bool": _rule_no_bool, "float": _rule_float, "compare": _rule_compare,
    "logical": _rule_logical, "integral": _rule_integral,
}


def _elementwise(name: str, op: str, operands: Sequence[Tensor | Scalar], rule: str) -> Tensor:
    """Record elementwise ``op`` with torch's broadcasting and type promotion; ``name`` is the
    user-facing method for error messages, ``rule`` picks the compute and result dtypes."""
    for o in operands:
        _check_operand(o, name)
    tracer = _tracer_of(operands, name)
    shape = _broadcast_shapes(name, [o.shape for o in operands if isinstance(o, Tensor)])
    compute, out = _RULES[rule](name, dtypes.result_type(*map(_type_operand, operands)))
    return tracer.emit(op, [_lift(tracer, o, compute, shape) for o in operands], shape, out)


def _bitwise(name: str, kind: str, operands: Sequence[Tensor | Scalar]) -> Tensor:
    """``&``, ``|``, ``^``, ``~`` (``kind`` and, or, xor, not): the logical op on bool operands,
    the bitwise op on integers, refused on floats (as torch)."""
    for o in operands:
        _check_operand(o, name)
    common = dtypes.result_type(*map(_type_operand, operands))
    return _elementwise(name, f"{'logical' if common == 'bool' else 'bitwise'}_{kind}", operands, "integral")


def where(cond: Tensor, a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """``torch.where(cond, a, b)``: ``cond`` must be a bool tensor; ``a`` and ``b`` are promoted
    with ``torch.result_type`` (two Python floats give float32) and all three broadcast."""
    if not isinstance(cond, Tensor):
        raise UnsupportedError(f"where: the condition must be a traced bool tensor, got {type(cond).__name__}")
    if cond.dtype != "bool":
        raise UnsupportedError(f"where: the condition must be a bool tensor, got {cond.dtype} (compare it, e.g. x > 0)")
    for o in (a, b):
        _check_operand(o, "where")
    tracer = _tracer_of((cond, a, b), "where")
    shape = _broadcast_shapes("where", [o.shape for o in (cond, a, b) if isinstance(o, Tensor)])
    dtype = dtypes.result_type(_type_operand(a), _type_operand(b))
    args = [_expand_to(cond, shape), _lift(tracer, a, dtype, shape), _lift(tracer, b, dtype, shape)]
    return tracer.emit("where", args, shape, dtype)


def _random(op: str, seed: Tensor, shape: Sequence[int], dtype: str, stream: int | None, **attrs: Any) -> Tensor:
    """A ``RANDOM_OPS`` node drawn from ``seed`` as stream ``stream`` (default: the next unused)."""
    if not isinstance(seed, Tensor) or seed.dtype != "int64" or seed.shape != ():
        raise UnsupportedError(f"{op}: the seed must be a traced 0-d int64 tensor (an input of the program, "
                               f"e.g. np.array(0)), got {seed!r}")
    shape = tuple(_as_int(s, f"{op}'s shape") for s in shape)
    nodes = seed._tracer.graph.nodes.values()
    if stream is None:
        stream = 1 + max((node.attr("stream") for node in nodes if node.op in RANDOM_OPS), default=-1)
    return seed._tracer.emit(op, (seed,), shape, dtype, stream=_as_int(stream, f"{op}'s stream"), **attrs)


def bernoulli(seed: Tensor, shape: Sequence[int], p: float, *, stream: int | None = None) -> Tensor:
    """A bool tensor of ``shape``, each element true with probability ``p``: a random mask drawn
    from ``seed``, a 0-d int64 input of the program (``stax.kernels.random_draws``).  Each call in a program
    draws its own stream (unless given one), so two masks of one seed are independent; the same
    seed gives the same masks on every call, thread count and ISA."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise UnsupportedError(f"bernoulli: the probability must be a Python number in [0, 1], got {p!r}")
    return _random("bernoulli", seed, shape, "bool", stream, p=float(p))


def rand(seed: Tensor, shape: Sequence[int], dtype: str = "float32", *, stream: int | None = None) -> Tensor:
    """torch.rand from ``seed`` (as :func:`bernoulli`): uniform in [0, 1), multiples of 2**-24."""
    dtype = dtypes.canonical(dtype)
    if not dtypes.is_floating(dtype):
        raise UnsupportedError(f"rand: expected a floating-point dtype, got {dtype}")
    return _random("uniform", seed, shape, dtype, stream)


def randn(seed: Tensor, shape: Sequence[int], dtype: str = "float32", *, stream: int | None = None) -> Tensor:
    """torch.randn from ``seed`` (as :func:`bernoulli`): standard normal by the Box-Muller
    transform of two uniforms of one stream (``sqrt(-2 log(1 - u)) cos(2 pi v)``, within 5.8
    standard deviations)."""
    shape = tuple(shape)
    u = rand(seed, (2, *shape), dtype, stream=stream)
    first, second = u[0], u[1]
    return (-2.0 * (-first).log1p()).sqrt() * (second * (2 * math.pi)).cos()


class ValuesIndices(NamedTuple):
    """What ``x.max(dim)`` and ``x.min(dim)`` return, as torch's ``torch.return_types.max``."""

    values: Tensor
    indices: Tensor


def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """torch.linalg.vector_norm of a float tensor over ``dim`` (all dims when None): ``ord`` 2
    (``sqrt(sum(x * x))``), 1, inf (``amax(|x|)``), -inf, 0 (the count of non-zeros) or any
    other number ``p`` (``sum(|x| ** p) ** (1 / p)``); ``dtype=`` casts first."""
    if not isinstance(x, Tensor):
        raise UnsupportedError(f"vector_norm: expected a traced tensor, got {type(x).__name__}")
    src = x._cast(dtypes.canonical(dtype)) if dtype is not None else x
    if not dtypes.is_floating(src.dtype):
        raise UnsupportedError(f"vector_norm: expected a float tensor, got {src.dtype} (as torch; use x.float())")
    if not _is_scalar(ord) or isinstance(ord, (bool, np.bool_)):
        raise UnsupportedError(f"vector_norm: ord must be a number, got {ord!r}")
    dims = _dims_arg(dim, src.ndim, "vector_norm")
    if ord == 2:
        return (src * src).sum(dims, keepdim).sqrt()
    if ord == 0:
        return (src != 0).sum(dims, keepdim)._cast(src.dtype)
    if math.isinf(ord):
        if any(src.shape[d] == 0 for d in dims):
            raise ShapeError(f"vector_norm: ord={ord} over a dimension of size 0 has no value (shape {src.shape})")
        return src.abs().amax(dims, keepdim) if ord > 0 else src.abs().amin(dims, keepdim)
    if ord == 1:
        return src.abs().sum(dims, keepdim)
    return (src.abs() ** ord).sum(dims, keepdim) ** (1.0 / ord)


def var_mean(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction: float | None = None) -> tuple[Tensor, Tensor]:
    """torch.var_mean: ``(x.var(...), x.mean(dim, keepdim))``; the two reductions fuse into one pass."""
    return x.var(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


def std_mean(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
             correction: float | None = None) -> tuple[Tensor, Tensor]:
    """torch.std_mean: ``(x.std(...), x.mean(dim, keepdim))``."""
    return x.std(dim, unbiased, keepdim, correction=correction), x.mean(dim, keepdim)


def _can_cast(src: str, dst: str) -> bool:
    """torch.can_cast: in-place results may not go down a category (float -> int, int -> bool)."""
    def category(d: str) -> int:
        return 0 if d == "bool" else 1 if dtypes.is_integer(d) else 2
    return category(src) <= category(dst)


# ---------------------------------------------------------------------------------------------
# the proxy tensor

# method name -> (graph op, dtype rule)
_UNARY_METHODS = {
    **{m: (m, "float") for m in ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf",
                                 "log1p", "expm1", "sin", "cos")},
    "abs": ("abs", "no_bool"), "neg": ("neg", "no_bool"), "negative": ("neg", "no_bool"),
    "relu": ("relu", "no_bool"), "logical_not": ("logical_not", "logical"),
}
_BINARY_METHODS = {
    "add": ("add", "same"), "sub": ("sub", "no_bool"), "subtract": ("sub", "no_bool"),
    "mul": ("mul", "same"), "multiply": ("mul", "same"),
    "div": ("div", "float"), "divide": ("div", "float"), "true_divide": ("div", "float"),
    "floor_divide": ("floordiv", "no_bool"), "remainder": ("mod", "no_bool"),
    "maximum": ("maximum", "same"), "minimum": ("minimum", "same"),
    "eq": ("eq", "compare"), "ne": ("ne", "compare"), "lt": ("lt", "compare"), "le": ("le", "compare"),
    "gt": ("gt", "compare"), "ge": ("ge", "compare"),
    "logical_and": ("logical_and", "logical"), "logical_or": ("logical_or", "logical"),
    "logical_xor": ("logical_xor", "logical"),
}
# Python operator (``__add__``, reflected ``__radd__``) -> (symbol, graph op, dtype rule)
_OPERATORS = {
    "add": ("+", "add", "same"), "sub": ("-", "sub", "no_bool"), "mul": ("*", "mul", "same"),
    "truediv": ("/", "div", "float"), "floordiv": ("//", "floordiv", "no_bool"), "mod": ("%", "mod", "no_bool"),
}
_BITWISE = {"and": "&", "or": "|", "xor": "^"}
_CASTS = {"float": "float32", "double": "float64", "int": "int32", "long": "int64", "bool": "bool"}
# in-place method -> out-of-place method (torch's ``x.op_(...)``)
_INPLACE = ("add", "sub", "mul", "div", "pow", "clamp", "masked_fill", "floor_divide", "remainder",
            "maximum", "minimum", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf",
            "log1p", "expm1", "sin", "cos", "abs", "neg", "relu", "bitwise_and", "bitwise_or",
            "bitwise_xor", "bitwise_not")
_AUGMENTED = {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "div", "ifloordiv": "floor_divide",
              "imod": "remainder", "ipow": "pow",
              "iand": "bitwise_and", "ior": "bitwise_or", "ixor": "bitwise_xor"}
_DATA_DEPENDENT = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist", "numpy")


class Tensor:
    """A traced tensor. Methods and operators follow ``torch.Tensor``; ``dtype`` is a string."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):  # a numpy scalar on the left, or np.exp(x)
        return numpy_calls.reflected_operator(Tensor, ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):  # np.sum(x), np.where(...): refused with a hint
        return numpy_calls.refuse_function(Tensor, func, kwargs)

    __hash__ = object.__hash__  # comparisons return tensors, as in torch

    def __init__(self, tracer: _Tracer, name: str, *, input_name: str | None = None,
                 base: Tensor | None = None) -> None:
        self._tracer = tracer
        self._name = name
        self._input = input_name  # set on the proxy of a graph input
        self._base = base  # the tensor this is a view of
        self._has_views = False

    # -- metadata -------------------------------------------------------------------------------
    @property
    def _node(self) -> Node:
        return self._tracer.graph.nodes[self._name]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._node.shape

    @property
    def dtype(self) -> str:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._node.numel

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise ShapeError(f"size({dim}): a 0-d tensor has no dimensions")
        return self.shape[_wrap_dim(dim, self.ndim, "size")]

    def is_floating_point(self) -> bool:
        return dtypes.is_floating(self.dtype)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Tensor({self._name}, shape={self.shape}, dtype={self.dtype})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        near = closest(name, [n for n in dir(type(self)) if not n.startswith("_")])
        raise UnsupportedError(f"Tensor.{name} is not supported by stax"
                               + (f"; the closest supported methods: {', '.join(near)}" if near else
                                  "; see the methods of stax.Tensor"))

    def __setitem__(self, index: Any, value: Any) -> None:
        raise UnsupportedError("index assignment (x[...] = v) is not supported by stax; compute the new value "
                               "with where()/masked_fill() and write it with copy_()")

    # -- elementwise ----------------------------------------------------------------------------
    def _cast(self, dtype: str) -> Tensor:
        return self if dtype == self.dtype else self._tracer.emit("cast", (self,), self.shape, dtype, dtype=dtype)

    def to(self, dtype: Any, *, copy: bool = False) -> Tensor:
        """``x.to(dtype)`` or ``x.to(other)``; returns ``self`` when nothing changes, as torch."""
        target = dtype.dtype if isinstance(dtype, Tensor) else dtypes.canonical(dtype)
        result = self._cast(target)
        return Tensor(self._tracer, result._name) if copy and result is self else result

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(other)

    def pow(self, exponent: Tensor | Scalar) -> Tensor:
        return _pow(self, exponent)

    def __pow__(self, exponent: Tensor | Scalar) -> Tensor:
        return _pow(self, exponent)

    def __rpow__(self, base: Scalar) -> Tensor:
        return _pow(base, self)

    def clamp(self, min: Tensor | Scalar | None = None, max: Tensor | Scalar | None = None) -> Tensor:
        """``torch.clamp``: ``minimum(maximum(x, min), max)`` in ``result_type(x, min, max)``, so
        NaN propagates and ``min > max`` gives ``max``, as torch."""
        bounds = [b for b in (min, max) if b is not None]
        if not bounds:
            raise UnsupportedError("clamp: at least one of min and max must not be None")
        for b in bounds:
            _check_operand(b, "clamp")
        result = self._cast(dtypes.result_type(*map(_type_operand, (self, *bounds))))
        if min is not None:
            result = _elementwise("clamp", "maximum", (result, min), "same")
        if max is not None:
            result = _elementwise("clamp", "minimum", (result, max), "same")
        return result

    clip = clamp

    def clamp_min(self, min: Tensor | Scalar) -> Tensor:
        return self.clamp(min=min)

    def clamp_max(self, max: Tensor | Scalar) -> Tensor:
        return self.clamp(max=max)

    def sign(self) -> Tensor:
        """1, 0 or -1 (0 at NaN, as torch's on the CPU); a bool is its own sign."""
        return self if self.dtype == "bool" else (self > 0).to(self.dtype) - (self < 0).to(self.dtype)

    def where(self, condition: Tensor, other: Tensor | Scalar) -> Tensor:
        """``x.where(cond, y)`` is ``torch.where(cond, x, y)``."""
        return where(condition, self, other)

    def masked_fill(self, mask: Tensor, value: Tensor | Scalar) -> Tensor:
        """``value`` where ``mask``; the result keeps ``self``'s shape and dtype, as torch."""
        if not isinstance(mask, Tensor) or mask.dtype != "bool":
            raise UnsupportedError("masked_fill: the mask must be a bool tensor")
        _check_operand(value, "masked_fill")
        if isinstance(value, Tensor) and value.ndim != 0:
            raise UnsupportedError(f"masked_fill: value must be a scalar or a 0-d tensor, got shape {value.shape}")
        tracer = _tracer_of((self, mask, value), "masked_fill")
        shape = _broadcast_shapes("masked_fill", [self.shape, mask.shape])  # may be wider than self, as torch
        args = [_expand_to(mask, shape), _lift(tracer, value, self.dtype, shape), _expand_to(self, shape)]
        return tracer.emit("where", args, shape, self.dtype)

    def add(self, other: Tensor | Scalar, *, alpha: Scalar = 1) -> Tensor:
        return _elementwise("add", "add", (self, _scaled(other, alpha)), "same")

    def sub(self, other: Tensor | Scalar, *, alpha: Scalar = 1) -> Tensor:
        return _elementwise("sub", "sub", (self, _scaled(other, alpha)), "no_bool")

    def div(self, other: Tensor | Scalar, *, rounding_mode: str | None = None) -> Tensor:
        """True division; ``rounding_mode="floor"`` is ``//``, ``"trunc"`` rounds the quotient
        toward zero (both keep integer dtypes, as torch)."""
        if rounding_mode == "floor":
            return self.floor_divide(other)
        if rounding_mode == "trunc":
            return _elementwise("div", "truncdiv", (self, other), "no_bool")
        if rounding_mode is not None:
            raise UnsupportedError(f"div: rounding_mode={rounding_mode!r} is not supported; use None, 'trunc' or 'floor'")
        return _elementwise("div", "div", (self, other), "float")

    def max(self, dim: Any = None, keepdim: bool = False) -> Tensor | ValuesIndices:
        """``x.max()`` (all elements), ``x.max(other)`` (elementwise) or ``x.max(dim, keepdim)``:
        the values and the indices of the first maximum (of the first NaN, as torch)."""
        return self._max_min(dim, keepdim, "amax", "maximum")

    def min(self, dim: Any = None, keepdim: bool = False) -> Tensor | ValuesIndices:
        return self._max_min(dim, keepdim, "amin", "minimum")

    def _max_min(self, dim: Any, keepdim: bool, reduction: str, binary: str) -> Tensor | ValuesIndices:
        if dim is None:
            return getattr(self, reduction)()
        if isinstance(dim, Tensor):
            return getattr(self, binary)(dim)
        d = _wrap_dim(dim, self.ndim, reduction[1:])
        return ValuesIndices(getattr(self, reduction)(d, keepdim), self._arg_extreme(reduction, d, keepdim))

    def argmax(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        """The int64 index of the first maximum along ``dim`` (of the flattened tensor when None;
        of the first NaN where there is one, as torch; bool tensors are refused, as torch)."""
        return self._refuse_bool("argmax")._arg_extreme("amax", dim, keepdim)

    def argmin(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return self._refuse_bool("argmin")._arg_extreme("amin", dim, keepdim)

    def _refuse_bool(self, op: str) -> Tensor:
        if self.dtype == "bool":
            raise UnsupportedError(f"{op}() does not support bool input (as torch); cast with .int() first")
        return self

    def _arg_extreme(self, reduction: str, dim: Any, keepdim: bool) -> Tensor:
        """Two reductions that fuse like softmax's: the extreme along ``dim``, then the least
        position holding it (or NaN, which the extreme then is); positions are a running count
        along the dim, a buffer of its length."""
        name = f"arg{reduction[1:]}"
        if dim is None:
            flat = self.reshape(-1)._arg_extreme(reduction, 0, False)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        src = self if self.ndim else self.reshape(1)
        d = _wrap_dim(dim, src.ndim, name)
        n = src.shape[d]
        if n == 0:
            raise ShapeError(f"{name}: cannot reduce over dimension {dim} of size 0 (shape {self.shape})")
        extreme = getattr(src, reduction)(d, keepdim=True)
        hit = (src == extreme) | (src != src) if dtypes.is_floating(src.dtype) else src == extreme
        positions = self._tracer.constant(1, "int64", (n,)).cumsum(0) - 1
        positions = positions.reshape(tuple(n if k == d else 1 for k in range(src.ndim)))
        index = where(hit, positions, n).amin(d, keepdim=keepdim)
        return index if self.ndim else index.reshape(())

    # -- reductions -----------------------------------------------------------------------------
    def _reduce(self, op: str, dim: Any, keepdim: bool, dtype: Any) -> Tensor:
        """Reduction node over sorted non-negative dims; sum/prod of int/bool accumulate in int64
        and ``dtype=`` casts first, as torch."""
        dims = _dims_arg(dim, self.ndim, op)
        src = self
        if dtype is not None:
            src = self._cast(dtypes.canonical(dtype))
        elif op in ("sum", "prod") and not dtypes.is_floating(self.dtype):
            src = self._cast("int64")
        if not dims:  # a 0-d tensor: the element itself, which deviates from its mean by nothing
            return Tensor(self._tracer, src._name) if op != "m2" else src * 0
        if op in ("amax", "amin") and src.dtype != "bool" and any(self.shape[d] == 0 for d in dims):
            raise ShapeError(f"{op}: cannot reduce over a dimension of size 0 (shape {self.shape}, dims {dims})")
        shape = tuple(1 if d in dims else s for d, s in enumerate(self.shape) if keepdim or d not in dims)
        return self._tracer.emit(op, (src,), shape, src.dtype, dims=dims, keepdim=bool(keepdim))

    def _scan(self, op: str, dim: Any, dtype: Any) -> Tensor:
        """Scan node along one dim (seed 7.7); int/bool inputs accumulate in int64 and ``dtype=``
        casts first, as torch's ``cumsum``/``cumprod``."""
        d = _wrap_dim(dim, self.ndim, op)
        if dtype is not None:
            src = self._cast(dtypes.canonical(dtype))
        else:
            src = self if dtypes.is_floating(self.dtype) else self._cast("int64")
        if self.ndim == 0:  # one element: the running value is the element
            return Tensor(self._tracer, src._name)
        return self._tracer.emit(op, (src,), self.shape, src.dtype, dim=d)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Tensor:
        """torch.Tensor.cumsum: running sum along ``dim``."""
        return self._scan("cumsum", dim, dtype)

    def cumprod(self, dim: int, *, dtype: Any = None) -> Tensor:
        """torch.Tensor.cumprod: running product along ``dim``."""
        return self._scan("cumprod", dim, dtype)

    def logcumsumexp(self, dim: int) -> Tensor:
        """torch.Tensor.logcumsumexp: ``log(cumsum(exp(x)))`` along ``dim``, each step a
        log-add-exp (exact where the running value and the next differ by much)."""
        if not dtypes.is_floating(self.dtype):
            raise UnsupportedError(f"logcumsumexp of a {self.dtype} tensor: torch computes it for floating tensors only; "
                                   "cast first, e.g. x.float().logcumsumexp(dim)")
        return self._scan("logcumsumexp", dim, None)

    def mean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        """``sum / count``; like torch, integer inputs need an explicit floating ``dtype``."""
        src = self._cast(dtypes.canonical(dtype)) if dtype is not None else self
        if not dtypes.is_floating(src.dtype):
            raise UnsupportedError(f"mean(): could not infer output dtype. Input dtype must be a floating point "
                                   f"dtype, got {src.dtype} (use x.float().mean() or mean(dtype='float32'))")
        count = math.prod(src.shape[d] for d in _dims_arg(dim, src.ndim, "mean"))
        return src.sum(dim, keepdim) / count

    def var(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None) -> Tensor:
        """torch.Tensor.var: ``m2 / (count - correction)``, the correction 1 unless ``unbiased=False``
        (0) or given; the m2 reduction computes the squared deviations in one pass (Welford)."""
        if not dtypes.is_floating(self.dtype):
            raise UnsupportedError(f"var(): the input must be float32 or float64, got {self.dtype} (use x.float().var())")
        if unbiased is not None and correction is not None:
            raise UnsupportedError("var(): give either unbiased= or correction=, not both")
        dims = _dims_arg(dim, self.ndim, "var")
        count = math.prod(self.shape[d] for d in dims)
        correction = (1 if unbiased is None or unbiased else 0) if correction is None else correction
        return self._reduce("m2", dim, keepdim, None) / max(count - correction, 0)  # over no element: 0 / 0

    def softmax(self, dim: int, dtype: Any = None) -> Tensor:
        """``exp(x - amax) / sum``: the numerically stable form torch computes (``dtype=`` casts first)."""
        shifted = self._softmax_input(dim, "softmax", dtype)
        e = shifted.exp()
        return e / e.sum(dim, keepdim=True)

    def log_softmax(self, dim: int, dtype: Any = None) -> Tensor:
        shifted = self._softmax_input(dim, "log_softmax", dtype)
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def _softmax_input(self, dim: int, op: str, dtype: Any) -> Tensor:
        src = self._cast(dtypes.canonical(dtype)) if dtype is not None else self
        if not dtypes.is_floating(src.dtype):
            raise UnsupportedError(f"{op} on {src.dtype} tensors is not supported (torch rejects it too); cast with .float()")
        return src - src.amax(dim, keepdim=True)

    def logsumexp(self, dim: Any, keepdim: bool = False) -> Tensor:
        """torch.logsumexp: ``log(sum(exp(x - m))) + m`` with ``m`` the maximum, or 0 where that is
        infinite (as torch, so rows of -inf give -inf and a +inf gives inf); integer inputs
        compute in float32; over no element it is -inf."""
        src = self if dtypes.is_floating(self.dtype) else self._cast("float32")
        dims = _dims_arg(dim, src.ndim, "logsumexp")
        if any(src.shape[d] == 0 for d in dims):
            shape = tuple(1 if d in dims else s for d, s in enumerate(src.shape) if keepdim or d not in dims)
            return self._tracer.constant(-math.inf, src.dtype, shape)
        peak = src.amax(dims, keepdim=True)
        shift = where(peak.abs() == math.inf, 0.0, peak)
        total = (src - shift).exp().sum(dims, keepdim=keepdim).log()
        return total + shift.reshape(total.shape)

    def std(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: float | None = None) -> Tensor:
        """torch.Tensor.std: the square root of ``var`` with the same arguments."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        """torch.Tensor.norm for vector norms: ``p`` 2 (or ``"fro"``), 1, inf, -inf, 0 or any
        number, over ``dim`` (all dims when None)."""
        if p == "fro":
            p = 2
        if isinstance(p, str):
            raise UnsupportedError(f"norm: p={p!r} is not supported; use a number, inf or 'fro' (vector norms only)")
        return vector_norm(self, p, dim, keepdim, dtype=dtype)

    def square(self) -> Tensor:
        """torch.square is ``pow(x, 2)`` (so a bool tensor gives int64)."""
        return self ** 2

    def any(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return self._cast("bool").amax(dim, keepdim)

    def all(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return self._cast("bool").amin(dim, keepdim)

    # -- views ----------------------------------------------------------------------------------
    def _view(self, result: Tensor) -> Tensor:
        """``result`` as a new alias of ``self`` (for the in-place checks)."""
        root = self if self._base is None else self._base
        root._has_views = True
        return Tensor(self._tracer, result._name, base=root)

    def _reshaped(self, shape: tuple[int, ...]) -> Tensor:
        return self if shape == self.shape else self._tracer.emit("reshape", (self,), shape, self.dtype, shape=shape)

    def reshape(self, *shape: Any) -> Tensor:
        """``reshape``/``view`` with one inferred ``-1``; the graph has value semantics, so ``view`` on
        a non-contiguous tensor is accepted."""
        sizes = _shape_args(shape, "reshape")
        known = math.prod(s for s in sizes if s != -1)
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ShapeError(f"reshape: invalid shape {sizes} (at most one -1, other sizes non-negative)")
        if -1 in sizes:
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: shape {sizes} is invalid for input of size {self.numel()} (shape {self.shape})")
            sizes = tuple(self.numel() // known if s == -1 else s for s in sizes)
        elif known != self.numel():
            raise ShapeError(f"reshape: shape {sizes} is invalid for input of size {self.numel()} (shape {self.shape})")
        return self._view(self._reshaped(sizes))

    def view(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int, np.integer)):
            raise UnsupportedError(f"view({shape[0]!r}): reinterpreting the dtype is not supported; use to(dtype)")
        return self.reshape(*shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        return self.reshape(other.shape)

    view_as = reshape_as

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = _wrap_dim(start_dim, self.ndim, "flatten"), _wrap_dim(end_dim, self.ndim, "flatten")
        if start > end:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def permute(self, *dims: Any) -> Tensor:
        order = tuple(_wrap_dim(d, self.ndim, "permute") for d in _shape_args(dims, "permute"))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute: dims {dims} are not a permutation of the {self.ndim} dims of shape {self.shape}")
        if order == tuple(range(self.ndim)):
            return self._view(self)
        shape = tuple(self.shape[d] for d in order)
        return self._view(self._tracer.emit("permute", (self,), shape, self.dtype, dims=order))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        order = list(range(self.ndim))
        a, b = _wrap_dim(dim0, self.ndim, "transpose"), _wrap_dim(dim1, self.ndim, "transpose")
        if self.ndim:
            order[a], order[b] = order[b], order[a]
        return self.permute(order)

    swapaxes = transpose

    def t(self) -> Tensor:
        """torch.t: transposes a 2-D tensor, returns 0-d and 1-d tensors as they are."""
        if self.ndim > 2:
            raise ShapeError(f"t() expects a tensor with <= 2 dimensions, got shape {self.shape}; use transpose(d0, d1)")
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def unsqueeze(self, dim: int) -> Tensor:
        d = _wrap_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim: Any = None) -> Tensor:
        """Drops size-1 dims (all, or those in ``dim``); a named dim of another size is kept, as torch."""
        if isinstance(dim, (tuple, list)) and not dim:  # torch: an empty tuple names no dim
            return self._view(self)
        dims = set(range(self.ndim)) if dim is None else set(_dims_arg(dim, self.ndim, "squeeze"))
        return self.reshape(tuple(s for d, s in enumerate(self.shape) if not (d in dims and s == 1)))

    def expand(self, *sizes: Any) -> Tensor:
        """torch.expand: ``-1`` keeps a size, new dims may be added on the left, size-1 dims broadcast."""
        sizes = _shape_args(sizes, "expand")
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: the number of sizes {sizes} must be >= the number of dims of shape {self.shape}")
        target = []
        for i, size in enumerate(sizes):
            current = self.shape[i - lead] if i >= lead else None
            if size == -1 and current is None:
                raise ShapeError(f"expand: size -1 is not allowed in a new leading dimension ({sizes})")
            if size == -1 or size == current:
                target.append(current)
            elif current in (None, 1) and size >= 0:
                target.append(size)
            else:
                raise ShapeError(f"expand: the size of dimension {i} ({current}) must match {size} or be 1 "
                                 f"(shape {self.shape}, sizes {sizes})")
        return self._view(_expand_to(self, target))

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """torch.Tensor.unfold: the windows of ``size`` elements every ``step`` along ``dimension``,
        as a new last dim (a view; a convolution reads its input through it)."""
        if self.ndim == 0:  # torch: the windows of a one-element 1-d tensor, as one dim of ``size``
            return self.reshape(1).unfold(dimension, size, step).reshape(size)
        dim = _wrap_dim(dimension, self.ndim, "unfold")
        size, step = _as_int(size, "unfold: size"), _as_int(step, "unfold: step")
        if step <= 0 or not 0 <= size <= self.shape[dim]:
            raise ShapeError(f"unfold: size {size} and step {step} do not fit dimension {dimension} of shape "
                             f"{self.shape} (expected 0 <= size <= {self.shape[dim]} and step > 0)")
        shape = self.shape[:dim] + ((self.shape[dim] - size) // step + 1,) + self.shape[dim + 1:] + (size,)
        return self._view(self._tracer.emit("unfold", (self,), shape, self.dtype, dim=dim, size=size, step=step))

    def flip(self, *dims: Any, **keyword: Any) -> Tensor:
        """torch.flip: the elements in reverse order along ``dims`` (positional or ``dims=``; a new
        tensor, as in torch; lowered as a reversed index, no copy)."""
        if keyword:
            if dims or set(keyword) != {"dims"}:
                raise UnsupportedError(f"flip: give the dims positionally or as dims=..., e.g. flip(0, 1) or "
                                       f"flip(dims=(0, 1)); got {dims} and keywords {sorted(keyword)}")
            dims = (keyword["dims"],)
        dims = _shape_args(dims, "flip")
        order = tuple(d for d in _dims_arg(dims, self.ndim, "flip") if self.shape[d] > 1) if dims else ()
        if not order:
            return self.clone()
        return self._tracer.emit("flip", (self,), self.shape, self.dtype, dims=order)

    def __getitem__(self, index: Any) -> Tensor:
        """Basic indexing: ints, slices with positive steps, None and Ellipsis (a view, as torch)."""
        items = list(index) if isinstance(index, tuple) else [index]
        for item in items:
            if not (item is None or item is Ellipsis or isinstance(item, slice)
                    or (isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)))):
                raise UnsupportedError(f"indexing with {type(item).__name__} is not supported; stax supports ints, "
                                       "slices with positive steps, None and ...")
        consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consuming > self.ndim:
            raise ShapeError(f"too many indices for a tensor of dimension {self.ndim} (index {index!r})")
        if items.count(Ellipsis) > 1:
            raise ShapeError("an index can only have a single ellipsis ('...')")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items[at:at + 1] = [slice(None)] * (self.ndim - consuming)
        else:
            items += [slice(None)] * (self.ndim - consuming)
        result, shape, dim = self, [], 0
        for item in items:
            if item is None:
                shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(item, slice):
                if item.step is not None and _as_int(item.step, "slice step") <= 0:
                    raise UnsupportedError(f"slice step must be positive, got {item.step}")
                start, stop, step = item.indices(size)
                length = len(range(start, stop, step))
                shape.append(length)
            else:
                if not -size <= item < size:
                    raise ShapeError(f"index {item} is out of bounds for dimension {dim} with size {size}")
                start, step, length = int(item) % size, 1, 1
            if length != size:
                sliced = result.shape[:dim] + (length,) + result.shape[dim + 1:]
                stop = start + (length - 1) * step + 1 if length else start
                result = self._tracer.emit("slice", (result,), sliced, self.dtype, dim=dim,
                                           start=start, stop=stop, step=step)
            dim += 1
        return self._view(result._reshaped(tuple(shape)))

    # -- matmul ---------------------------------------------------------------------------------
    def matmul(self, other: Tensor) -> Tensor:
        """torch.matmul on operands of the same dtype: 1-D operands get a dim added and removed.
        Floats call BLAS: a batch times a matrix folds the batch into rows (one 2-D ``matmul``);
        a matrix times a batch is a ``matmul`` of the 2-D matrix and the flattened 3-D batch;
        other batch dims broadcast and are flattened into one batched 3-D ``matmul`` node.
        Integers are a sum of products over ``k`` in their own dtype (wrapping, as torch), a
        reduction fused like a convolution."""
        if not isinstance(other, Tensor):
            raise UnsupportedError(f"matmul: the other operand must be a traced tensor, got {type(other).__name__}")
        tracer = _tracer_of((self, other), "matmul")
        if self.dtype != other.dtype or self.dtype == "bool":
            raise UnsupportedError(f"matmul: operands must have the same float or integer dtype, got {self.dtype} "
                                   f"and {other.dtype} (cast with .float(), .double(), .int() or .long())")
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {self.shape} and {other.shape}")
        a = self._reshaped((1,) + self.shape) if self.ndim == 1 else self
        b = other._reshaped(other.shape + (1,)) if other.ndim == 1 else other
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k != k2:
            raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} cannot be multiplied ({k} != {k2})")
        batch = _broadcast_shapes("matmul", [a.shape[:-2], b.shape[:-2]])
        if dtypes.is_integer(self.dtype):
            out = (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2, dtype=self.dtype)
            return out._reshaped(batch + ((m,) if self.ndim > 1 else ()) + ((n,) if other.ndim > 1 else ()))
        if batch and b.ndim == 2:  # (..., m, k) @ (k, n): fold the batch into rows, the weight is read once
            rows = math.prod(batch) * m
            out = tracer.emit("matmul", (a._reshaped((rows, k)), b), (rows, n), self.dtype)
            return out._reshaped(batch + (m,) + ((n,) if other.ndim > 1 else ()))
        if batch and a.ndim == 2:  # (m, k) @ (..., k, n): the matrix is read in place by every batch's gemm
            flat = math.prod(batch)
            out = tracer.emit("matmul", (a, _expand_to(b, batch + (k, n))._reshaped((flat, k, n))), (flat, m, n),
                              self.dtype)
            return out._reshaped(batch + (m,) + ((n,) if other.ndim > 1 else ()))
        if batch:
            flat = math.prod(batch)
            a = _expand_to(a, batch + (m, k))._reshaped((flat, m, k))
            b = _expand_to(b, batch + (k, n))._reshaped((flat, k, n))
        out = tracer.emit("matmul", (a, b), a.shape[:-1] + (n,), self.dtype)
        shape = batch + ((m,) if self.ndim > 1 else ()) + ((n,) if other.ndim > 1 else ())
        return out._reshaped(shape)

    __matmul__ = matmul
    mm = matmul
    bmm = matmul

    def __rmatmul__(self, other: Any) -> Tensor:
        _check_operand(other, "matmul")
        raise UnsupportedError(f"matmul: the other operand must be a traced tensor, got {type(other).__name__}")

    # -- in-place (functionalized) --------------------------------------------------------------
    def _assign(self, value: Tensor, op: str, *, any_cast: bool = False) -> Tensor:
        """Rebind this proxy to ``value`` broadcast to its shape and cast to its dtype (torch's
        in-place rules: the shape cannot change, the result may not go down a dtype category
        except for ``copy_``)."""
        if self._base is not None:
            where_from = f"input {self._base._input}" if self._base._input else "a tensor"
            raise UnsupportedError(f"{op}: in-place update of a view of {where_from} is not supported; compute the "
                                   "full new value out of place and copy_() it into the tensor itself")
        if self._has_views:
            raise UnsupportedError(f"{op}: in-place update of a tensor that has views is not supported (the views "
                                   "would not see the update); update it before taking views, or clone() it")
        if _broadcast_shapes(op, [self.shape, value.shape]) != self.shape:
            raise ShapeError(f"{op}: the result of shape {value.shape} does not broadcast to the tensor's shape {self.shape}")
        if not (any_cast or _can_cast(value.dtype, self.dtype)):
            raise UnsupportedError(f"{op}: result type {value.dtype} can't be cast to the desired output type "
                                   f"{self.dtype} (as in torch); use an out-of-place op or cast explicitly")
        self._name = _expand_to(value._cast(self.dtype), self.shape)._name
        return self

    def copy_(self, src: Tensor) -> Tensor:
        if not isinstance(src, Tensor):
            raise UnsupportedError(f"copy_: src must be a traced tensor, got {type(src).__name__} (use fill_ for scalars)")
        _tracer_of((self, src), "copy_")
        return self._assign(src, "copy_", any_cast=True)

    def fill_(self, value: Tensor | Scalar) -> Tensor:
        _check_operand(value, "fill_")
        if isinstance(value, Tensor):
            if value.ndim != 0:
                raise UnsupportedError(f"fill_: value must be a scalar or a 0-d tensor, got shape {value.shape}")
            return self._assign(value, "fill_", any_cast=True)
        return self._assign(self._tracer.constant(value, self.dtype, ()), "fill_", any_cast=True)

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def clone(self) -> Tensor:
        """A new tensor with the same value (under functionalization: the same node, no alias)."""
        return Tensor(self._tracer, self._name)

    def contiguous(self) -> Tensor:
        return self


def _scaled(other: Tensor | Scalar, alpha: Scalar) -> Tensor | Scalar:
    """``other * alpha`` for torch's ``add(other, alpha=...)``."""
    _check_operand(other, "add")
    return other if alpha == 1 else other * alpha


def _pow(base: Tensor | Scalar, exponent: Tensor | Scalar) -> Tensor:
    """``base ** exponent`` with torch's rules: an integer result to a negative tensor exponent is
    0 except for bases 1 and -1, a negative Python int exponent of an integer tensor raises, and
    two bool operands are refused."""
    for o in (base, exponent):
        _check_operand(o, "pow")
    common = dtypes.result_type(_type_operand(base), _type_operand(exponent))
    if common == "bool":
        raise UnsupportedError("pow of two bool operands is not supported (torch rejects it too); cast with .int() first")
    if dtypes.is_integer(common) and _is_scalar(exponent) and exponent < 0:
        raise UnsupportedError(f"pow: integers to negative integer powers are not allowed (got {base!r} ** {exponent!r}, "
                               "as in torch); cast to float first")
    return _elementwise("pow", "pow", (base, exponent), "same")


def _unary_method(name: str, op: str, rule: str) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return _elementwise(name, op, (self,), rule)
    method.__doc__ = f"torch.Tensor.{name} (elementwise ``{op}``)."
    return method


def _binary_method(name: str, op: str, rule: str, reflected: bool = False) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Tensor | Scalar) -> Tensor:
        return _elementwise(name, op, (other, self) if reflected else (self, other), rule)
    method.__doc__ = f"torch.Tensor.{name} (elementwise ``{op}``)."
    return method


def _bitwise_method(name: str, kind: str, reflected: bool = False) -> Callable[..., Tensor]:
    def method(self: Tensor, *other: Tensor | Scalar) -> Tensor:
        return _bitwise(name, kind, (*other, self) if reflected else (self, *other))
    method.__doc__ = f"torch.Tensor.{name}: logical on bool tensors, bitwise on integers."
    return method


def _cast_method(dtype: str) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return self._cast(dtype)
    method.__doc__ = f"Cast to {dtype} (returns ``self`` if it already is, as torch)."
    return method


def _reduction_method(op: str) -> Callable[..., Tensor]:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return self._reduce(op, dim, keepdim, dtype)
    method.__doc__ = f"torch.Tensor.{op} over ``dim`` (int, tuple or None for all) with ``keepdim``."
    return method


def _inplace_method(name: str) -> Callable[..., Tensor]:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self._assign(getattr(self, name)(*args, **kwargs), f"{name}_")
    method.__doc__ = f"In-place ``{name}`` (functionalized: the proxy is rebound to the new value)."
    return method


def _data_dependent(name: str) -> Callable[..., Any]:
    def method(self: Tensor, *args: Any) -> Any:
        raise UnsupportedError(f"Tensor.{name} needs the tensor's value, which is unknown while tracing "
                               "(data-dependent control flow is not supported); use where() instead of if/else")
    return method


for _name, (_op, _rule) in _UNARY_METHODS.items():
    setattr(Tensor, _name, _unary_method(_name, _op, _rule))
for _name, (_op, _rule) in _BINARY_METHODS.items():
    if not hasattr(Tensor, _name):  # add, sub, div have their own signatures
        setattr(Tensor, _name, _binary_method(_name, _op, _rule))
for _dunder, (_symbol, _op, _rule) in _OPERATORS.items():
    setattr(Tensor, f"__{_dunder}__", _binary_method(_symbol, _op, _rule))
    setattr(Tensor, f"__r{_dunder}__", _binary_method(_symbol, _op, _rule, reflected=True))
for _op in COMPARE_OPS:
    setattr(Tensor, f"__{_op}__", _binary_method(_op, _op, "compare"))
for _name, _dtype in _CASTS.items():
    setattr(Tensor, _name, _cast_method(_dtype))
for _op in REDUCTION_OPS:
    setattr(Tensor, _op, _reduction_method(_op))
for _name in _INPLACE:
    setattr(Tensor, f"{_name}_", _inplace_method(_name))
for _dunder, _name in _AUGMENTED.items():
    setattr(Tensor, f"__{_dunder}__", _inplace_method(_name))
for _name in _DATA_DEPENDENT:
    setattr(Tensor, _name, _data_dependent(_name))
Tensor.__neg__ = _unary_method("negation (-x)", "neg", "no_bool")
Tensor.__abs__ = _unary_method("abs", "abs", "no_bool")
for _kind, _symbol in _BITWISE.items():
    setattr(Tensor, f"bitwise_{_kind}", _bitwise_method(f"bitwise_{_kind}", _kind))
    setattr(Tensor, f"__{_kind}__", _bitwise_method(_symbol, _kind))
    setattr(Tensor, f"__r{_kind}__", _bitwise_method(_symbol, _kind, reflected=True))
Tensor.__invert__ = _bitwise_method("~", "not")
Tensor.bitwise_not = _bitwise_method("bitwise_not", "not")


# ---------------------------------------------------------------------------------------------
# trace

def _outputs(result: Any, tracer: _Tracer) -> list[Tensor]:
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
    tracer = _Tracer(resolve_isa(isa))
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
        exc.args = (_at_user_line(str(exc), exc.__traceback__),)
        raise
    except TypeError as exc:
        if not (message := _numpy_keyword(str(exc))):
            raise
        raise UnsupportedError(_at_user_line(message, exc.__traceback__)) from None
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


def _at_user_line(message: str, tb: Any) -> str:
    """``message`` ending with the file and line of the traced function that caused it: the
    innermost frame of ``tb`` in the user's code (none: ``message`` as it is)."""
    where = None
    while tb is not None:
        if _users(tb.tb_frame):
            where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where is None or message.endswith(f"(at {where})"):
        return message
    return f"{message} (at {where})"


# ---------------------------------------------------------------------------------------------
# write-back of a functionalized program's inputs

def write_back(target: Tensor, value: Tensor) -> None:
    """Make ``value`` (cast to the input's dtype and broadcast to its shape) the final value of
    the graph input ``target``: ``Graph.mutations``, written into the caller's array after every
    output (seed 7.1, renaming).  For the epilogue of a functionalized program (torch's
    ``copy_`` of an input's new value), whose reads all see the old value by construction, so
    that views of the input taken earlier do not block it as they block ``copy_``."""
    if not isinstance(target, Tensor) or target._input is None or target._base is not None:
        raise UnsupportedError("write_back: the target must be an input of the traced function")
    _tracer_of((target, value), "write_back")
    if _broadcast_shapes("write_back", [target.shape, value.shape]) != target.shape:
        raise ShapeError(f"write_back: a value of shape {value.shape} does not broadcast to the input's shape "
                         f"{target.shape}")
    target._name = _expand_to(value._cast(target.dtype), target.shape)._name


# ---------------------------------------------------------------------------------------------
# indexing by tensors (stax.frontend.ops.gather): torch.Tensor's methods of the same names

from stax.frontend.ops import gather as _gather  # noqa: E402  (stax.frontend.ops.gather builds on this module)

Tensor.gather = lambda self, dim, index: _gather.gather(self, dim, index)
Tensor.index_select = lambda self, dim, index: _gather.index_select(self, dim, index)
Tensor.scatter = lambda self, dim, index, src=None, *, value=None, reduce=None: _gather.scatter(
    self, dim, index, value if src is None else src, reduce)
Tensor.scatter_reduce = lambda self, dim, index, src, reduce, *, include_self=True: _gather.scatter_reduce(
    self, dim, index, src, reduce, include_self=include_self)
Tensor.scatter_add = lambda self, dim, index, src: _gather.scatter_add(self, dim, index, src)
Tensor.slice_scatter = lambda self, src, dim=0, start=None, end=None, step=1: _gather.slice_scatter(
    self, src, dim, start, end, step)

# ---------------------------------------------------------------------------------------------
# sorting by counting (stax.frontend.ops.sorting): torch.Tensor's methods of the same names

from stax.frontend.ops import sorting as _sorting  # noqa: E402  (stax.frontend.ops.sorting builds on this module)

Tensor.sort = lambda self, dim=-1, descending=False, stable=False: _sorting.sort(self, dim, descending, stable)
Tensor.argsort = lambda self, dim=-1, descending=False, stable=False: _sorting.argsort(self, dim, descending, stable)
Tensor.topk = lambda self, k, dim=-1, largest=True, sorted=True: _sorting.topk(self, k, dim, largest, sorted)
