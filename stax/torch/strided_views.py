"""Views that address a tensor's storage (torch's ``as_strided`` and ``as_strided_scatter``) as the
view ops stax has: reshape, slice, select, permute and expand, so that every load stays affine.

A tensor whose elements fill a run of its storage without gaps or overlaps (contiguous, or a
permutation of a contiguous layout such as a transpose, from any storage offset) is that run
read in storage order: ``storage = x.permute(by decreasing stride).reshape(-1)``.  A view
``(size, stride, offset)`` of it whose strides, sorted in decreasing order, each divide the one
before and leave room for the next dim's extent (``stride[k + 1] * size[k + 1] <= stride[k]``,
so the view's elements do not overlap) is a box of the storage from ``offset`` reshaped to
``(size[0], stride[0] / stride[1], ..., stride[r - 1])``: its leading corner
``[:, :size[1], ..., :size[r - 1], 0]``.  A stride-0 dim is an ``expand`` (a read only: a
scatter into it would write one element twice), a size-1 dim an ``unsqueeze``.

An input with gaps in its storage (a slice along an inner dim, a part of a split) or with
repeats (an ``expand``) is itself such a box when its strides nest: its storage is that box with
zeros in the gaps, and a view that reads it must read only the input's elements (checked on the
view's positions when the program is traced).

``as_strided_scatter`` writes into a copy of the input's whole storage, laid out as the input
(ATen's ``clone_preserve_strides``; contiguous from offset 0 if the input overlaps itself): its
view may reach storage outside the input's elements, and what it writes there is not seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from stax.errors import UnsupportedError
from stax.frontend.tensor import Tensor
from stax.frontend.ops.gather import box_scatter, slice_scatter
from stax.frontend.ops.nn import pad
from stax.ir.indexing import contiguous_strides


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements lie in its storage: element ``i`` at ``offset + sum(i[k] * stride[k])``."""

    stride: tuple[int, ...]
    offset: int


def dense_order(shape: Sequence[int], layout: Layout) -> list[int] | None:
    """The dims of a tensor by decreasing stride if its elements fill ``numel`` consecutive storage
    positions from its offset (each stride the product of the sizes after it in that order), else None."""
    order = sorted(range(len(shape)), key=lambda k: (-layout.stride[k], k))
    expected = contiguous_strides([shape[k] for k in order])
    if all(shape[k] == 1 or layout.stride[k] == s for k, s in zip(order, expected)):
        return order
    return None


def _storage(op: str, x: Tensor, layout: Layout) -> tuple[Tensor, "_Box | None"]:
    """``x``'s storage from its offset as a 1-D tensor, and None: its run (the docstring's
    ``storage``); or, for an input with gaps whose strides nest, the box of the storage that its
    own layout views, zeros in the gaps, and that box."""
    order = dense_order(x.shape, layout)
    if order is not None:
        return x.permute(order).reshape(-1), None
    try:
        hull = _box(op, x.shape, layout.stride, 0, 0, reads=False)
    except UnsupportedError:
        raise UnsupportedError(f"aten.{op}: the input (shape {x.shape}, stride {layout.stride}) overlaps itself or "
                               "its strides do not nest; stax translates as_strided of a tensor whose elements fill "
                               "a run of its storage or a box of it (a slice, a transpose)") from None
    zeros = x._tracer.constant(0, x.dtype, hull.shape)
    return box_scatter(zeros, _to_corner(x, hull), [0] * len(hull.shape)).reshape(-1), hull


def _unstorage(flat: Tensor, shape: tuple[int, ...], layout: Layout, hull: "_Box | None") -> Tensor:
    """The tensor of ``shape`` and ``layout`` whose storage is ``flat`` (inverse of :func:`_storage`)."""
    if hull is not None:
        return _from_corner(_corner_of(flat.reshape(hull.shape), hull), hull, shape)
    order = dense_order(shape, layout)
    back = sorted(range(len(order)), key=order.__getitem__)
    return flat.reshape([shape[k] for k in order]).permute(back)


@dataclass(frozen=True)
class _Box:
    """A view as a box of the storage: the storage from ``start`` (padded to ``length``) reshaped
    to ``shape``, of which the view is the corner ``corner``; ``dims`` are the view's dims that are
    neither size 1 nor stride 0, in decreasing stride, the box's dims before its last."""

    start: int
    length: int
    shape: tuple[int, ...]
    corner: tuple[int, ...]
    dims: tuple[int, ...]


def _box(op: str, size: Sequence[int], stride: Sequence[int], offset: int, numel: int, reads: bool) -> _Box:
    """The box of a storage run of ``numel`` elements that ``(size, stride, offset)`` views (see the
    module docstring), or an UnsupportedError naming why there is none; a view that ``reads`` must
    lie inside the run (the storage around it holds values the input does not give)."""
    where = f"size {list(size)}, stride {list(stride)}, offset {offset}"
    if len(size) != len(stride) or any(s < 0 for s in stride) or any(n < 0 for n in size):
        raise UnsupportedError(f"aten.{op}: {where} is not a view (sizes and strides must pair up, non-negative)")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if reads and (offset < 0 or last >= numel):
        raise UnsupportedError(f"aten.{op}: the view {where} reaches outside the input's storage run of {numel} "
                               "elements (the part of the storage the input covers)")
    dims = tuple(sorted((k for k in range(len(size)) if size[k] > 1 and stride[k] > 0), key=lambda k: -stride[k]))
    strides = [stride[k] for k in dims]
    if any(a % b or size[k] * b > a for a, b, k in zip(strides, strides[1:], dims[1:])):
        raise UnsupportedError(f"aten.{op}: the view {where} is not a box of the storage: its strides in decreasing "
                               "order must each divide the one before, and a dim's extent (size x stride) must not "
                               "pass the stride of the dim before")
    if not dims:
        return _Box(offset, 1, (1,), (1,), ())
    inner = [a // b for a, b in zip(strides, strides[1:])]
    shape = (size[dims[0]], *inner, strides[-1])
    corner = (size[dims[0]], *(size[k] for k in dims[1:]), 1)
    return _Box(offset, math.prod(shape), shape, corner, dims)


def _box_of(flat: Tensor, box: _Box) -> Tensor:
    """The storage ``flat`` from the box's start for its length, in its shape, zeros where the box
    passes either end of ``flat``."""
    run = flat[max(box.start, 0):max(box.start + box.length, 0)]
    before = max(-box.start, 0)
    if run.shape[0] < box.length:
        run = pad(run, (before, box.length - before - run.shape[0]))
    return run.reshape(box.shape)


def _corner_of(boxed: Tensor, box: _Box) -> Tensor:
    return boxed[tuple(slice(0, n) for n in box.corner)]


def _to_corner(t: Tensor, box: _Box) -> Tensor:
    """The elements of ``t`` (a view's values) in the box's corner: its box dims in decreasing
    stride, one element of the others (size 1, or stride 0: repeats)."""
    one = t[tuple(slice(None) if k in box.dims else slice(0, 1) for k in range(t.ndim))]
    return one.permute(box.dims + tuple(k for k in range(t.ndim) if k not in box.dims)).reshape(box.corner)


def _from_corner(corner: Tensor, box: _Box, size: tuple[int, ...]) -> Tensor:
    """The view of ``size`` whose elements the box's ``corner`` holds (inverse of :func:`_to_corner`)."""
    view = corner.reshape(box.corner[:-1]).permute(sorted(range(len(box.dims)), key=box.dims.__getitem__))
    kept = sorted(box.dims)
    for k in range(len(size)):
        if k not in kept:
            view = view.unsqueeze(k)
    return view.expand(size)


def _check_inside(op: str, hull: _Box, size: Sequence[int], stride: Sequence[int], offset: int) -> None:
    """Raise unless every element of the view ``(size, stride, offset)`` is an element of the input
    whose storage box is ``hull`` (a read of a gap would need values the input does not give)."""
    positions = np.array(offset)
    for n, s in zip(size, stride):
        positions = np.add.outer(positions, np.arange(n) * s)
    rest = positions.reshape(-1)
    inside = rest >= 0
    for radix, limit in zip(reversed(hull.shape[1:]), reversed(hull.corner[1:])):
        inside &= rest % radix < limit
        rest = rest // radix
    if not (inside & (rest < hull.corner[0])).all():
        raise UnsupportedError(f"aten.{op}: the view size {list(size)}, stride {list(stride)} reads storage between "
                               "or beyond the input's elements (it is a slice of a larger tensor)")


def as_strided(op: str, x: Tensor, layout: Layout, size: Sequence[int], stride: Sequence[int],
               storage_offset: int | None) -> Tensor:
    """torch's ``as_strided(x, size, stride, storage_offset)`` of ``x`` laid out as ``layout``."""
    size = tuple(size)
    offset = layout.offset if storage_offset is None else storage_offset
    if 0 in size:
        return x._tracer.constant(0, x.dtype, size)
    flat, hull = _storage(op, x, layout)
    if hull is not None:
        _check_inside(op, hull, size, stride, offset - layout.offset)
    box = _box(op, size, stride, offset - layout.offset, flat.shape[0], reads=True)
    return _from_corner(_corner_of(_box_of(flat, box), box), box, size)


def as_strided_scatter(op: str, x: Tensor, layout: Layout, src: Tensor, size: Sequence[int],
                       stride: Sequence[int], storage_offset: int | None) -> Tensor:
    """torch's ``as_strided_scatter``: ``x`` (laid out as ``layout``) with the elements of its view
    ``as_strided(size, stride, storage_offset)`` replaced by ``src``."""
    size = tuple(size)
    offset = layout.offset if storage_offset is None else storage_offset
    if 0 in size:
        return x.clone()
    if any(n > 1 and s == 0 for n, s in zip(size, stride)):
        raise UnsupportedError(f"aten.{op}: the view (size {list(size)}, stride {list(stride)}) repeats elements "
                               "(a stride-0 dim), so the scatter would write one element twice")
    flat, hull = _storage(op, x, layout)
    box = _box(op, size, stride, offset - layout.offset, flat.shape[0], reads=False)
    written = box_scatter(_box_of(flat, box), _to_corner(src.to(x.dtype), box), [0] * len(box.shape)).reshape(-1)
    low, high = max(box.start, 0), min(box.start + box.length, flat.shape[0])
    if low < high:  # else the view writes only storage outside the input's elements
        flat = slice_scatter(flat, written[low - box.start:high - box.start], 0, low, high)
    return _unstorage(flat, x.shape, layout, hull)


def written_layout(shape: Sequence[int], layout: Layout) -> Layout:
    """The layout of the copy that ``as_strided_scatter`` writes into: the input's, or contiguous
    from offset 0 where the input overlaps itself (a stride-0 dim)."""
    if any(n > 1 and s == 0 for n, s in zip(shape, layout.stride)):
        return Layout(contiguous_strides(shape), 0)
    return layout
