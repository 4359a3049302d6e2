"""Sorting along a dim by counting: ``sort``, ``argsort`` and ``topk`` with their indices, built
from comparisons and reductions, so that they are traced, fused and scheduled like every other
node (no data-dependent control flow, no extern).

An element's *rank* is the number of elements that come before it: those that compare less
(greater, descending) and the equal ones at a lower position, so the order is stable. NaN
compares greater than every number and equal to NaN, as torch sorts it: last ascending, first
descending and first among topk's largest. Output ``k`` is the element of rank ``k``: the only
one a one-hot selection keeps along the dim. Ranking costs ``n`` comparisons an element of a row
of ``n``; rows longer than :data:`MAX_SORTED` are refused rather than run for minutes.

The top ``k`` of a longer row (``k`` at most :data:`MAX_SELECTED` and a quarter of the row) are
selected instead, one after another: the next is the first value in order among the elements
that come after the last one chosen, at its first position; three reductions of the row a step.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import where
from stax.frontend.ops.gather import iota
from stax.frontend.ops.padding import cat
from stax.frontend.reductions import ValuesIndices
from stax.frontend.shapes import as_int, wrap_dim
from stax.frontend.tracer import TensorBase

#: the longest row sorted by counting (``n * n`` comparisons a row)
MAX_SORTED = 4096
#: the largest ``k`` whose top ``k`` are selected one by one (three reductions of the row each)
MAX_SELECTED = 32


def _precedes(a: TensorBase, b: TensorBase, descending: bool) -> TensorBase:
    """Whether value ``a`` comes strictly before value ``b`` (NaN greatest)."""
    first, second = (b, a) if descending else (a, b)
    less = first < second
    if dtypes.is_floating(a.dtype):
        less = less | ((second != second) & (first == first))
    return less


def _ties(a: TensorBase, b: TensorBase) -> TensorBase:
    same = a == b
    if dtypes.is_floating(a.dtype):
        same = same | ((a != a) & (b != b))
    return same


def _positions(x: TensorBase, n: int, axis: int, rank: int) -> TensorBase:
    """0, 1, ..., n - 1 along ``axis`` of a tensor of ``rank`` dims (int64)."""
    return iota(x, n).to("int64").reshape(tuple(n if k == axis else 1 for k in range(rank)))


def _ordered(x: TensorBase, dim: Any, count: int | None, descending: bool, op: str) -> ValuesIndices:
    """The first ``count`` (all when None) elements of ``x`` along ``dim`` in order, and their
    positions (int64)."""
    if x.dtype == "bool":
        values, indices = _ordered(x.to("int32"), dim, count, descending, op)
        return ValuesIndices(values.to("bool"), indices)
    if x.ndim == 0:  # the value and position 0, for k = 0 too (as torch)
        if count not in (None, 0, 1):
            raise ShapeError(f"{op}: k ({count}) is out of range for a 0-d tensor")
        return ValuesIndices(*(t.reshape(()) for t in _ordered(x.reshape(1), 0, None, descending, op)))
    d = wrap_dim(dim, x.ndim, op)
    n = x.shape[d]
    k = n if count is None else count
    if not 0 <= k <= n:
        raise ShapeError(f"{op}: k ({k}) is out of range for dim {d} of size {n}")
    if k == 0:  # nothing to order (and no extreme of nothing)
        empty = x[(slice(None),) * d + (slice(0, 0),)]
        return ValuesIndices(empty, empty.to("int64"))
    last = x.transpose(d, -1) if d != x.ndim - 1 else x
    if k <= MAX_SELECTED and 4 * k <= n:
        values, indices = _selected(last, k, descending)
    elif n <= MAX_SORTED:
        values, indices = _counted(last, k, descending)
    else:
        raise UnsupportedError(f"{op}: stax sorts by counting ({n} comparisons an element here) up to rows of "
                               f"{MAX_SORTED}, and selects a top k of at most {MAX_SELECTED} and a quarter of the "
                               f"row one by one; dim {d} has {n} elements and k is {k}")
    if d != x.ndim - 1:
        values, indices = values.transpose(d, -1), indices.transpose(d, -1)
    return ValuesIndices(values, indices)


def _lowest(dtype: str) -> Any:
    return -np.inf if dtypes.is_floating(dtype) else np.iinfo(dtype).min


def _counted(last: TensorBase, k: int, descending: bool) -> tuple[TensorBase, TensorBase]:
    """The first ``k`` along the last dim by rank (the module docstring)."""
    n, rank = last.shape[-1], last.ndim + 1
    mine, other = last.unsqueeze(-1), last.unsqueeze(-2)  # element i along -2, element j along -1
    here, there = _positions(last, n, rank - 2, rank), _positions(last, n, rank - 1, rank)
    before = _precedes(other, mine, descending) | (_ties(other, mine) & (there < here))
    ranks = before.sum(-1)  # (..., n): how many come before each element
    chosen = ranks.unsqueeze(-2) == _positions(last, k, rank - 2, rank)  # (..., k, n): rank k at i
    return where(chosen, last.unsqueeze(-2), _lowest(last.dtype)).amax(-1), where(chosen, there, 0).sum(-1)


def _first_value(last: TensorBase, candidate: TensorBase, descending: bool) -> TensorBase:
    """The first value in order among the ``candidate`` elements of each row (keepdim): NaN is
    the greatest, so a least value is NaN only when nothing else is left."""
    if descending:
        return where(candidate, last, _lowest(last.dtype)).amax(-1, keepdim=True)
    if not dtypes.is_floating(last.dtype):
        return where(candidate, last, np.iinfo(last.dtype).max).amin(-1, keepdim=True)
    number = candidate & (last == last)
    least = where(number, last, np.inf).amin(-1, keepdim=True)
    return where(number.any(-1, keepdim=True), least, np.nan)


def _selected(last: TensorBase, k: int, descending: bool) -> tuple[TensorBase, TensorBase]:
    """The first ``k`` along the last dim one after another (the module docstring)."""
    n = last.shape[-1]
    positions = _positions(last, n, last.ndim - 1, last.ndim)
    values, indices = [], []
    candidate = positions >= 0  # every element
    for _ in range(k):
        best = _first_value(last, candidate, descending)
        index = where(candidate & _ties(last, best), positions, n).amin(-1, keepdim=True)
        values.append(where(positions == index, last, _lowest(last.dtype)).amax(-1, keepdim=True))  # with its sign
        indices.append(index)
        candidate = _precedes(best, last, descending) | (_ties(best, last) & (positions > index))
    return cat(values, -1), cat(indices, -1)


def sort(x: TensorBase, dim: Any = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """torch.sort: the values along ``dim`` in order and their positions (a stable order, which
    torch promises only with ``stable=True``)."""
    return _ordered(x, dim, None, bool(descending), "sort")


def argsort(x: TensorBase, dim: Any = -1, descending: bool = False, stable: bool = False) -> TensorBase:
    """torch.argsort: the positions of :func:`sort`."""
    return sort(x, dim, descending, stable).indices


def topk(x: TensorBase, k: int, dim: Any = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """torch.topk: the ``k`` largest (smallest) values along ``dim`` and their positions, in order
    (torch's order when ``sorted``; any order is torch's otherwise)."""
    return _ordered(x, dim, as_int(k, "topk's k"), bool(largest), "topk")
