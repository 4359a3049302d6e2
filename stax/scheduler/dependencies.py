"""Read/write extraction and the scheduler node that holds it (spec 7.1, Definition 7.1).

- ``MemoryDep``: a buffer, the normalized index it is accessed at, and the variable ranges;
- ``StarDep``: the whole buffer (extern calls, whose indexing cannot be analysed);
- ``WeakDep``: ordering only: a reader of a buffer runs before the node that updates it in place;
- ``SchedulerNode``: one materialized buffer with its reads, writes and met/unmet dependencies
  (``nodes.Scheduler`` builds them; ``legality`` judges pairs of them).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Union

from stax.ir.indexing import Index, normalize_dependency
from stax.ir.loops import ComputedBuffer, ExternBuffer, ProducedBuffer


@dataclass(frozen=True)
class MemoryDep:
    name: str
    index: Index
    ranges: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        ranges = ", ".join(f"{v}: {s}" for v, s in self.ranges)
        return f"MemoryDep('{self.name}', {self.index}, {{{ranges}}})"


@dataclass(frozen=True)
class StarDep:
    name: str

    def __str__(self) -> str:
        return f"StarDep('{self.name}')"


@dataclass(frozen=True)
class WeakDep:
    name: str

    def __str__(self) -> str:
        return f"WeakDep('{self.name}')"


Dep = Union[MemoryDep, StarDep, WeakDep]


def _memory_dep(name: str, index: Index, buf: ComputedBuffer) -> MemoryDep:
    order = buf.pointwise_vars + buf.reduction_vars
    normalized, ranges = normalize_dependency(index, order, buf.var_ranges)
    return MemoryDep(name, normalized, tuple(ranges.items()))


def read_writes(buf: ProducedBuffer) -> tuple[list[Dep], list[Dep]]:
    """The reads and writes of a buffer's computation, deduplicated, in first-use order."""
    if isinstance(buf, ExternBuffer):
        return [StarDep(n) for n in dict.fromkeys(buf.inputs)], [StarDep(buf.name)]
    reads = list(dict.fromkeys(_memory_dep(ld.buffer, ld.index, buf) for ld in buf.reads()))
    write_name = buf.aliases or buf.name
    return reads, [_memory_dep(write_name, buf.store_index, buf)]


@dataclass
class SchedulerNode:
    name: str
    buffer: ProducedBuffer
    reads: list[Dep]
    writes: list[Dep]
    unmet_dependencies: list[Dep] = field(default_factory=list)
    met_dependencies: list[Dep] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.buffer.kind

    @functools.cached_property
    def read_names(self) -> frozenset[str]:
        """Buffers this node reads (MemoryDep and StarDep)."""
        return frozenset(d.name for d in self.reads)

    @property
    def group(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (tuple(self.buffer.ranges), tuple(self.buffer.reduction_ranges))

    @property
    def buffer_name(self) -> str:
        return self.buffer.name

    def describe(self) -> str:
        """The node as the spec prints it in example 7.1."""
        kind = "ExternKernel" if self.kind == "extern" else "ComputedBuffer"
        lines = [f"{self.name}: SchedulerNode({kind})",
                 f"{self.name}.writes = [{', '.join(map(str, self.writes))}]"]
        if self.unmet_dependencies:
            lines.append(f"{self.name}.unmet_dependencies = [{', '.join(map(str, self.unmet_dependencies))}]")
        if self.met_dependencies:
            lines.append(f"{self.name}.met_dependencies = [{', '.join(map(str, self.met_dependencies))}]")
        lines.append(f"{self.name}.group.iteration = {self.group}")
        return "\n".join(lines)
