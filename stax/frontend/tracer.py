"""The recording of a traced program: :class:`Tracer` owns the graph being built and its
hash-consing table, and :class:`TensorBase` is the state every traced tensor has (its tracer, its
node, whether it is a view) with the few primitives the mixins of :class:`~stax.frontend.tensor.Tensor`
build on: casts, aliases, reshapes and explicit broadcasts (spec 4.x; functionalization, 7.1).

Nothing here imports ``Tensor``: the tracer is handed the tensor type it wraps nodes in.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Self, Sequence, TypeVar

import numpy as np

from stax import dtypes
from stax.errors import ShapeError, StaxError, UnsupportedError
from stax.frontend.shapes import wrap_dim
from stax.frontend.user_frames import user_location
from stax.ir.graph import Graph, Node
from stax.target import Isa
from stax.util.suggest import closest

Scalar = bool | int | float
_T = TypeVar("_T", bound="TensorBase")


class Tracer:
    """Owns the graph being recorded and the hash-consing table; ``tensor_type`` is the class of
    the proxies it returns, ``isa`` the target the graph is traced for (ops that choose a form by
    it: ``conv_forms.blocked_applies_in_trace``)."""

    def __init__(self, tensor_type: type[TensorBase], isa: Isa) -> None:
        self.tensor_type = tensor_type
        self.isa = isa
        self.graph = Graph()
        self.cse: dict[tuple, str] = {}
        self.done = False
        self.in_fn = False  # the traced function is running: its ops have a line of the user's

    def emit(self, op: str, inputs: Sequence[TensorBase], shape: Sequence[int], dtype: str, /,
             **attrs: Any) -> Any:
        """The proxy of node ``op`` (CSE: an identical node is not created again)."""
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
        return self.tensor_type(self, name)

    def constant(self, value: Scalar, dtype: str, shape: Sequence[int]) -> Any:
        """A scalar as a ``constant`` node broadcast to ``shape``."""
        return expand_to(self.emit("constant", (), (), dtype, value=constant_value(value, dtype)), shape)


def constant_value(value: Scalar, dtype: str) -> Scalar:
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


def expand_to(t: _T, shape: Sequence[int]) -> _T:
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


class TensorBase:
    """A traced tensor's state and metadata: the node it stands for in its tracer's graph, the
    input it is the proxy of, and the tensor it is a view of (for the in-place checks)."""

    def __init__(self, tracer: Tracer, name: str, *, input_name: str | None = None,
                 base: TensorBase | None = None) -> None:
        self._tracer = tracer
        self._name = name
        self._input = input_name  # set on the proxy of a graph input
        self._base = base  # the tensor this is a view of
        self._has_views = False

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
        return self.shape[wrap_dim(dim, self.ndim, "size")]

    def is_floating_point(self) -> bool:
        return dtypes.is_floating(self.dtype)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Self]:
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

    def _cast(self, dtype: str) -> Self:
        return self if dtype == self.dtype else self._tracer.emit("cast", (self,), self.shape, dtype, dtype=dtype)

    def _same(self, name: str) -> Self:
        """A new proxy of node ``name`` in this trace, no alias of anything."""
        return type(self)(self._tracer, name)

    def _view(self, result: TensorBase) -> Self:
        """``result`` as a new alias of ``self`` (for the in-place checks)."""
        root = self if self._base is None else self._base
        root._has_views = True
        return type(self)(self._tracer, result._name, base=root)

    def _reshaped(self, shape: tuple[int, ...]) -> Self:
        return self if shape == self.shape else self._tracer.emit("reshape", (self,), shape, self.dtype, shape=shape)

    def clone(self) -> Self:
        """A new tensor with the same value (under functionalization: the same node, no alias)."""
        return self._same(self._name)

    def contiguous(self) -> Self:
        return self
