"""Per-node indexes of a FusionProblem (Definition 7.3), each built once, in one pass, when first read.

Whole-model graphs hold hundreds of thousands of forbidden pairs (an extern kernel is forbidden
with every other node), so solvers that ask for a node's forbidden partners or touched buffers
read these maps instead of scanning ``problem.forbidden`` or ``problem.buffers`` per node.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from stax.scheduler.problems import FusionProblem


class NodeIndex:
    """Indexes of one problem's nodes, each computed on first use (see the properties)."""

    def __init__(self, problem: FusionProblem):
        self.problem = problem

    @cached_property
    def partners(self) -> dict[str, set[str]]:
        """The nodes each node may not share a kernel with (its forbidden pairs, read both ways)."""
        found: dict[str, set[str]] = {v: set() for v in self.problem.nodes}
        for pair in self.problem.forbidden:
            if pair.a != pair.b:
                found[pair.a].add(pair.b)
                found[pair.b].add(pair.a)
        return found

    @cached_property
    def touches(self) -> dict[str, set[str]]:
        """The names of the buffers each node reads or writes (``FusionProblem.buffers_of``)."""
        found: dict[str, set[str]] = {v: set() for v in self.problem.nodes}
        for buf in self.problem.buffers:
            for v in (buf.producer, *buf.users):
                if v is not None:
                    found[v].add(buf.name)
        return found

    def forbidden_masks(self, position: dict[str, int]) -> list[int]:
        """By position, the bit mask (bit ``position[w]``) of the nodes each node is forbidden
        with, its own bit included when it is paired with itself.  Built with numpy, a row at a
        time, rather than by one big-integer operation per pair."""
        n, pairs = len(position), self.problem.forbidden
        if not pairs:
            return [0] * n
        a = np.fromiter((position[p.a] for p in pairs), np.int64, len(pairs))
        b = np.fromiter((position[p.b] for p in pairs), np.int64, len(pairs))
        rows, cols = np.concatenate([a, b]), np.concatenate([b, a])
        order = np.argsort(rows, kind="stable")
        rows, cols = rows[order], cols[order]
        starts = np.searchsorted(rows, np.arange(n + 1))
        masks, bits = [], np.zeros(n, dtype=bool)
        for i in range(n):
            row = cols[starts[i]:starts[i + 1]]
            bits[row] = True
            masks.append(int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little"))
            bits[row] = False
        return masks
