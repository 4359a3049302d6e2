"""The split-reduction forms (TorchInductor's split reductions), whose chunks reduce into partial
results of their own, combined by a loop over the outputs that then runs the block's epilogue: a
column reduction over many rows with few outputs, each thread reducing a chunk of whole rows read
in memory order (``SplitReduction``); a reduction of fewer rows than threads, its rows cut into
chunks (``ChunkedReduction``)."""
from __future__ import annotations

import copy
from dataclasses import replace
from math import prod

from stax.dtypes import CPP_TYPE, ITEMSIZE
from stax.ir.indexing import Index, contiguous_strides, linear_index
from stax.ir.loops import loads
from stax.lowering import substitute
from stax.codegen.exprs import literal, reduction_identity
from stax.codegen.kernel import BlockKernel
from stax.codegen.kernel_parts import LoadContext, Member, accumulator, fold, local_array
from stax.codegen.tuning import parallel_depth


class PartialResults:
    """What the split-reduction forms share: per-chunk partial results at function scope
    (``shared_lines``), each chunk's slice on cache lines of its own, and their combination at
    each outer point (``combine_parts``).  A form says how many chunks it has and how many inner
    points each reduces (Welford's counts)."""

    def __init__(self, kernel: BlockKernel):
        self.kernel = kernel

    @property
    def chunks(self) -> int:
        """How many chunks of partial results the form has (each form says)."""
        raise NotImplementedError

    def _chunk_rows(self, c: int) -> int:
        """Inner points chunk ``c`` reduces (each form says)."""
        raise NotImplementedError

    def shared_lines(self) -> list[str]:
        """The partial results' arrays, at function scope (shared by the threads): one slice per
        chunk, each starting on a cache line."""
        lines = []
        for m in self.kernel.members:
            for array in self._partial_arrays(m):
                memory, size = f"{array}_memory", self.chunks * self._part_stride(m.buf.dtype)
                lines += [local_array(m.buf.dtype, memory, size + self.kernel.tuning.cache_line // ITEMSIZE[m.buf.dtype],
                                      self.kernel.tuning.stack_array_max_bytes),
                          f"{CPP_TYPE[m.buf.dtype]}* const {array} = {memory}.get() + stax::line_head({memory}.get());"]
        return lines

    def _outer_flat(self) -> Index:
        """The outer point's position in a split reduction's partial results."""
        f = self.kernel.frame
        return linear_index([Index.var(v) for v in f.outer_vars], contiguous_strides(f.outer))

    def _part_stride(self, dtype: str) -> int:
        """Elements from one chunk's partial results to the next: the outer points rounded up to
        whole cache lines (the results start on a line), so that two threads never write one line."""
        per_line = self.kernel.tuning.cache_line // ITEMSIZE[dtype]
        return -(-prod(self.kernel.frame.outer) // per_line) * per_line

    def _partial_arrays(self, m: Member) -> list[str]:
        """A split reduction's arrays of partial results of ``m``, one slice per chunk: its
        values, and for m2 the running means (Welford's state)."""
        if not m.inner or not m.buf.reduction:
            return []
        return [f"{m.buf.name}_parts"] + ([f"{m.buf.name}_means"] if m.buf.reduction == "m2" else [])

    def combine_parts(self, phase: list[Member], vector: bool, ind: str, lines: list[str], ctx: LoadContext) -> None:
        """A split reduction's results at the current outer point: its chunks' partial results
        combined, stored and kept for the epilogue (the pass's other members were stored by the chunks)."""
        flat = self._outer_flat()
        for m in (m for m in phase if m.buf.reduction):
            stride, dtype = self._part_stride(m.buf.dtype), CPP_TYPE[m.buf.dtype]

            def read(array: str, c: int) -> str:
                return f"stax::vload({array} + {flat + c * stride})" if vector else f"{array}[{flat + c * stride}]"
            if m.buf.reduction == "m2":  # Welford states of the chunks, merged
                state = accumulator(m.buf, vector)[0]
                values = [f"{state}{{{read(m.buf.name + '_means', c)}, {read(m.buf.name + '_parts', c)}, "
                          f"{dtype}({self._chunk_rows(c)})}}" for c in range(self.chunks)]
            else:
                values = [read(f"{m.buf.name}_parts", c) for c in range(self.chunks)]
            name = self.kernel.emit.state.fresh("tmp_acc")
            lines.append(f"{ind}const auto {name} = stax::result({fold(m.buf.reduction, values)});")
            self.kernel.store(m, name, vector, None, ind, lines)
            ctx.point[m.buf.name] = name
            if vector:
                ctx.vector_point.add(m.buf.name)


class SplitReduction(PartialResults):
    """The split-reduction form of one block: whether it applies, the chunks' pass and the
    combining loops (``body``).  It reads the block's analysis and emits through its ``kernel``
    builder."""

    @property
    def chunks(self) -> int:
        """Chunks of partial results: one per thread."""
        return self.kernel.threads

    def applies(self) -> bool:
        """Whether a block of the outer-vector form runs as a split reduction (see Tuning.split_min_rows):
        one pass of reductions, first in the block (its epilogue reads the combined results)."""
        f = self.kernel.frame
        phases = self.kernel.phases(self.kernel.members)
        passes = [p for p in phases if p[0].inner]
        if len(passes) != 1 or phases[0] is not passes[0] or any(m.buf.dtype == "bool" for m in passes[0]):
            return False
        itemsize = max((ITEMSIZE[ld.dtype] for m in passes[0] for ld in loads(m.body)), default=1)
        columns, rows = prod(f.outer), prod(f.inner)
        partial = columns * sum(ITEMSIZE[m.buf.dtype] * len(self._partial_arrays(m)) for m in passes[0])
        few_strips = columns * itemsize < 2 * self.kernel.threads * self.kernel.tuning.outer_vector_bytes
        knobs = self.kernel.tuning
        return (rows >= knobs.split_min_rows and f.inner[0] >= self.kernel.threads and partial <= knobs.split_partial_bytes
                and (few_strips or columns * rows * itemsize >= knobs.stream_min_bytes))

    def _chunk_rows(self, c: int) -> int:
        """Inner points (rows) chunk ``c`` of a split reduction reduces."""
        f, chunks = self.kernel.frame, self.chunks
        return ((c + 1) * f.inner[0] // chunks - c * f.inner[0] // chunks) * prod(f.inner[1:])

    def body(self, vvar: str) -> list[str]:
        """Chunk ``c`` of the first inner loop's rows reduces, in memory order, into partial
        results ``<buf>_parts[c]`` (as many chunks as threads, each claimed by whichever thread comes
        first, so a late thread's chunk runs on another; all of them on the calling thread when
        the kernel opens no parallel region), Tuning.split_row_step rows a step; m2 keeps its running
        means beside them and counts the rows seen.  Then the outer loops combine the chunks'
        results and run the epilogue (``point``), in parallel where Algorithm 8.1 says."""
        f = self.kernel.frame
        chunks, rows, size = self.chunks, f.inner[0], prod(f.outer)
        reductions = [m for m in self.kernel.members if m.inner]
        lines = ["#pragma omp for schedule(dynamic, 1)", self.kernel.loop("c", "0", str(chunks)), "{",
                 f"    const int64_t lo = c * {rows} / {chunks}, hi = (c + 1) * {rows} / {chunks};"]
        lines += ["    int64_t seen = 0;"] if any(m.buf.reduction == "m2" for m in reductions) else []
        for m in reductions:
            identity = literal(reduction_identity(m.buf.reduction, m.buf.dtype), m.buf.dtype, False)
            for array in self._partial_arrays(m):
                lines += [f"    {CPP_TYPE[m.buf.dtype]}* {array}_chunk = {array} + c * {self._part_stride(m.buf.dtype)};",
                          f"    std::fill_n({array}_chunk, {size}, {identity});"]
        step = self.kernel.tuning.split_row_step
        stepped = f"lo + (hi - lo) / {step} * {step}"
        lines += self._split_rows(reductions, vvar, "lo", stepped, step)
        lines += self._split_rows(reductions, vvar, stepped, "hi", 1)
        lines.append("}")
        depth = parallel_depth(f.outer, self.kernel.threads, size)
        combine = self.kernel.outer_loops(self.kernel.emit.form, vvar, depth)
        return lines + (combine if depth > 0 else ["#pragma omp single", "{", *("    " + t for t in combine), "}"])

    def _split_rows(self, reductions: list[Member], vvar: str, first: str, last: str, step: int) -> list[str]:
        """Rows ``first`` to ``last`` of a split reduction's chunk, ``step`` at a time: the
        elements of the step's rows update each column's partial results, loaded and stored once."""
        f = self.kernel.frame
        flat, ranges, row = self._outer_flat(), f.var_ranges, f.inner_vars[0]
        welford = [m for m in reductions if m.buf.reduction == "m2"]
        inner = [(row, first, last, step)] + [(v, "0", str(r), 1) for v, r in zip(f.inner_vars[1:], f.inner[1:])]
        outer = [(v, "0", str(r), 1) for v, r in zip(f.outer_vars[:-1], f.outer[:-1])]
        lines, ind = [], "    "
        for v, start, stop, by in inner + outer:
            lines += [ind + self.kernel.loop(v, start, stop, by), ind + "{"]
            ind += "    "
            if welford and v == inner[-1][0]:  # new rows: Welford's 1 / n of each
                for m in welford:
                    dtype = CPP_TYPE[m.buf.dtype]
                    inverses = ", ".join(f"{dtype}(1) / {dtype}(seen + {k + 1})" for k in range(step))
                    lines.append(f"{ind}const {dtype} {m.buf.name}_inv[] = {{{inverses}}};")
                lines.append(f"{ind}seen += {step};")
        n = f.outer[-1]
        main_end = n - n % self.kernel.width
        for start, stop, vector in ((0, main_end, True), (main_end, n, False)):
            if stop <= start:
                continue
            lines += [ind + self.kernel.loop(vvar, str(start), str(stop), self.kernel.width if vector else 1), ind + "{"]
            printer = self.kernel.printer(vector, vvar, LoadContext(), lines, ind + "    ")
            for m in reductions:
                values = [printer(m.body if k == 0 else substitute(m.body, {row: Index.var(row) + k}, ranges))
                          for k in range(step)]
                op, part = m.buf.reduction, f"{m.buf.name}_parts_chunk + {flat}"
                if op == "m2":
                    lines.append(f"{ind}    stax::welford_steps({m.buf.name}_means_chunk + {flat}, {part}, "
                                 f"{{{', '.join(values)}}}, {m.buf.name}_inv);")
                    continue
                combined = fold(op, [f"stax::vload({part})" if vector else f"*({part})", fold(op, values)])
                lines.append(f"{ind}    stax::vstore({part}, {combined});" if vector else f"{ind}    *({part}) = {combined};")
            lines.append(ind + "}")
        for _ in inner + outer:
            ind = ind[:-4]
            lines.append(ind + "}")
        return lines


class ChunkedReduction(PartialResults):
    """The chunked-reduction form (TorchInductor splits a whole-tensor reduction the same way): a
    block whose one pass reduces fewer rows than there are threads (a loss's mean, a norm) cuts
    its first inner loop into chunks that the threads claim.  Each chunk reduces into partial
    results of its own, combined in chunk order, so the result does not depend on which thread
    ran which chunk; then one thread runs the block's epilogue (``point``)."""

    def _cut(self) -> tuple[int, int, int]:
        """The chunks' length along the first inner loop, their count and the last one's length:
        Tuning.chunks_per_thread a thread, each a whole number of unrolled vector steps when that
        loop is the vector loop."""
        k, f = self.kernel, self.kernel.frame
        rows = f.inner[0]
        length = -(-rows // (k.threads * k.tuning.chunks_per_thread))
        if len(f.inner) == 1:
            step = k.width * k.tuning.accumulators
            length = -(-length // step) * step
        count = -(-rows // length)
        return length, count, rows - (count - 1) * length

    @property
    def chunks(self) -> int:
        return self._cut()[1]

    def _chunk_rows(self, c: int) -> int:
        """Inner points chunk ``c`` reduces (Welford's count of its state)."""
        full, count, last = self._cut()
        return (last if c == count - 1 else full) * prod(self.kernel.frame.inner[1:])

    def applies(self, form: str) -> bool:
        """Whether a block of the vector or scalar form runs chunked: fewer outer points than
        threads, at least Tuning.chunked_min_points inner points, one pass (first in the block)
        whose reductions are not bool, no shape frame, scratch row, carried buffer or scan, and
        loops that may run in any order."""
        k, f = self.kernel, self.kernel.frame
        if form not in ("vector", "scalar") or k.threads < 2 or not f.inner or f.dims or not 1 <= prod(f.outer) < k.threads:
            return False
        if k.sequential_reason or k.carried or k.scans or k.scratch_rows or prod(f.inner) < k.tuning.chunked_min_points:
            return False
        phases = k.phases(k.members)
        if not phases[0][0].inner or any(p[0].inner for p in phases[1:]):
            return False
        return self.chunks >= 2 and not any(m.buf.dtype == "bool" for m in phases[0] if m.buf.reduction)

    def _view(self, length: int) -> BlockKernel:
        """The kernel as one chunk of ``length`` rows sees it: the chunk number an outer variable of
        its own (the last), the first inner variable counted from the chunk's start."""
        k, f = self.kernel, self.kernel.frame
        full, count, _ = self._cut()
        view = copy.copy(k)
        view.frame = replace(f, outer=f.outer + (count,), inner=(length,) + f.inner[1:])
        first, chunk = f.inner_vars[0], view.frame.outer_vars[-1]
        shift, ranges = {first: Index.var(chunk) * full + Index.var(first)}, view.frame.var_ranges
        view.members = [replace(m, body=substitute(m.body, shift, ranges), store=m.store.subs(shift, ranges))
                        for m in k.members]
        return view

    def body(self, form: str, vvar: str | None) -> list[str]:
        """The chunks (``omp for``, one claimed at a time), each running the pass of ``form`` over
        its rows at every outer point and storing its reductions' partial results; then, on one
        thread, the outer points combine the chunks' results and run the epilogue."""
        k, f = self.kernel, self.kernel.frame
        full, count, last = self._cut()
        chunk, flat = f"x{len(f.outer)}", self._outer_flat()

        def partial(m: Member, value: str) -> str:
            at = f"{chunk} * {self._part_stride(m.buf.dtype)} + {flat}"
            if m.buf.reduction == "m2":  # the chunk's Welford state: its m2 and mean (its count is known)
                return f"{m.buf.name}_parts[{at}] = {value}.m2; {m.buf.name}_means[{at}] = {value}.mean;"
            return f"{m.buf.name}_parts[{at}] = {value};"

        def rows_pass(length: int, ind: str) -> list[str]:
            view = self._view(length)

            def at_point(point_ind: str) -> list[str]:
                lines: list[str] = []
                view.inner_pass(view.phases(view.members)[0], form, vvar, point_ind, lines, LoadContext(), False, [],
                                result=partial)
                return lines
            return [ind + line for line in view.nest(f.outer_vars, list(f.outer), 0, at_point)]
        lines = ["#pragma omp for schedule(dynamic, 1)", k.loop(chunk, "0", str(count)), "{"]
        if last == full:
            lines += rows_pass(full, "    ")
        else:
            lines += [f"    if ({chunk} < {count - 1})", "    {", *rows_pass(full, "        "), "    }",
                      "    else", "    {", *rows_pass(last, "        "), "    }"]
        lines += ["    stax::store_fence();"] if k.streamed else []  # the rows it streamed, before the barrier
        lines.append("}")
        combine = k.outer_loops("scalar", None, 0)
        return lines + ["#pragma omp single", "{", *("    " + t for t in combine), "}"]
