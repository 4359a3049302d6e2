"""Loop IR (spec 6.x as TorchInductor does it): a materialized buffer is computed by a loop nest
whose body is a small expression DAG over the loop variables.

- ``Load(buffer, index)`` (optionally guarded: padding), ``Const(value)``, ``Op(name, args)``:
  the body's values; ``Op`` names are the graph's elementwise op names (``add``, ``exp``,
  ``cast``, ``where``, ``lt``...).
- ``ComputedBuffer``: ``ranges`` (pointwise variables ``x0, x1, ...``) and, for a reduction,
  ``reduction_ranges`` (variables ``r0, r1, ...``) and ``reduction`` (sum/prod/amax/amin, or m2:
  Welford's sum of squared deviations from the mean, one pass).
  A *scan* (spec 7.7, ``cumsum``/``cumprod``/``logcumsumexp``) sets ``scan`` (the combine op,
  sum/prod/logaddexp) and
  ``scan_dim``: its ``ranges`` are the shape's other dims in order, its one reduction range
  ``r0`` is the carried dim, and every element is stored (the running value).
  It stores ``body`` at ``store_index`` (contiguous over its ranges unless it writes into an
  input's storage for an in-place update).
- ``ExternBuffer``: a call into a library (matmul), which reads and writes whole buffers.

Expressions are immutable and hash-consed by value, so equal subexpressions print once (CSE).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Union

import numpy as np

from stax.dtypes import is_floating
from stax.ir.indexing import Index


@dataclass(frozen=True)
class Load:
    """``buffer[index]``.  A *guarded* load (padding, spec 6.x as TorchInductor's masked load)
    reads memory only where every ``(e, n)`` of ``guard`` has ``0 <= e < n`` and is the scalar
    ``other`` elsewhere, so its index may leave the buffer where the guard fails."""

    buffer: str
    index: Index
    dtype: str
    guard: tuple[tuple[Index, int], ...] = ()
    other: Any = 0


@dataclass(frozen=True)
class Const:
    value: Any
    dtype: str


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple["Expr", ...]
    dtype: str
    attrs: tuple[tuple[str, Any], ...] = ()


Expr = Union[Load, Const, Op]

#: ops that cost many instructions each: lowering stores a shared one instead of computing it in
#: every user (``CostModel.materialize_shared_expensive``), and codegen counts them per point
EXPENSIVE_OPS = frozenset({"exp", "log", "tanh", "erf", "sigmoid", "sin", "cos", "log1p", "expm1", "pow", "rsqrt", "sqrt"})

REDUCTION_INIT = {"sum": 0, "prod": 1, "amax": "-inf", "amin": "inf", "m2": 0, "logaddexp": "-inf"}


def reduction_identity(op: str, dtype: str):
    """The initial accumulator of a reduction: amax/amin start at -inf/+inf for floats, at the
    dtype's limits for integers and at False/True for bool."""
    init = REDUCTION_INIT[op]
    if not isinstance(init, str):
        return init
    if is_floating(dtype):
        return float(init)
    if dtype == "bool":
        return init == "inf"
    info = np.iinfo(dtype)
    return info.max if init == "inf" else info.min


def walk(expr: Expr) -> Iterator[Expr]:
    """Every distinct subexpression, operands before users (post-order)."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded or not isinstance(node, Op):
            seen.add(id(node))
            yield node
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args))


def loads(expr: Expr) -> tuple[Load, ...]:
    """The distinct loads of ``expr``, operands first; kept on the (immutable) expression, which
    legality and code generation ask again and again."""
    found = expr.__dict__.get("_loads")
    if found is None:
        found = expr.__dict__["_loads"] = tuple(e for e in walk(expr) if isinstance(e, Load))
    return found


@dataclass
class ComputedBuffer:
    """A materialized pointwise or reduction computation (a scheduler node's payload)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    ranges: tuple[int, ...]
    body: Expr
    reduction_ranges: tuple[int, ...] = ()
    reduction: str | None = None
    store_index: Index | None = None
    aliases: str | None = None  # in-place update: the graph input whose storage this writes
    origin: str = ""  # the graph node it computes
    scan: str | None = None  # a scan's combine op (graph.SCAN_COMBINE); reduction is None then
    scan_dim: int | None = None  # the carried dim of ``shape``

    @property
    def kind(self) -> str:
        return "reduction" if self.reduction else "scan" if self.scan else "pointwise"

    @property
    def pointwise_vars(self) -> list[str]:
        return [f"x{i}" for i in range(len(self.ranges))]

    @property
    def reduction_vars(self) -> list[str]:
        return [f"r{i}" for i in range(len(self.reduction_ranges))]

    @property
    def var_ranges(self) -> dict[str, int]:
        return dict(zip(self.pointwise_vars + self.reduction_vars, self.ranges + self.reduction_ranges))

    def reads(self) -> tuple[Load, ...]:
        return loads(self.body)


@dataclass
class ExternBuffer:
    """A library call (spec 7.1: whole-buffer dependency, ``StarDep``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    op: str
    inputs: tuple[str, ...]
    origin: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    views: tuple[tuple[int, ...] | None, ...] = ()  # the shape each input is read as (None: its own)

    kind = "extern"
    ranges: tuple[int, ...] = ()
    reduction_ranges: tuple[int, ...] = ()


#: a buffer a node of the program produces (graph inputs are ``InputBuffer``s)
ProducedBuffer = Union[ComputedBuffer, ExternBuffer]


@dataclass(frozen=True)
class InputBuffer:
    """A graph input: shape, dtype and the element strides the compiled code assumes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]
    position: int


@dataclass
class LoweredProgram:
    """The lowered graph: inputs, materialized buffers in program order, the buffers returned
    (contiguous), and for each in-place updated input the buffer that writes its storage."""

    inputs: list[InputBuffer]
    buffers: list[ProducedBuffer]
    outputs: list[str]
    mutations: dict[str, str]

    def buffer(self, name: str) -> ProducedBuffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)
