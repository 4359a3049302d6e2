"""Indexing by tensors for traced programs: torch's ``gather``, ``scatter``, ``scatter_add``,
``scatter_reduce``, ``index_select``, ``slice_scatter`` and ``diagonal_scatter``.

A data-dependent index is never a memory index here, so every load stays affine and the
dependence analysis and fusion legality stay exact (spec 7.1-7.2): an op compares the index with
the positions it may name (a one-hot selection) and reduces over them, the way a convolution is
a reduction (:mod:`stax.frontend.ops.nn`).  ``x.gather(1, i)`` over (N, C) is::

    out[n, j] = max over c of (i[n, j] == c ? x[n, c] : -inf)

one reduction over C per output element (a max, which gives the one value exactly, ``-0.0`` and
NaN included; ``scatter_add`` sums, so a position nothing is added to turns ``-0.0`` into ``0.0``), fused like every other reduction (with the softmax's
reductions of a cross-entropy, which read the same rows); its gradient ``scatter`` is a
pointwise ``where``.  The work is that of the dense rows, so a lookup of rows along the first dim
of a table of ``ROWS_BY_ADDRESS`` rows or more (an embedding, ``x[i]``) and its gradient (the
sum of rows by their index) are instead the ``take_rows`` and ``add_rows`` externs of
:mod:`stax.kernels.row_index`, which copy or add each row by its address.  Positions come from an ``iota`` (a ``cumsum`` of
ones).  An index out of range, which torch rejects, raises :class:`~stax.errors.KernelError`:
the result depends on a reduction over the index divided by its in-range flag (integer ``//``
by zero is the kernels' error check), one division per index element.

``slice_scatter`` writes ``src`` into a strided slice: ``src`` placed by ``pad`` (its interior
is the step) where a padded mask is true, ``x`` elsewhere; no index is data-dependent.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from stax import dtypes
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.elementwise import check_operand, where
from stax.frontend.ops.padding import pad_graph
from stax.frontend.shapes import DiagonalFrame, as_int, wrap_dim
from stax.frontend.tracer import TensorBase

_INDEX_DTYPES = ("int64", "int32")

#: a table with at least this many rows is indexed along its first dim by address (stax.kernels.row_index)
ROWS_BY_ADDRESS = 16


def _position_dtype(n: int) -> str:
    """int32 for positions below 2**31 (a vector compares as many of them as float32 lanes)."""
    return "int32" if n < 2 ** 31 else "int64"


def iota(like: TensorBase, n: int) -> TensorBase:
    """The positions ``0, 1, ..., n - 1`` in ``like``'s trace, of ``_position_dtype(n)``."""
    return (like._tracer.constant(1, "int64", (n,)).cumsum(0) - 1).to(_position_dtype(n))


def _positions(index: TensorBase, n: int) -> TensorBase:
    """``index`` in the dtype of ``iota(n)``; an index that wraps is out of range, and raises."""
    return index.to(_position_dtype(n))


def _check_index(op: str, x: TensorBase, dim: int, index: TensorBase, dtypes_: tuple[str, ...] = ("int64",)) -> None:
    if not isinstance(index, TensorBase) or index.dtype not in dtypes_:
        got = index.dtype if isinstance(index, TensorBase) else type(index).__name__
        raise UnsupportedError(f"{op}: the index must be a traced {' or '.join(dtypes_)} tensor, got {got}")


def _checked(out: TensorBase, index: TensorBase, size: int) -> TensorBase:
    """``out``, computed only after every element of ``index`` is checked to lie in ``[0, size)``:
    the smallest index divided by its in-range flag, which divides by zero (KernelError) in the
    kernel of that reduction if one is outside, as torch raises."""
    index = index.long()
    smallest = (index // ((index >= 0) & (index < size)).long()).amin()
    return where(smallest >= 0, out, out)


def _in_range(index: TensorBase, size: int) -> TensorBase:
    """``index`` as int64, divided by its in-range flag: an element outside ``[0, size)`` divides by
    zero, which raises KernelError in the kernel computing it (as torch raises) before an extern of
    :mod:`stax.kernels.row_index` reads it."""
    index = index.long()
    return index // ((index >= 0) & (index < size)).long()


def _is_positive_zero(x: TensorBase) -> bool:
    """Whether ``x`` is the constant +0.0 (broadcast or reshaped)."""
    nodes = x._tracer.graph.nodes
    node = nodes[x._name]
    while node.op in ("expand", "reshape"):
        node = nodes[node.inputs[0]]
    value = node.attr("value")
    return node.op == "constant" and value == 0 and math.copysign(1.0, value) > 0


def _zero(dtype: str) -> Any:
    """The additive identity that leaves every value unchanged (``-0.0`` keeps ``-0.0``)."""
    return -0.0 if dtypes.is_floating(dtype) else False if dtype == "bool" else 0


def _lowest(dtype: str) -> Any:
    """The smallest value of ``dtype``: the identity of ``amax``."""
    if dtype == "bool":
        return False
    return -math.inf if dtypes.is_floating(dtype) else int(np.iinfo(dtype).min)


def _select(hit: TensorBase, values: TensorBase, dim: int) -> TensorBase:
    """The value where ``hit`` along ``dim``, for one hit: their ``amax`` with every other position
    the smallest value, which gives the value exactly (``-0.0`` and NaN included)."""
    return where(hit, values, _lowest(values.dtype)).amax(dim)


def _as_1d(op: str, *tensors: TensorBase) -> tuple[TensorBase, ...]:
    """0-d tensors as 1-d (torch treats a 0-d tensor as one of size 1 in these ops)."""
    return tuple(t.reshape(1) if t.ndim == 0 else t for t in tensors)


def gather(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    """torch.gather: ``out[..., j, ...] = x[..., index[..., j, ...], ...]`` along ``dim``; ``index``
    has ``x``'s rank and at most its sizes in the other dims."""
    _check_index("gather", x, dim, index)
    if x.ndim != index.ndim and not (x.ndim <= 1 and index.ndim <= 1):
        raise ShapeError(f"gather: index {index.shape} and input {x.shape} must have the same number of dimensions")
    zero_d = index.ndim == 0
    xs, ix = _as_1d("gather", x, index)
    d = wrap_dim(dim, xs.ndim, "gather")
    if any(i > s for k, (i, s) in enumerate(zip(ix.shape, xs.shape)) if k != d):
        raise ShapeError(f"gather: index {index.shape} is larger than input {x.shape} outside dimension {d}")
    size = xs.shape[d]
    if ix.numel() and size == 0:
        raise ShapeError(f"gather: index {index.shape} selects from an empty dimension {d} of input {x.shape}")
    if not ix.numel():
        return x._tracer.constant(_zero(x.dtype), x.dtype, index.shape)
    rows = xs[tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(ix.shape))]
    order = [k for k in range(xs.ndim) if k != d] + [d]
    values = rows.permute(order).unsqueeze(d)  # (..., 1, ..., C): every position for each output element
    hit = _positions(ix, size).unsqueeze(-1) == iota(x, size)
    out = _checked(_select(hit, values, -1), ix, size)
    return out.reshape(()) if zero_d else out


def index_select(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    """torch.index_select: the slices ``index[n]`` of ``x`` along ``dim`` (``index`` 1-d or 0-d)."""
    _check_index("index_select", x, dim, index, _INDEX_DTYPES)
    if index.ndim > 1:
        raise ShapeError(f"index_select: the index must be 1-d or 0-d, got shape {index.shape}")
    xs, ix = _as_1d("index_select", x, index)
    d = wrap_dim(dim, xs.ndim, "index_select")
    shape = xs.shape[:d] + ix.shape + xs.shape[d + 1:]
    if d == 0 and xs.shape[0] >= ROWS_BY_ADDRESS:
        table = xs.reshape(xs.shape[0], -1)
        rows = x._tracer.emit("take_rows", (table, _in_range(ix, xs.shape[0])), (ix.shape[0], table.shape[1]),
                              x.dtype)
        return rows.reshape(()) if x.ndim == 0 else rows.reshape(shape)
    spread = ix.reshape((1,) * d + ix.shape + (1,) * (xs.ndim - d - 1)).expand(shape)
    out = gather(xs, d, spread.long())
    return out.reshape(()) if x.ndim == 0 else out


#: torch's scatter_reduce reductions: the identity a position nothing is written to holds, and
#: the reduction of the values written to one position (bool: sum is any, prod is all)
SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _identity(reduce: str, dtype: str) -> Any:
    if reduce in ("sum", "mean"):
        return _zero(dtype)
    if reduce == "prod":
        return True if dtype == "bool" else 1
    return _lowest(dtype) if reduce == "amax" else _highest(dtype)


def _highest(dtype: str) -> Any:
    """The largest value of ``dtype``: the identity of ``amin``."""
    if dtype == "bool":
        return True
    return math.inf if dtypes.is_floating(dtype) else int(np.iinfo(dtype).max)


def _reduce_hits(hit: TensorBase, values: TensorBase, dim: int, reduce: str) -> TensorBase:
    """The ``reduce`` of the values where ``hit`` along ``dim``, in ``values``' dtype."""
    placed = where(hit, values, _identity(reduce, values.dtype))
    method = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "amax", "amin": "amin"}[reduce]
    if values.dtype == "bool":
        method = {"sum": "any", "prod": "all"}.get(method, method)
    return getattr(placed, method)(dim).to(values.dtype)


def _combine(x: TensorBase, placed: TensorBase, reduce: str) -> TensorBase:
    """``x`` and the reduction of the values written to each position, combined by ``reduce``."""
    if reduce in ("sum", "mean"):
        return x | placed if x.dtype == "bool" else x + placed
    if reduce == "prod":
        return x & placed if x.dtype == "bool" else x * placed
    return x.maximum(placed) if reduce == "amax" else x.minimum(placed)


def _mean(total: TensorBase, count: TensorBase) -> TensorBase:
    """``total / count`` in ``total``'s dtype; integers round down, as torch's scatter_reduce."""
    count = count.to(total.dtype)
    return total / count if dtypes.is_floating(total.dtype) else total // count


def _scatter(op: str, x: TensorBase, dim: int, index: TensorBase, src: Any, reduce: str | None,
             include_self: bool = True) -> TensorBase:
    """``x`` with the values ``src`` written at ``index`` along ``dim``: the last write of a
    position wins (``reduce`` None), or the values written to each position are reduced by
    ``reduce`` (one of SCATTER_REDUCTIONS) together with ``x``'s own value if ``include_self``."""
    _check_index(op, x, dim, index)
    check_operand(src, op)
    if reduce is not None and reduce not in SCATTER_REDUCTIONS:
        raise UnsupportedError(f"{op}: reduce={reduce!r} is not supported; use one of {', '.join(SCATTER_REDUCTIONS)}")
    if reduce == "mean" and x.dtype == "bool":
        raise UnsupportedError(f"{op}: reduce='mean' of a bool tensor is not supported (as torch); cast it first")
    if x.ndim != index.ndim and not (x.ndim <= 1 and index.ndim <= 1):
        raise ShapeError(f"{op}: index {index.shape} and input {x.shape} must have the same number of dimensions")
    xs, ix = _as_1d(op, x, index)
    d = wrap_dim(dim, xs.ndim, op)
    if isinstance(src, TensorBase):
        (ss,) = _as_1d(op, src)
        if ss.ndim != ix.ndim or any(i > s for i, s in zip(ix.shape, ss.shape)):
            raise ShapeError(f"{op}: index {index.shape} is larger than src {src.shape}")
        values = ss[tuple(slice(0, n) for n in ix.shape)].to(x.dtype)
    else:
        values = x._tracer.constant(src, x.dtype, ix.shape)
    if any(i > s for k, (i, s) in enumerate(zip(ix.shape, xs.shape)) if k != d):
        raise ShapeError(f"{op}: index {index.shape} is larger than input {x.shape} outside dimension {d}")
    if not ix.numel():
        return x.clone()
    size = xs.shape[d]
    if size == 0:
        raise ShapeError(f"{op}: index {index.shape} writes into an empty dimension {d} of input {x.shape}")
    # positions c of the output along a new axis d, the index's own positions j at d + 1
    positions = iota(x, size).reshape((size,) + (1,) * (ix.ndim - d))
    hit = _positions(ix, size).unsqueeze(d) == positions
    values = values.unsqueeze(d)
    if reduce is None and ix.shape[d] > 1:  # the last write of a position wins, as torch's CPU loop
        order = iota(x, ix.shape[d]).reshape((ix.shape[d],) + (1,) * (ix.ndim - d - 1))
        last = where(hit, order, -1).amax(d + 1, keepdim=True)
        hit = hit & (order == last)
    placed = _select(hit, values, d + 1) if reduce is None else _reduce_hits(hit, values, d + 1, reduce)
    low, high = [0] * xs.ndim, [s - n for s, n in zip(xs.shape, placed.shape)]

    def padded(t: TensorBase, value: Any) -> TensorBase:
        return pad_graph(t, low, high, [0] * xs.ndim, value)
    placed = padded(placed, _zero(x.dtype) if reduce is None else _identity(reduce, x.dtype))
    count = padded(hit.sum(d + 1), 0) if reduce == "mean" else None
    if reduce is not None and include_self:
        out = _combine(xs, placed, reduce)
        out = _mean(out, count + 1) if reduce == "mean" else out
    else:
        if reduce == "mean":
            placed = _mean(placed, count.clamp(min=1))
        out = where(padded(hit.any(d + 1), False), placed, xs)
    out = _checked(out, ix, size)
    return out.reshape(()) if x.ndim == 0 else out


def add_rows(x: TensorBase, index: TensorBase, values: TensorBase) -> TensorBase:
    """``x`` plus, at each row ``index[i]`` of its first dim, the slice ``values[i]`` (an
    embedding's and ``x[i]``'s gradient, torch's ``index_put`` with ``accumulate``): by address for
    a table of ``ROWS_BY_ADDRESS`` rows or more of floats, else ``scatter_add``."""
    rows = x.shape[0]
    if rows >= ROWS_BY_ADDRESS and x.dtype in ("float32", "float64") and index.ndim == 1:
        flat = values.to(x.dtype).reshape(index.shape[0], -1)
        sums = x._tracer.emit("add_rows", (flat, _in_range(index, rows)), (rows, flat.shape[1]), x.dtype,
                              rows=rows).reshape(x.shape)
        return sums if _is_positive_zero(x) else x + sums  # the sums start at +0.0: adding +0.0 changes no bit
    spread = index.reshape(index.shape + (1,) * (x.ndim - 1)).expand(index.shape + x.shape[1:])
    return scatter_add(x, 0, spread, values.to(x.dtype))


def scatter(x: TensorBase, dim: int, index: TensorBase, src: Any, reduce: str | None = None) -> TensorBase:
    """torch.scatter (out of place): ``x`` with ``out[..., index[..., j, ...], ...] = src[..., j, ...]``;
    ``src`` a tensor or a scalar; of two writes to one position the last wins.  ``reduce='add'``
    or ``'multiply'`` adds or multiplies the values into ``x`` instead (torch's legacy form of
    :func:`scatter_reduce`)."""
    legacy = {None: None, "add": "sum", "multiply": "prod"}
    if reduce not in legacy:
        raise UnsupportedError(f"scatter: reduce={reduce!r} is not supported; use 'add' or 'multiply' (as torch), "
                               "or scatter_reduce")
    return _scatter("scatter", x, dim, index, src, legacy[reduce])


def scatter_add(x: TensorBase, dim: int, index: TensorBase, src: TensorBase) -> TensorBase:
    """torch.scatter_add (out of place): ``x`` plus every ``src[..., j, ...]`` at ``index[..., j, ...]``."""
    return _scatter("scatter_add", x, dim, index, src, "sum")


def scatter_reduce(x: TensorBase, dim: int, index: TensorBase, src: TensorBase, reduce: str, *, include_self: bool = True
                   ) -> TensorBase:
    """torch.scatter_reduce (out of place): the values ``src[..., j, ...]`` written to each
    position ``index[..., j, ...]`` reduced by ``reduce`` ('sum', 'prod', 'mean', 'amax',
    'amin'), with ``x``'s value there when ``include_self``; a position nothing is written to
    keeps ``x``'s value.  An integer mean rounds down, as torch."""
    if not isinstance(src, TensorBase):
        raise UnsupportedError(f"scatter_reduce: src must be a traced tensor, got {type(src).__name__}")
    return _scatter("scatter_reduce", x, dim, index, src, reduce, include_self)


def slice_scatter(x: TensorBase, src: TensorBase, dim: int = 0, start: int | None = None, end: int | None = None,
                  step: int = 1) -> TensorBase:
    """torch.slice_scatter: ``x`` with ``x[..., start:end:step, ...]`` replaced by ``src``."""
    if not isinstance(src, TensorBase):
        raise UnsupportedError(f"slice_scatter: src must be a traced tensor, got {type(src).__name__}")
    if x.ndim == 0:
        raise ShapeError("slice_scatter: the input must have at least one dimension")
    d = wrap_dim(dim, x.ndim, "slice_scatter")
    step = as_int(step, "slice_scatter: step")
    if step <= 0:
        raise UnsupportedError(f"slice_scatter: step must be positive, got {step}")
    first, stop, _ = slice(start, end, step).indices(x.shape[d])
    count = len(range(first, stop, step))
    expected = x.shape[:d] + (count,) + x.shape[d + 1:]
    if src.shape != expected:
        raise ShapeError(f"slice_scatter: src of shape {src.shape} does not match the slice's shape {expected}")
    if count == 0:
        return x.clone()
    starts, steps = [0] * x.ndim, [1] * x.ndim
    starts[d], steps[d] = first, step
    return box_scatter(x, src, starts, steps)


def diagonal_scatter(x: TensorBase, src: TensorBase, offset: int = 0, dim1: int = 0, dim2: int = 1) -> TensorBase:
    """torch.diagonal_scatter: ``x`` with ``x.diagonal(offset, dim1, dim2)`` replaced by ``src``, as
    slice scatters into the block that holds the diagonal (``DiagonalFrame``)."""
    if not isinstance(src, TensorBase):
        raise UnsupportedError(f"diagonal_scatter: src must be a traced tensor, got {type(src).__name__}")
    frame = DiagonalFrame.of(x.shape, offset, dim1, dim2, "diagonal_scatter")
    permuted = x.permute(frame.order)
    expected = permuted.shape[:-2] + (frame.length,)
    if src.shape != expected:
        raise ShapeError(f"diagonal_scatter: src of shape {src.shape} does not match the diagonal's shape {expected}")
    if math.prod(src.shape) == 0:
        return x.clone()
    rows = permuted[..., frame.row:, :]
    block = rows[..., frame.column:]
    flat = block.reshape(block.shape[:-2] + (frame.rows * frame.columns,))
    flat = slice_scatter(flat, src, -1, 0, frame.length * (frame.columns + 1), frame.columns + 1)
    rows = slice_scatter(rows, flat.reshape(block.shape), -1, frame.column)
    return slice_scatter(permuted, rows, -2, frame.row).permute(frame.inverse)


def box_scatter(x: TensorBase, src: TensorBase, starts: Sequence[int], steps: Sequence[int] | None = None) -> TensorBase:
    """``x`` with the strided box ``x[starts[0]::steps[0], ...]`` of ``src``'s shape replaced by
    ``src`` (a non-empty ``src`` of ``x``'s rank that fits): ``src`` placed by ``pad`` where a
    padded mask is true, ``x`` elsewhere."""
    steps = list(steps) if steps is not None else [1] * x.ndim
    low, interior = list(starts), [k - 1 for k in steps]
    high = [n - lo - (m - 1) * k - 1 for n, lo, m, k in zip(x.shape, low, src.shape, steps)]
    if src.ndim != x.ndim or min(high + low) < 0 or min(src.shape) < 1:
        raise ShapeError(f"box_scatter: src of shape {src.shape} at {tuple(starts)} (steps {tuple(steps)}) does not "
                         f"fit inside {x.shape}")
    placed = pad_graph(src.to(x.dtype), low, high, interior, _zero(x.dtype))
    written = pad_graph(x._tracer.constant(True, "bool", src.shape), low, high, interior, False)
    return where(written, placed, x)
