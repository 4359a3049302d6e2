"""The common loop nest of a block of compatible nodes (Definition 7.2), and each node's loop
variables expressed in it.

A block's frame has outer ranges (product n, run in parallel) and inner ranges (product r; empty
for a pointwise-only block).  The frame's ranges are the common refinement of the members'
ranges (the CPU keeps full ranges; example 7.1's row sum ``((64,), (128,))`` and division
``((64, 128), ())`` share the outer loop of 64).  When members' ranges have no common
refinement (possible under the element-count rule), the frame falls back to one flat loop and
members index it through floor division and modulo.

A *shape frame* aligns members by their tensor shapes instead of their element counts (spec 7.7):

- a block with a scan runs the scan's non-carried dims as outer loops and the carried dim as
  the one inner loop (``y0``), its members' elements at their own coordinates;
- a pointwise block whose members' shapes differ (the sequential rule's embedding of a shifted
  slice, ``legality``) runs the largest shape; a smaller member is aligned to its end (its
  element ``c`` runs at frame point ``c + offset``, ``offset = largest - own shape``) and runs
  only where the frame point is inside it (``guard``).  End alignment puts ``y = x[1:] + x[:-1]``'s
  element ``j`` at frame point ``j + 1``, after ``x[j]`` and ``x[j + 1]``: distances ``<= 0``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from math import prod
from typing import Sequence

from stax.ir.indexing import Index, contiguous_strides, floordiv, linear_index, mod
from stax.ir.loops import ComputedBuffer


def boundaries(ranges: Sequence[int]) -> list[int]:
    """Element counts at each loop boundary, from the outside in: (64, 128) -> [64, 8192]."""
    out, acc = [], 1
    for r in ranges:
        acc *= r
        out.append(acc)
    return out


def refinement(range_lists: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The coarsest ranges that refine every list (all of the same total), or None when the
    loop boundaries do not nest: (8192,) and (64, 128) -> (64, 128); (6, 4) and (4, 6) -> None."""
    total = prod(range_lists[0]) if range_lists else 1
    if total == 0:
        return tuple(range_lists[0])
    points = sorted({b for rl in range_lists for b in boundaries([r for r in rl if r != 1])} | {total})
    if any(b % a for a, b in zip(points, points[1:])):
        return None
    return tuple(b // a for a, b in zip([1] + points, points) if b != a)


def shape_groups(buf: ComputedBuffer) -> list[list[int]] | None:
    """The dims of ``buf.shape`` each of its pointwise loops runs over (size-1 dims in none), or
    None when its loops are not a coarsening of its shape."""
    dims = [d for d, size in enumerate(buf.shape) if size != 1]
    groups: list[list[int]] = []
    for size in buf.ranges:
        group, acc = [], 1
        while dims and acc < size:
            acc *= buf.shape[dims[0]]
            group.append(dims.pop(0))
        if acc != size:
            return None
        groups.append(group)
    return groups if not dims else None


@dataclass
class Frame:
    outer: tuple[int, ...]
    inner: tuple[int, ...]
    dims: tuple[str | None, ...] = ()  # shape frame: the frame variable of each shape dim
    offsets: dict[str, tuple[int, ...]] = field(default_factory=dict)  # shape frame: member -> offset

    @property
    def outer_vars(self) -> list[str]:
        return [f"x{i}" for i in range(len(self.outer))]

    @property
    def inner_vars(self) -> list[str]:
        return [f"y{i}" for i in range(len(self.inner))]

    @property
    def var_ranges(self) -> dict[str, int]:
        return dict(zip(self.outer_vars + self.inner_vars, self.outer + self.inner))

    def _flat(self, names: list[str], ranges: Sequence[int]) -> Index:
        return linear_index([Index.var(v) for v in names], contiguous_strides(ranges))

    def _unflatten(self, flat: Index, ranges: Sequence[int]) -> list[Index]:
        vr = self.var_ranges
        # a range of 0 is an empty loop nest: its body never runs, any index will do
        return [mod(floordiv(flat, st, vr), size, vr) if size else Index.constant(0)
                for st, size in zip(contiguous_strides(ranges), ranges)]

    def _coordinates(self, node: ComputedBuffer) -> list[Index]:
        """The node's shape coordinates at the current frame point (shape frames)."""
        offset = self.offsets.get(node.name, (0,) * len(self.dims))
        return [Index.var(v) + -o if v else Index.constant(0) for v, o in zip(self.dims, offset)]

    def guard(self, node: ComputedBuffer) -> list[str]:
        """Conditions under which a smaller member of a shape frame runs (empty: always)."""
        offset = self.offsets.get(node.name, ())
        return [f"{v} >= {o}" for v, o in zip(self.dims, offset) if o]

    def mapping(self, node: ComputedBuffer) -> dict[str, Index]:
        """Each of ``node``'s loop variables as an index over this frame's variables."""
        if self.dims:
            coords = self._coordinates(node)
            if node.scan:
                others = [c for d, c in enumerate(coords) if d != node.scan_dim]
                return dict(zip(node.pointwise_vars + ["r0"], others + [coords[node.scan_dim]]))
            values = [linear_index([coords[d] for d in group], contiguous_strides([node.shape[d] for d in group]))
                      for group in shape_groups(node)]
            return dict(zip(node.pointwise_vars, values))
        values = _loop_values(self.outer, self.inner, node.ranges, node.reduction_ranges, node.reduction is not None)
        return dict(zip(node.pointwise_vars + node.reduction_vars, values))

    def uses_inner(self, node: ComputedBuffer) -> bool:
        """True when the node runs an inner loop (a reduction or scan, or pointwise over n*r elements)."""
        if self.dims:
            return bool(self.inner) and any("y0" in ix.variables() for ix in self.mapping(node).values())
        return bool(self.inner) and (node.reduction is not None or prod(node.ranges) != prod(self.outer))


@functools.lru_cache(maxsize=4096)
def _loop_values(outer: tuple[int, ...], inner: tuple[int, ...], ranges: tuple[int, ...],
                 reduction_ranges: tuple[int, ...], reduction: bool) -> tuple[Index, ...]:
    """A node's loop variables as indices over a (not shape) frame's: they depend on the ranges
    alone, and legality and code generation ask for them pair by pair (indices are immutable)."""
    frame = Frame(outer, inner)
    outer_flat = frame._flat(frame.outer_vars, outer)
    inner_flat = frame._flat(frame.inner_vars, inner)
    if reduction:
        return tuple(frame._unflatten(outer_flat, ranges) + frame._unflatten(inner_flat, reduction_ranges))
    if prod(ranges) == prod(outer) and (prod(inner) > 1 or not inner):
        return tuple(frame._unflatten(outer_flat, ranges))
    return tuple(frame._unflatten(outer_flat * prod(inner) + inner_flat, ranges))


def shape_frame(nodes: Sequence[ComputedBuffer], carried: int | None = None) -> Frame:
    """Members aligned by shape (see the module docstring); dim ``carried`` (a scan's) is the inner loop."""
    largest = tuple(max(b.shape[d] for b in nodes) for d in range(len(nodes[0].shape)))
    dims: list[str | None] = []
    outer: list[int] = []
    for d, size in enumerate(largest):
        if d == carried:
            dims.append("y0")
        elif size != 1:
            dims.append(f"x{len(outer)}")
            outer.append(size)
        else:
            dims.append(None)
    offsets = {b.name: tuple(m - s for m, s in zip(largest, b.shape)) for b in nodes}
    inner = (largest[carried],) if carried is not None else ()
    return Frame(tuple(outer), inner, tuple(dims), offsets)


def needs_shape_frame(nodes: Sequence[ComputedBuffer]) -> bool:
    """A block with a scan, or a pointwise block whose members' element counts differ."""
    if any(b.scan for b in nodes):
        return True
    return not any(b.reduction for b in nodes) and len({prod(b.ranges) for b in nodes}) > 1


def make_frame(nodes: Sequence[ComputedBuffer]) -> Frame:
    """The frame of a block of pairwise-compatible computed buffers."""
    if needs_shape_frame(nodes):
        return shape_frame(nodes, next((b.scan_dim for b in nodes if b.scan), None))
    reductions = [b for b in nodes if b.reduction]
    if not reductions:
        outer = refinement([b.ranges for b in nodes])
        return Frame(outer if outer is not None else (prod(nodes[0].ranges),), ())
    n = prod(reductions[0].ranges)
    r = prod(reductions[0].reduction_ranges)
    outer_lists = [b.ranges for b in reductions] + [b.ranges for b in nodes if not b.reduction and prod(b.ranges) == n]
    inner_lists = [b.reduction_ranges for b in reductions]
    for b in nodes:
        if not b.reduction and prod(b.ranges) != n:
            prefix, acc = [], 1
            for size in b.ranges:
                if acc == n:
                    break
                prefix.append(size)
                acc *= size
            if acc == n:
                outer_lists.append(prefix)
                inner_lists.append(b.ranges[len(prefix):])
    outer, inner = refinement(outer_lists), refinement(inner_lists)
    return Frame(outer if outer is not None else (n,), inner if inner is not None else (r,))
