"""Scan blocks (seed 7.7): one pass along the carried dim per outer point, a running accumulator
per scan.  A scan too narrow to parallelize over its outer points (a 1-D scan) is blocked through
associativity: each thread reduces its chunk, one thread scans the chunk totals (exclusive), then
each thread runs its chunk from its offset (reduce-then-scan)."""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from stax.dtypes import CPP_TYPE
from stax.ir.loops import loads
from stax.codegen.exprs import literal, reduction_identity
from stax.codegen.kernel_parts import LoadContext, Member

if TYPE_CHECKING:
    from stax.codegen.kernel import BlockKernel


class BlockedScan:
    """The scan forms of one block: a scan pass (``scan_pass``, also the plain form's), and the
    blocked scan (``applies``, its chunk totals in ``shared_lines``, ``body``).  It reads the
    block's analysis and emits through its ``kernel`` builder."""

    def __init__(self, kernel: BlockKernel):
        self.kernel = kernel

    def scan_pass(self, members: list[Member], init: dict[str, str], lo: str, hi: str, store: bool,
                   ind: str, lines: list[str]) -> dict[str, str]:
        """One scalar pass along the carried loop ``y0`` in ``[lo, hi)``: each scan's accumulator
        starts at ``init`` and is stored as it runs; with ``store`` False nothing is stored (the
        chunk totals of the blocked scan).  Returns the accumulators' names."""
        acc = {}
        for m in self.kernel.scans:
            acc[m.name] = self.kernel.emit.state.fresh("tmp_acc")
            lines.append(f"{ind}{CPP_TYPE[m.buf.dtype]} {acc[m.name]} = {init[m.name]};")
        lines += [ind + self.kernel.loop("y0", lo, hi), ind + "{"]
        local = LoadContext()
        printer = self.kernel.printer(False, None, local, lines, ind + "    ")
        for m in members:
            value = printer(m.body)
            if m.buf.scan:
                lines.append(f"{ind}    {acc[m.name]} = stax::r_{m.buf.scan}({acc[m.name]}, {value});")
                value = acc[m.name]
            if store:
                self.kernel.store(m, value, False, None, ind + "    ", lines)
            local.local[m.buf.name] = value
        lines.append(ind + "}")
        return acc

    def applies(self) -> bool:
        """A scan block too narrow to parallelize over its outer points, long enough to split, and
        whose scans do not read each other (a chunk total needs only the block's inputs)."""
        f = self.kernel.frame
        if not self.kernel.scans or prod(f.outer) != 1 or self.kernel.threads < 2 or f.inner[0] < self.kernel.tuning.blocked_scan_min \
                or self.kernel.sequential_reason:
            return False
        scans = {m.buf.name for m in self.kernel.scans}
        feeds: dict[str, set[str]] = {}
        for m in self.kernel.members:
            direct = {ld.buffer for ld in loads(m.body) if ld.buffer in self.kernel.produced}
            feeds[m.buf.name] = direct.union(*(feeds[b] for b in direct))
        return not any(feeds[m.buf.name] & scans for m in self.kernel.scans)

    def body(self) -> list[str]:
        """Reduce each chunk, scan the chunk totals (exclusive) on one thread, scan each chunk
        from its offset: associativity parallelizes the carried dim (seed 7.7)."""
        n, chunks = self.kernel.frame.inner[0], self.kernel.threads
        last = max(i for i, m in enumerate(self.kernel.members) if m.buf.scan)
        bounds = [f"    int64_t lo = c * {n} / {chunks}, hi = (c + 1) * {n} / {chunks};"]
        identity = {m.name: literal(reduction_identity(m.buf.scan, m.buf.dtype), m.buf.dtype, False)
                    for m in self.kernel.scans}
        lines = ["// pass 1: each chunk's total", "#pragma omp for schedule(dynamic, 1)",
                 self.kernel.loop("c", "0", str(chunks)), "{", *bounds]
        totals = self.scan_pass(self.kernel.members[:last + 1], identity, "lo", "hi", False, "    ", lines)
        lines += [f"    {m.buf.name}_chunks[c + 1] = {totals[m.name]};" for m in self.kernel.scans] + ["}"]
        lines += ["// exclusive scan of the chunk totals", "#pragma omp single", "{"]
        for m in self.kernel.scans:
            chunk = f"{m.buf.name}_chunks"
            lines += [f"    {chunk}[0] = {identity[m.name]};",
                      "    " + self.kernel.loop("c", "1", str(chunks + 1)),
                      f"        {chunk}[c] = stax::r_{m.buf.scan}({chunk}[c - 1], {chunk}[c]);"]
        lines += ["}", "// pass 2: each chunk from its offset", "#pragma omp for schedule(dynamic, 1)",
                  self.kernel.loop("c", "0", str(chunks)), "{", *bounds]
        self.scan_pass(self.kernel.members, {m.name: f"{m.buf.name}_chunks[c]" for m in self.kernel.scans}, "lo", "hi", True,
                        "    ", lines)
        return lines + ["}"]

    def shared_lines(self) -> list[str]:
        """The blocked scan's chunk totals, at function scope (shared by the threads)."""
        return [f"{CPP_TYPE[m.buf.dtype]} {m.buf.name}_chunks[{self.kernel.threads + 1}];" for m in self.kernel.scans]
