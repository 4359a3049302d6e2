"""CPU kernels (spec section 8): the builder of one block's C++ function.

A block's nodes share a loop frame (``scheduler.frame``): an outer loop nest run in parallel by
OpenMP to the depth Algorithm 8.1 chooses, and, for blocks with reductions, per-node inner
loops inside each outer iteration (the outer-loop fusion of listing 7.1).  Buffers whose users
are all in the block never reach memory: per-outer-iteration values stay in locals, and a
pointwise row another inner loop reads stays in a per-thread row buffer.

``BlockKernel`` builds on the block's analysis (``analysis.py``) and the text of its accesses
(``access.py``): the loop nests, the passes over the inner loops (vector loops strip-mined by W
along the innermost variable, 8.1, with W accumulators per reduction, Proposition 8.1 (2)), the
outer-vector loops, the scan pass, and one outer point.  The forms that need more
(``forms/``: split reductions, blocked scans, tiles, interleaved phases) build on it, and
``generate.py`` chooses among them; this module imports neither.  Sequential blocks
(Proposition 7.3 (1)) run with parallel depth 0 and no ``omp for``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Callable

from stax.dtypes import CPP_TYPE, ITEMSIZE, is_floating
from stax.ir.indexing import Index
from stax.ir.loops import Op, loads, walk
from stax.lowering import substitute
from stax.codegen.access import BlockAccess
from stax.codegen.analysis import expensive_ops
from stax.codegen.exprs import Hoist, literal, reduction_identity
from stax.codegen.kernel_parts import LoadContext, Member, access_kind, accumulator, fold, with_line_head
from stax.codegen.names import comment_labels
from stax.codegen.tuning import chunk_iterations


@dataclass
class Kernel:
    """A generated kernel: its C++ function and how the wrapper calls it."""

    name: str
    nodes: list[str]
    buffers: list[str]  # the scheduler nodes' buffers, in order
    params: list[str]  # storage names passed as pointers, in order
    source: str
    form: str
    uses_error_flag: bool = False
    extern: dict | None = None
    param_types: list[str] = field(default_factory=list)  # C type of each pointer parameter
    reads_at: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # storage -> (reader, index)
    writes_at: dict[str, str] = field(default_factory=dict)  # storage -> index written (loop frame)
    generators: list = field(default_factory=list, repr=False)  # the BlockKernels it was generated from
    depths: tuple[int, ...] = ()  # Algorithm 8.1's parallel depth of each block, in order

    def reads_only_at_write_index(self, written: str, read: str) -> bool:
        """Only the member writing ``written`` reads ``read``, and only at the index it stores to:
        each element is read before it is overwritten (in-place reuse is safe, Proposition 7.2)."""
        return written in self.writes_at and self.reads_at.get(read) == {(written, self.writes_at[written])}


class BlockKernel(BlockAccess):
    """The kernel builder of one block: the loops, passes and points every form emits with, on
    the block's analysis and accesses; the forms (``forms/``) build on it."""

    def loop(self, var: str, start: str, stop: str, step: int = 1) -> str:
        inc = f"{var} += {step}" if step != 1 else f"{var} += 1"
        return f"for (int64_t {var} = {start}; {var} < {stop}; {inc})"

    def nest(self, vars_: list[str], ranges: list[int], depth: int, body,
              bounds: dict[str, tuple[int, int, int]] | None = None) -> list[str]:
        """A loop nest over ``vars_`` (``bounds`` gives some of them a start, stop and step)."""
        lines: list[str] = []
        ind = ""
        if depth > 0:  # a fenced block waits at its own barrier, after the fence
            chunk = chunk_iterations([(bounds or {}).get(v, (0, r, 1)) for v, r in zip(vars_[:depth], ranges[:depth])],
                                     self.threads, self.tuning.chunks_per_thread)
            lines.append(f"#pragma omp for{f' collapse({depth})' if depth > 1 else ''} schedule(dynamic, {chunk})"
                         f"{' nowait' if self.emit.fenced else ''}")
        for v, r in zip(vars_, ranges):
            start, stop, step = (bounds or {}).get(v, (0, r, 1))
            lines.append(ind + self.loop(v, str(start), str(stop), step))
            lines.append(ind + "{")
            ind += "    "
        lines += body(ind)
        for _ in vars_:
            ind = ind[:-4]
            lines.append(ind + "}")
        if not vars_:
            lines = lines[1:] if depth > 0 else lines
        return lines

    def outer_loops(self, form: str, vvar: str | None, depth: int) -> list[str]:
        f = self.frame
        vars_, ranges = f.outer_vars, list(f.outer)
        vector_outer = form == "vector" and not f.inner or form in ("outer-vector", "split-reduction")
        if not vector_outer:
            return self.nest(vars_, ranges, depth, lambda ind: self.point(form, vvar, ind, outer_vector=False))
        # the last outer loop is strip-mined: a vector nest (in the outer-vector form first one of
        # several vectors per step) and a guarded last vector or a scalar tail nest
        n = ranges[-1]
        lanes = self._outer_lanes() if form == "outer-vector" else 1
        line = self.line_start(vvar, n, [ld for m in self.members for ld in self._external_loads(m)]) \
            if lanes > 1 else None
        if line is not None:  # the first lines' elements before the vectors, as a scalar head
            head = f"{vvar}_head"
            wide_end, main_end = (f"{head} + ({n} - {head}) / {lanes * self.width} * {lanes * self.width}",
                                  f"{head} + ({n} - {head}) / {self.width} * {self.width}")
            pieces = [(0, head, 0), (head, wide_end, lanes), (wide_end, main_end, 1), (main_end, n, 0)]
        else:
            wide_end = n - n % (lanes * self.width) if lanes > 1 else 0
            main_end = n - n % self.width
            pieces = [(start, stop, count) for start, stop, count in
                      ((0, wide_end, lanes), (wide_end, main_end, 1), (main_end, n, 0)) if stop > start]
        lines: list[str] = []
        for start, stop, count in pieces:
            if not count and stop == n and line is None and self.guarded_tail(vvar, n - main_end):
                with self.emit.guarding_tail(vvar, n):
                    lines += self.nest(vars_, ranges, depth,
                                       lambda ind: self.point("vector", vvar, ind, outer_vector=True),
                                       bounds={vars_[-1]: (start, stop, self.width)})
                continue
            lines += self.nest(vars_, ranges, depth,
                                lambda ind, c=count: self.point("vector" if c else "scalar", vvar if c else None,
                                                                 ind, outer_vector=c > 0, lanes=max(c, 1)),
                                bounds={vars_[-1]: (start, stop, count * self.width or 1)})
        return with_line_head(vvar, line, lines)

    def _outer_lanes(self) -> int:
        itemsize = max(ITEMSIZE[m.buf.dtype] for m in self.members)
        return max(1, self.tuning.outer_vector_bytes // (self.width * itemsize))

    def _lane_members(self, vvar: str, lanes: int) -> list[Member]:
        """Every member once per lane of an outer-vector step (its vector variable shifted by a
        vector per lane, its buffer renamed), member by member, so that one pass over a row
        updates every lane's accumulator."""
        if lanes == 1:
            return self.members
        ranges = self.frame.var_ranges
        copies = [self.member_copies({vvar: Index.var(vvar) + lane * self.width}, f"_lane{lane}", ranges)
                  for lane in range(lanes)]
        return [copy[i] for i in range(len(self.members)) for copy in copies]

    # --- one outer point ----------------------------------------------------------------------------
    def point(self, form: str, vvar: str | None, ind: str, outer_vector: bool, lanes: int = 1) -> list[str]:
        """Code for every member at one outer point (or ``lanes`` x W neighbouring points when
        outer_vector)."""
        lines: list[str] = []
        if self.scans:
            identity = {m.name: literal(reduction_identity(m.buf.scan, m.buf.dtype), m.buf.dtype, False)
                        for m in self.scans}
            self.scan_pass(self.members, identity, "0", str(self.frame.inner[0]), True, ind, lines)
            return lines
        ctx = LoadContext()
        point_printer = self.printer(outer_vector, vvar, ctx, lines, ind)
        phases = self.phases(self._lane_members(vvar, lanes))
        passes = [phase for phase in phases if phase[0].inner]
        prefetching, prefetch = None, []  # the pass that prefetches, and its (address, dtype) rows
        if form == "vector" and not outer_vector and passes:
            prefetching, prefetch = ((passes[1], self._next_point_rows(passes[0], vvar)) if len(passes) > 1
                                     else (passes[0], self._rows_ahead(passes[0], vvar)))
        if outer_vector and self.emit.form == "vector":  # a strip-mined pointwise loop: one vector a step
            lines += [f"{ind}__builtin_prefetch({address}, 0, 2);" for address, _ in
                      self._rows_ahead([m for phase in phases for m in phase], vvar)]
        for phase in phases:
            lines.append(f"{ind}// {comment_labels(dict.fromkeys(m.name for m in phase))}")
            if phase[0].inner and self.emit.partials is not None:
                self.emit.partials.combine_parts(phase, outer_vector, ind, lines, ctx)
                continue
            if phase[0].inner:
                self.inner_pass(phase, form, vvar, ind, lines, ctx, outer_vector,
                                 prefetch if phase is prefetching else [])
                continue
            m = phase[0]
            guard = self.frame.guard(m.buf)
            if guard:  # a smaller member of a shape frame; read back from memory, never from a local
                lines += [f"{ind}if ({' && '.join(guard)})", ind + "{"]
                inner_lines: list[str] = []
                value = self.printer(outer_vector, vvar, ctx, inner_lines, ind + "    ")(m.body)
                self.store(m, value, outer_vector, vvar, ind + "    ", inner_lines)
                lines += inner_lines + [ind + "}"]
                continue
            value = point_printer(m.body)
            self.store(m, value, outer_vector, vvar, ind, lines)
            ctx.point[m.buf.name] = value
            ctx.local[m.buf.name] = value
            if outer_vector:
                ctx.vector_point.add(m.buf.name)
        return lines

    def _next_point_rows(self, first_pass: list[Member], vvar: str | None) -> list[tuple[str, str]]:
        """The rows ``first_pass`` reads from memory, at the next outer point (pointer expression
        along ``vvar``, dtype): the first pass of a row waits on memory, the later passes compute
        on cached data, so they prefetch the next row meanwhile and the two overlap."""
        f = self.frame
        if not f.outer_vars:
            return []
        last = f.outer_vars[-1]
        step = {last: Index.var(last) + 1}
        rows = {}
        for m in first_pass:
            for ld in self._external_loads(m):
                if access_kind(ld.index, vvar) == "contiguous":
                    rows[f"{self._pointer(ld.buffer)} + {ld.index.subs(step, f.var_ranges)}"] = ld.dtype
        if sum(prod(f.inner) * ITEMSIZE[dtype] for dtype in rows.values()) > self.tuning.prefetch_max_bytes:
            return []
        return list(rows.items())

    def _rows_ahead(self, members: list[Member], vvar: str | None) -> list[tuple[str, str]]:
        """The large contiguous rows ``members`` stream from memory, Tuning.prefetch_ahead_bytes ahead
        (pointer expression, dtype), when they compute at least one expensive op per element of
        each: between a row's loads such a loop does so much work that they are issued too late
        for the hardware prefetcher to keep up."""
        ranges = self.frame.var_ranges
        rows = {}
        for m in members:
            for ld in self._external_loads(m):
                footprint = prod(ranges[v] for v in ld.index.variables()) * ITEMSIZE[ld.dtype]
                if access_kind(ld.index, vvar) == "contiguous" and footprint >= self.tuning.stream_min_bytes:
                    ahead = ld.index + self.tuning.prefetch_ahead_bytes // ITEMSIZE[ld.dtype]
                    rows[f"{self._pointer(ld.buffer)} + {ahead}"] = ld.dtype
        return list(rows.items()) if rows and expensive_ops(members) >= len(rows) else []

    def _inner_nest(self, ind: str, vector: bool, vvar: str | None, emit_body, unroll: int = 1,
                    blocks: tuple[list[str], list[str]] | None = None, tail: bool = False) -> list[str]:
        """Inner loops of one member: the last one strip-mined when ``vector``; with ``unroll`` > 1
        the main vector loop does ``unroll`` vectors per step (``emit_body``'s ``lanes`` argument).
        The points past the last whole vector run as one guarded vector when ``tail`` (and
        ``guarded_tail`` says they may), else as scalar points.  With ``blocks`` (lines opening and
        closing a block) a scalar last loop runs in blocks of Tuning.sum_block iterations.
        ``emit_body`` may return lines to run once before its loop (values invariant along it)."""
        f = self.frame
        lines: list[str] = []
        for v, r in zip(f.inner_vars[:-1], f.inner[:-1]):
            lines += [ind + self.loop(v, "0", str(r)), ind + "{"]
            ind += "    "
        last, n = f.inner_vars[-1], f.inner[-1]
        pieces: list[tuple[int, int, int, bool, int]] = []  # start, stop, step, vector, copies
        start = 0
        if vector:
            block = unroll * self.width
            unrolled_end = n - n % block if unroll > 1 else 0
            main_end = n - n % self.width
            pieces += [(0, unrolled_end, block, True, unroll), (unrolled_end, main_end, self.width, True, 1)]
            start = main_end
        pieces.append((start, n, 1, False, 1))
        for lo, hi, step, vec_loop, copies in pieces:
            if hi <= lo:
                continue
            if not vec_loop and tail:  # one guarded vector
                loop: list[str] = []
                with self.emit.guarding_tail(last, n):
                    before = emit_body(ind + "    ", True, loop, 1)
                lines += [*(ind + line for line in before), ind + self.loop(last, str(lo), str(hi), self.width),
                          ind + "{", *loop, ind + "}"]
                continue
            if blocks and not vec_loop:  # whole blocks (a constant trip count), then the rest
                opening, closing = blocks
                block = self.tuning.sum_block
                inner, whole = ind + "    ", lo + (hi - lo) // block * block
                for head, start, stop in ((self.loop(f"{last}_block", str(lo), str(whole), block), f"{last}_block",
                                           f"{last}_block + {block}"), ("", str(whole), str(hi))):
                    if start == stop:
                        continue
                    lines += [ind + head, ind + "{"] if head else [ind + "{"]
                    lines += [*(inner + t for t in opening), inner + self.loop(last, start, stop), inner + "{"]
                    emit_body(inner + "    ", vec_loop, lines, copies)
                    lines += [inner + "}", *(inner + t for t in closing), ind + "}"]
                continue
            loop: list[str] = []
            before = emit_body(ind + "    ", vec_loop, loop, copies)
            lines += [*(ind + line for line in before), ind + self.loop(last, str(lo), str(hi), step), ind + "{",
                      *loop, ind + "}"]
        for _ in f.inner_vars[:-1]:
            ind = ind[:-4]
            lines.append(ind + "}")
        return lines

    def _unrolls(self, phase: list[Member], ctx: LoadContext) -> bool:
        """Whether the vector loop of ``phase`` does several vectors per step (``inner_pass``): a
        long row, reductions or float32 exps, and every lane independent of the others (a
        block-internal value is read from this point, this pass or a scratch row of an earlier
        one, never from memory this kernel writes nor from a carried buffer)."""
        if self.frame.inner[-1] < 2 * self.tuning.accumulators * self.width:
            return False
        exps = any(isinstance(e, Op) and e.name == "exp" and e.dtype == "float32" for m in phase for e in walk(m.body))
        if not exps and not any(m.buf.reduction for m in phase):
            return False
        in_pass = {m.buf.name for m in phase}
        return not any(ld.buffer in self.memory_read or ld.buffer in self.carried or
                       ld.buffer not in ctx.point and ld.buffer not in in_pass and ld.buffer not in self.scratch_rows
                       for m in phase for ld in loads(m.body) if ld.buffer in self.produced)

    def inner_pass(self, phase: list[Member], form: str, vvar: str | None, ind: str, lines: list[str],
                   ctx: LoadContext, outer_vector: bool, prefetch: list[tuple[str, str]],
                   result: Callable[[Member, str], str] | None = None) -> None:
        """One pass of the inner loop computing every member of ``phase``; ``result`` (a
        reduction and its value, for m2 its Welford state) gives the statement that keeps a
        reduction's value, where it is not the value of the outer point (a chunk's partial result).  Reductions keep W
        accumulators per vector (Proposition 8.1 (2)).  On long rows, a pass with reductions or
        float32 exps does Tuning.accumulators vectors per step: one accumulator vector each, so
        consecutive additions do not wait on each other, and one range test for their exps.  The
        vector loop prefetches ``prefetch`` rows (L2), a cache line at a time."""
        inner_vector = form == "vector" and not outer_vector
        reductions = [m for m in phase if m.buf.reduction]
        rows = self.scratch_rows
        unroll = self.tuning.accumulators if inner_vector and self._unrolls(phase, ctx) else 1
        acc = {}
        # a long scalar float32 sum (the none ISA, strided rows) accumulates in double: one float
        # accumulator over a million elements loses five digits
        wide = {m.buf.name for m in reductions if not inner_vector and not outer_vector
                and m.buf.reduction == "sum" and m.buf.dtype == "float32"
                and prod(self.frame.inner) >= self.tuning.wide_sum_min}
        # other float sums adding one element per step into an accumulator: blocked partial sums
        blocked = {m.buf.name for m in reductions if not inner_vector and m.buf.name not in wide
                   and m.buf.reduction == "sum" and is_floating(m.buf.dtype)} \
            if self.frame.inner[-1] > self.tuning.sum_block else set()
        for m in reductions:
            acc[m.buf.name] = self.emit.state.fresh("tmp_acc")
            kind, init = accumulator(m.buf, outer_vector)
            lines.append(f"{ind}{'double' if m.buf.name in wide else kind} {acc[m.buf.name]} = {init};")
            vector_kind, vector_init = accumulator(m.buf, True)
            for lane in range(unroll if inner_vector else 0):
                lines.append(f"{ind}{vector_kind} {acc[m.buf.name]}_vec{lane} = {vector_init};")
        ranges = self.frame.var_ranges
        rest = self.frame.inner[-1] % self.width
        tail = inner_vector and not any(m.buf.reduction == "m2" for m in phase) and \
            self.guarded_tail(vvar, rest, phase)

        def body(bind: str, vec_loop: bool, out: list[str], lanes: int) -> list[str]:
            vector = vec_loop or outer_vector
            # a vector loop along the innermost variable: its invariant values run once before it
            hoist = Hoist(vvar) if vec_loop and not outer_vector else None
            for lane in range(lanes):
                for address, dtype in prefetch if vec_loop else []:
                    offset = lane * self.width
                    if offset * ITEMSIZE[dtype] % self.tuning.cache_line == 0:
                        out.append(f"{bind}__builtin_prefetch({address}{f' + {offset}' if offset else ''}, 0, 2);")
            contexts = [ctx.inner() for _ in range(lanes)]
            shifts = [self._lane_shift(vvar, lane) for lane in range(lanes)]
            printer = self.printer(vector, vvar, contexts, out, bind, hoist)
            # one element per accumulator and step here: Welford's 1 / n from the row index, once
            row_index = self._row_index()
            inverse = {} if inner_vector else {m.buf.dtype: self.emit.state.fresh("tmp_inv") for m in phase
                                               if m.buf.reduction == "m2"}
            out += [f"{bind}const {CPP_TYPE[t]} {name} = {CPP_TYPE[t]}(1) / {CPP_TYPE[t]}({row_index} + 1);"
                    for t, name in inverse.items()]
            for m in phase:
                values = printer.lanes([substitute(m.body, shift, ranges) if shift else m.body for shift in shifts])
                for lane, (value, shift) in enumerate(zip(values, shifts)):
                    if m.buf.reduction:
                        target = f"{acc[m.buf.name]}_vec{lane}" if vec_loop and not outer_vector else \
                            f"{acc[m.buf.name]}_block" if m.buf.name in blocked else acc[m.buf.name]
                        value = f"double({value})" if m.buf.name in wide else value
                        if m.buf.reduction == "m2" and inverse:
                            value += f", {inverse[m.buf.dtype]}"
                        if self.emit.tail and inner_vector:  # the lanes past the row's end add the identity
                            identity = literal(reduction_identity(m.buf.reduction, m.buf.dtype), m.buf.dtype, False)
                            value = f"stax::first_lanes_or({value}, {self.emit.tail_lanes()}, {identity})"
                        out.append(f"{bind}{target} = stax::r_{m.buf.reduction}({target}, {value});")
                        continue
                    at_lane = replace(m, store=m.store.subs(shift, ranges)) if shift else m
                    self.store(at_lane, value, vec_loop, vvar, bind, out, row_pass=not outer_vector)
                    contexts[lane].local[m.buf.name] = value
                    if m.buf.name in rows:
                        row = f"{m.buf.name}_row"
                        index = self._row_index(shift)
                        if vec_loop and self.emit.tail:
                            out.append(f"{bind}stax::vstore_first({row}.get() + {index}, {value}, {self.emit.tail_lanes()});")
                        else:
                            out.append(f"{bind}stax::vstore({row}.get() + {index}, {value});" if vec_loop
                                       else f"{bind}{row}[{index}] = {value};")
            return hoist.lines if hoist else []
        kind = {m.buf.name: accumulator(m.buf, outer_vector) for m in reductions if m.buf.name in blocked}
        blocks = ([f"{kind[name][0]} {acc[name]}_block = {kind[name][1]};" for name in sorted(blocked)],
                  [f"{acc[name]} = stax::r_sum({acc[name]}, {acc[name]}_block);" for name in sorted(blocked)])
        lines += self._inner_nest(ind, inner_vector, vvar, body, unroll, blocks if blocked else None, tail)
        for m in reductions:
            name, op = acc[m.buf.name], m.buf.reduction
            if inner_vector:
                vectors = fold(op, [f"{name}_vec{lane}" for lane in range(unroll)])
                lines.append(f"{ind}{name} = stax::r_{op}({name}, stax::hreduce_{op}<{CPP_TYPE[m.buf.dtype]}>({vectors}));")
            if m.buf.name in wide:
                lines.append(f"{ind}const float {name}_narrow = float({name});")
                name += "_narrow"
            if result is not None:
                lines.append(ind + result(m, name))
                continue
            if op == "m2":
                lines.append(f"{ind}const auto {name}_m2 = stax::result({name});")
                name += "_m2"
            self.store(m, name, outer_vector, vvar, ind, lines)
            ctx.point[m.buf.name] = name
            if outer_vector:
                ctx.vector_point.add(m.buf.name)

    def scan_pass(self, members: list[Member], init: dict[str, str], lo: str, hi: str, store: bool,
                   ind: str, lines: list[str]) -> dict[str, str]:
        """One scalar pass along the carried loop ``y0`` in ``[lo, hi)``: each scan's accumulator
        starts at ``init`` and is stored as it runs; with ``store`` False nothing is stored (the
        chunk totals of the blocked scan).  Returns the accumulators' names."""
        acc = {}
        for m in self.scans:
            acc[m.name] = self.emit.state.fresh("tmp_acc")
            lines.append(f"{ind}{CPP_TYPE[m.buf.dtype]} {acc[m.name]} = {init[m.name]};")
        lines += [ind + self.loop("y0", lo, hi), ind + "{"]
        local = LoadContext()
        printer = self.printer(False, None, local, lines, ind + "    ")
        for m in members:
            value = printer(m.body)
            if m.buf.scan:
                lines.append(f"{ind}    {acc[m.name]} = stax::r_{m.buf.scan}({acc[m.name]}, {value});")
                value = acc[m.name]
            if store:
                self.store(m, value, False, None, ind + "    ", lines)
            local.local[m.buf.name] = value
        lines.append(ind + "}")
        return acc

def without_final_barrier(lines: list[str]) -> list[str]:
    """The statements of a parallel region without a barrier at their end, where the region's
    own closing barrier follows: the explicit barrier after a fence goes, or the last ``omp for``
    gets ``nowait`` when only closing braces follow its loop (a barrier is a large part of a
    small kernel's time)."""
    tail = len(lines)
    while tail and lines[tail - 1].strip() == "}":
        tail -= 1
    if tail and lines[tail - 1].strip() == "#pragma omp barrier":
        return lines[:tail - 1] + lines[tail:]
    last = max((i for i in range(tail) if lines[i].lstrip().startswith("#pragma omp for")), default=None)
    if last is None or "nowait" in lines[last]:
        return lines
    closing = lines[last][:len(lines[last]) - len(lines[last].lstrip())] + "}"
    end = next((i for i in range(last + 2, len(lines)) if lines[i] == closing), None)
    if end is None or end < tail - 1:
        return lines
    return lines[:last] + [lines[last] + " nowait"] + lines[last + 1:]
