"""Which pairs of scheduler nodes may share a kernel (``can_fuse``'s legality, never a heuristic).

- Definition 7.2, iteration-space compatibility, in two variants: ``"gpu"`` compares element
  counts only; ``"cpu"`` keeps full ranges and requires the loops to nest (outer-loop fusion,
  examples 7.1 and 7.2).
- Propositions 7.2/7.3: a consumer may join its producer only when, in the common loop frame,
  every read of the producer's buffer uses exactly the producer's write index (distance 0: the
  kernels are parallel over the outer loop).  The same rule guards a reader of an input's old
  value against the in-place update of that input.
- Extern calls never fuse.

Every rejection is a reason string ``"<name>: <detail>"`` (TorchInductor's WhyNoFuse), which the
fusion log and the experiments read.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from ..ir import ComputedBuffer
from .frame import boundaries, make_frame, refinement

if TYPE_CHECKING:
    from .nodes import Scheduler, SchedulerNode


def _counts(buf: ComputedBuffer) -> tuple[int, int]:
    return prod(buf.ranges), prod(buf.reduction_ranges) if buf.reduction else 1


def compatible(a: ComputedBuffer, b: ComputedBuffer, rule: str) -> str | None:
    """Definition 7.2; returns the reason they are not compatible, or None."""
    (na, ra), (nb, rb) = _counts(a), _counts(b)
    if a.reduction and b.reduction:
        ok = na == nb and ra == rb
    elif not a.reduction and not b.reduction:
        ok = na == nb
    else:
        pw, red = (a, b) if b.reduction else (b, a)
        n, r = _counts(red)
        ok = prod(pw.ranges) in (n, n * r)
    if not ok:
        return f"incompatible_groups: {(a.ranges, a.reduction_ranges)} vs {(b.ranges, b.reduction_ranges)} (Definition 7.2)"
    if rule == "gpu":
        return None
    if not _loops_nest(a, b):
        return (f"outer_loops_differ: {(a.ranges, a.reduction_ranges)} vs {(b.ranges, b.reduction_ranges)} "
                "have no common loop nest (outer-loop fusion depth 0)")
    return None


def _loops_nest(a: ComputedBuffer, b: ComputedBuffer) -> bool:
    """CPU rule: the two loop nests have a common refinement, outer and inner separately."""
    reds = [x for x in (a, b) if x.reduction]
    if not reds:
        return refinement([a.ranges, b.ranges]) is not None
    n = prod(reds[0].ranges)
    for x in (a, b):
        if not x.reduction and prod(x.ranges) != n and n not in boundaries(x.ranges) and n != 1:
            return False
    frame_outer = [x.ranges for x in (a, b) if x.reduction or prod(x.ranges) == n]
    return refinement(frame_outer) is not None and refinement([x.reduction_ranges for x in reds]) is not None


def _same_index_in_frame(writer: ComputedBuffer, reader: ComputedBuffer, buffer: str, rule: str) -> bool:
    frame = make_frame([writer, reader])
    ranges = frame.var_ranges
    write = writer.store_index.subs(frame.mapping(writer), ranges)
    reader_map = frame.mapping(reader)
    return all(ld.index.subs(reader_map, ranges) == write for ld in reader.reads() if ld.buffer == buffer)


def why_no_fuse(a: "SchedulerNode", b: "SchedulerNode", scheduler: "Scheduler", rule: str = "cpu") -> str | None:
    """The reason ``a`` and ``b`` may not share a kernel, or None when they may."""
    if a.kind == "extern" or b.kind == "extern":
        return "extern: extern calls read and write whole buffers (StarDep) and run alone"
    reason = compatible(a.buffer, b.buffer, rule)
    if reason:
        return reason
    for writer, reader in ((a, b), (b, a)):
        target = writer.buffer.aliases or writer.buffer_name
        if target in reader.read_names:
            if not _same_index_in_frame(writer.buffer, reader.buffer, target, rule):
                what = "in-place update" if writer.buffer.aliases else "dependence"
                return (f"dependence_distance: {reader.name} reads {target} at an index other than {writer.name}'s "
                        f"write index ({what} distance not zero, Proposition 7.3)")
    return None
