"""Blocked scans (spec section 7.7).  A plain scan block runs one pass along the carried dim per
outer point (``BlockKernel.scan_pass``).  A scan too narrow to parallelize over its outer points (a 1-D scan) is blocked through
associativity: each thread reduces its chunk, one thread scans the chunk totals (exclusive), then
each thread runs its chunk from its offset (reduce-then-scan)."""
from __future__ import annotations

from math import prod

from stax.dtypes import CPP_TYPE
from stax.ir.loops import loads
from stax.codegen.exprs import literal, reduction_identity
from stax.codegen.kernel import BlockKernel


class BlockedScan:
    """The blocked scan of one block (``applies``, its chunk totals in ``shared_lines``,
    ``body``), in passes of its ``kernel`` builder (``BlockKernel.scan_pass``, which alone is
    the plain scan form)."""

    def __init__(self, kernel: BlockKernel):
        self.kernel = kernel

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
        from its offset: associativity parallelizes the carried dim (spec 7.7)."""
        n, chunks = self.kernel.frame.inner[0], self.kernel.threads
        last = max(i for i, m in enumerate(self.kernel.members) if m.buf.scan)
        bounds = [f"    int64_t lo = c * {n} / {chunks}, hi = (c + 1) * {n} / {chunks};"]
        identity = {m.name: literal(reduction_identity(m.buf.scan, m.buf.dtype), m.buf.dtype, False)
                    for m in self.kernel.scans}
        lines = ["// pass 1: each chunk's total", "#pragma omp for schedule(dynamic, 1)",
                 self.kernel.loop("c", "0", str(chunks)), "{", *bounds]
        totals = self.kernel.scan_pass(self.kernel.members[:last + 1], identity, "lo", "hi", False, "    ", lines)
        lines += [f"    {m.buf.name}_chunks[c + 1] = {totals[m.name]};" for m in self.kernel.scans] + ["}"]
        lines += ["// exclusive scan of the chunk totals", "#pragma omp single", "{"]
        for m in self.kernel.scans:
            chunk = f"{m.buf.name}_chunks"
            lines += [f"    {chunk}[0] = {identity[m.name]};",
                      "    " + self.kernel.loop("c", "1", str(chunks + 1)),
                      f"        {chunk}[c] = stax::r_{m.buf.scan}({chunk}[c - 1], {chunk}[c]);"]
        lines += ["}", "// pass 2: each chunk from its offset", "#pragma omp for schedule(dynamic, 1)",
                  self.kernel.loop("c", "0", str(chunks)), "{", *bounds]
        self.kernel.scan_pass(self.kernel.members, {m.name: f"{m.buf.name}_chunks[c]" for m in self.kernel.scans}, "lo", "hi", True,
                        "    ", lines)
        return lines + ["}"]

    def shared_lines(self) -> list[str]:
        """The blocked scan's chunk totals, at function scope (shared by the threads)."""
        return [f"{CPP_TYPE[m.buf.dtype]} {m.buf.name}_chunks[{self.kernel.threads + 1}];" for m in self.kernel.scans]
