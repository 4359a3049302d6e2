"""The common loop nest of a block of compatible nodes (Definition 7.2), and each node's loop
variables expressed in it.

A block's frame has outer ranges (product n, run in parallel) and inner ranges (product r; empty
for a pointwise-only block).  The frame's ranges are the common refinement of the members'
ranges (the CPU keeps full ranges; example 7.1's row sum ``((64,), (128,))`` and division
``((64, 128), ())`` share the outer loop of 64).  When members' ranges have no common
refinement (possible under the element-count rule), the frame falls back to one flat loop and
members index it through floor division and modulo.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from ..indexing import Index, contiguous_strides, floordiv, linear_index, mod
from ..ir import ComputedBuffer


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


@dataclass
class Frame:
    outer: tuple[int, ...]
    inner: tuple[int, ...]

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

    def mapping(self, node: ComputedBuffer) -> dict[str, Index]:
        """Each of ``node``'s loop variables as an index over this frame's variables."""
        n, r = prod(self.outer), prod(self.inner)
        outer_flat = self._flat(self.outer_vars, self.outer)
        inner_flat = self._flat(self.inner_vars, self.inner)
        if node.reduction:
            values = self._unflatten(outer_flat, node.ranges) + self._unflatten(inner_flat, node.reduction_ranges)
        elif prod(node.ranges) == n and (r > 1 or not self.inner):
            values = self._unflatten(outer_flat, node.ranges)
        else:
            values = self._unflatten(outer_flat * r + inner_flat, node.ranges)
        return dict(zip(node.pointwise_vars + node.reduction_vars, values))

    def uses_inner(self, node: ComputedBuffer) -> bool:
        """True when the node runs an inner loop (a reduction, or pointwise over n*r elements)."""
        return bool(self.inner) and (node.reduction is not None or prod(node.ranges) != prod(self.outer))


def make_frame(nodes: Sequence[ComputedBuffer]) -> Frame:
    """The frame of a block of pairwise-compatible computed buffers."""
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
