"""Shape arithmetic of the front end, on plain ints: torch's broadcasting, dim wrapping and size
arguments (spec 4.x); no tensor is involved."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from stax.errors import ShapeError, UnsupportedError


def as_int(value: Any, what: str) -> int:
    """``value`` as an int; a bool or a non-integer is refused (``what`` names the argument)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UnsupportedError(f"{what}: expected an int, got {value!r} of type {type(value).__name__}")
    return int(value)


def broadcast_shapes(op: str, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
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


def wrap_dim(dim: Any, ndim: int, op: str) -> int:
    """A possibly negative dim in ``[0, ndim)``; a 0-d tensor accepts 0 and -1 as torch does."""
    dim = as_int(dim, f"{op}: dim")
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor of dimension {ndim} "
                         f"(expected a value in [{-bound}, {bound - 1}])")
    return dim % bound


def dims_arg(dim: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``dim`` as sorted non-negative dims; None or () means all dims."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(ndim))
    items = dim if isinstance(dim, (tuple, list)) else (dim,)
    dims = [wrap_dim(d, ndim, op) for d in items]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{op}: dim {tuple(items)} names a dimension more than once")
    return tuple(sorted(d for d in dims if d < ndim))


def shape_args(args: tuple, op: str) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(as_int(a, f"{op}: size") for a in args)


@dataclass(frozen=True)
class DiagonalFrame:
    """Where ``x.diagonal(offset, dim1, dim2)`` lies: ``x.permute(order)`` puts the two dims last,
    and its block ``[..., row:, column:]`` of ``rows x columns`` holds the diagonal's ``length``
    elements at every ``columns + 1``-th element of the block read in row-major order."""

    order: tuple[int, ...]
    row: int
    column: int
    rows: int
    columns: int

    @staticmethod
    def of(shape: tuple[int, ...], offset: Any, dim1: Any, dim2: Any, op: str) -> DiagonalFrame:
        ndim = len(shape)
        if ndim < 2:
            raise ShapeError(f"{op}: the input must have at least 2 dims, got shape {shape}")
        a, b = wrap_dim(dim1, ndim, op), wrap_dim(dim2, ndim, op)
        if a == b:
            raise ShapeError(f"{op}: dim1 and dim2 name the same dim ({dim1} and {dim2}); give two different dims")
        offset = as_int(offset, f"{op}: offset")
        row, column = max(-offset, 0), max(offset, 0)
        rows, columns = max(shape[a] - row, 0), max(shape[b] - column, 0)
        return DiagonalFrame(tuple(d for d in range(ndim) if d not in (a, b)) + (a, b), row, column, rows, columns)

    @property
    def length(self) -> int:
        return min(self.rows, self.columns)

    @property
    def inverse(self) -> tuple[int, ...]:
        """The permutation that undoes ``order``."""
        return tuple(int(i) for i in np.argsort(self.order))
