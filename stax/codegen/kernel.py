"""CPU kernels (seed section 8): one C++ function per block of a fusion partition.

A block's nodes share a loop frame (``scheduler.frame``): an outer loop nest run in parallel by
OpenMP to the depth Algorithm 8.1 chooses, and, for blocks with reductions, per-node inner
loops inside each outer iteration (the outer-loop fusion of listing 7.1).  Buffers whose users
are all in the block never reach memory: per-outer-iteration values stay in locals, and a
pointwise row another inner loop reads stays in a per-thread row buffer.

Kernel forms (8.3), chosen from the access pattern:

- ``vector``: strip-mined by W along the innermost frame variable (8.1), the points past the
  last whole vector run as one guarded vector (masked loads and stores; a reduction adds its
  identity in the lanes past the end) or, where that cannot be, as scalar points; reductions keep
  W accumulators combined at the end (Proposition 8.1 (2));
- ``outer-vector``: reductions whose rows are strided (column sums) vectorize across W
  neighbouring outputs instead;
- ``split-reduction``: such a reduction over many rows with few outputs: each thread reduces a
  chunk of whole rows, read in memory order, into partial results of its own, and a loop over
  the outputs combines them and runs the block's epilogue (TorchInductor's split reductions);
- ``tiled-vector``: pointwise blocks with transposed reads run in W x W tiles whose transposed
  rows are loaded as W vectors and transposed in registers (8.2); scalar nests past the last tile;
- ``tiled``: the same blocks in B x B scalar tiles when that does not apply (bool reads);
- ``interleaved``: pointwise blocks that read their last variable ``v`` as ``v // s`` and
  ``v % s`` (a strided convolution's input gradient) run each phase ``v % s`` as vectors and
  interleave them in registers (``interleave.py``);
- ``scalar``: everything else (and the ``none`` ISA level).

Sequential blocks (Proposition 7.3 (1), ``dependence="sequential"``): when a member reads a
buffer of the block at an index other than the one it is written at (a value of an earlier
point), that read is a real load of the stored value, never a local, and the block's loops run
in order (parallel depth 0, no ``omp for``; ``sequential_reason`` says why; no tiled or
outer-vector form, which reorder points).  Such a buffer with no user outside the block lives
in a kernel-local array (``<buf>_carried``) that Definition 7.3 does not charge, like the
per-thread rows; one stored for other kernels is re-read from its output, and the counting
build does not count a load of bytes the kernel itself wrote (they come from cache).  Smaller
members of a shape frame run under a guard and are read back the same way.

Scan blocks (seed 7.7): one pass along the carried dim per outer point, a running accumulator
per scan, its pointwise producers and consumers in the same pass; the outer points run in
parallel.  When they are too few (a 1-D scan), the pass is blocked through associativity: each
thread reduces its chunk, one thread scans the chunk totals (exclusive), then each thread runs
its chunk from its offset (reduce-then-scan: the fused consumers see final values in one pass).

``BlockKernel``, the shared builder, and the vector, outer-vector and scalar loops are written
here; the split-reduction, scan, tiled and interleaved forms are classes of their own
(``split_reduction.py``, ``scans.py``, ``tiles.py``, ``interleave.py``) that emit through the
builder, one ``Emission`` (``kernel_parts.py``) holding what a generation decides; the
thresholds that choose among the forms are in ``tuning.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Callable

from stax.dtypes import CPP_TYPE, ITEMSIZE, is_floating, nbytes
from stax.ir.indexing import Index, contiguous_strides, lane_step, linear_index
from stax.ir.loops import EXPENSIVE_OPS, ComputedBuffer, Const, Expr, Load, Op, loads, walk
from stax.lowering import substitute
from stax.scheduler.frame import Frame, make_frame
from stax.codegen.exprs import BodyPrinter, Hoist, lane_type, literal, reduction_identity
from stax.codegen.kernel_parts import (SCRATCH_SHORT, Emission, LoadContext, Member, access_kind, accumulator, fail_soft, fold,
                           guard_condition, local_array, on_the_heap, with_line_head)
from stax.codegen.forms.interleave import Interleaved
from stax.codegen.names import comment_label, comment_labels, comment_text, source_name
from stax.codegen.forms.scans import BlockedScan
from stax.codegen.forms.split_reduction import ChunkedReduction, PartialResults, SplitReduction
from stax.codegen.forms.tiles import Tiles
from stax.codegen.tuning import Tuning, chunk_iterations, parallel_depth
from stax.target import Isa


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


class BlockKernel:
    """The shared kernel builder of one block: its analysis (frame, members, pointers, what it
    streams) and the loops, passes and stores every form emits with; the split-reduction, scan
    and tiled forms are units of their own (``split``, ``scan``, ``tiles``) that emit through it."""

    def __init__(self, name: str, members: list[tuple[str, ComputedBuffer]], internal: set[str],
                 storage: dict[str, str], width: int, threads: int, counting: bool = False,
                 sequential: bool = False, *, tuning: Tuning, labels: dict[str, str] | None = None):
        self.name, self.width, self.threads, self.tuning = name, width, threads, tuning
        self.labels = labels or {}  # node -> its op in the user's words, safe in a comment (stax.scheduler.labels)
        self.split, self.scan, self.tiles = SplitReduction(self), BlockedScan(self), Tiles(self)
        self.chunked = ChunkedReduction(self)
        self.interleave = Interleaved(self)
        self.counting = counting  # emit the counting build's loads and stores (stax_count.h)
        self.frame: Frame = make_frame([b for _, b in members])
        ranges = self.frame.var_ranges
        self.members = []
        for node_name, buf in members:
            mapping = self.frame.mapping(buf)
            self.members.append(Member(node_name, buf, substitute(buf.body, mapping, ranges),
                                        buf.store_index.subs(mapping, ranges), buf.name in internal,
                                        self.frame.uses_inner(buf)))
        self.internal = internal  # produced here, never stored: no user outside the block
        self.produced = {m.buf.name for m in self.members}  # read through locals, points or rows
        self.memory_read, self.sequential_reason = self._memory_reads() if sequential else (set(), None)
        self.carried = self.memory_read & internal  # kept in a kernel-local array
        self.scratch_rows = self._scratch_rows()
        self.scans = [m for m in self.members if m.buf.scan]
        order = self.tiles.loop_order()
        if order is not None:
            self._reorder_outer(order)
        self.storage = dict(storage)  # extended by the outer-vector lanes' buffer names
        reads = [ld.buffer for m in self.members for ld in loads(m.body) if ld.buffer not in self.produced]
        writes = [storage.get(m.buf.name, m.buf.name) for m in self.members if not m.internal]
        self.params = list(dict.fromkeys([storage.get(b, b) for b in reads] + writes))
        self.written = set(writes)
        self.pointer = {}
        n_in = n_out = 0
        for p in self.params:
            if p in self.written:
                self.pointer[p], n_out = f"out_ptr{n_out}", n_out + 1
            else:
                self.pointer[p], n_in = f"in_ptr{n_in}", n_in + 1
        self.dtypes = {ld.buffer: ld.dtype for m in self.members for ld in loads(m.body)}
        self.dtypes |= {storage.get(m.buf.name, m.buf.name): m.buf.dtype for m in self.members}
        self.streamed = self._streamed_outputs(reads)
        self.emit = Emission()  # the current generation's state (region_body)

    def _reorder_outer(self, order: list[str]) -> None:
        """Run the outer loops in ``order`` (a permutation of the outer variables): the frame's
        variables renamed by position, in every member's body and store."""
        f = self.frame
        ranges = f.var_ranges
        self.frame = replace(f, outer=tuple(ranges[x] for x in order))
        renamed = {old: Index.var(new) for old, new in zip(order, self.frame.outer_vars)}
        new_ranges = self.frame.var_ranges
        self.members = [replace(m, body=substitute(m.body, renamed, new_ranges), store=m.store.subs(renamed, new_ranges))
                        for m in self.members]

    # --- access classification ----------------------------------------------------------------
    def _memory_reads(self) -> tuple[set[str], str | None]:
        """Produced buffers read back from memory (at another point, or written under a guard),
        and why the block's loops must stay sequential (Proposition 7.3 (1)), if they must."""
        store = {m.buf.name: m for m in self.members}
        read = {m.buf.name for m in self.members if self.frame.guard(m.buf)}
        reason = None
        for m in self.members:
            for ld in loads(m.body):
                writer = store.get(ld.buffer)
                if writer is not None and ld.index != writer.store:
                    read.add(ld.buffer)
                    reason = reason or (f"{m.name} reads {ld.buffer} at {ld.index}, written by {writer.name} at "
                                        f"{writer.store} at an earlier point (Proposition 7.3 (1))")
        return read, reason

    def _streamed_outputs(self, reads: list[str]) -> set[str]:
        """Storages written with non-temporal stores: large, and not read by this block."""
        if self.counting or self.width == 1:
            return set()
        read = {self.storage.get(b, b) for b in reads}
        large = {self.storage.get(m.buf.name, m.buf.name) for m in self.members
                 if not m.internal and m.buf.name not in self.carried
                 and nbytes(m.buf.shape, m.buf.dtype) >= self.tuning.stream_min_bytes}
        return large - read

    def _external_loads(self, member: Member) -> list[Load]:
        return [ld for ld in loads(member.body) if ld.buffer not in self.produced]

    def memory_loads(self, member: Member) -> list[Load]:
        return [ld for ld in loads(member.body) if ld.buffer not in self.produced or ld.buffer in self.memory_read]

    def vectorizable(self, var: str, members: list[Member], with_store: bool) -> bool:
        for m in members:
            for ld in self.memory_loads(m):
                if self._vector_stride(ld, var) is None or not self._lane_guards(ld, var):
                    return False
            if with_store and not m.internal and access_kind(m.store, var, self.width) != "contiguous":
                return False
        return True

    def _vector_stride(self, ld: Load, var: str) -> int | None:
        """The element stride of a vector load of ``ld`` along ``var``: 0 (one value for every
        lane), 1 (contiguous), 2 to Tuning.max_vector_stride (``stax::vload_strided``: a stride-2
        convolution's input), or None where a vector cannot read it (the counting build
        counts strided elements one at a time)."""
        kind = access_kind(ld.index, var, self.width)
        if kind != "strided":
            return 0 if kind == "invariant" else 1
        if self.counting or ld.dtype == "bool":
            return None
        stride = lane_step(ld.index, var, self.width)
        return stride if stride is not None and 2 <= stride <= self.tuning.max_vector_stride else None

    def _lane_guards(self, ld: Load, var: str) -> bool:
        """Whether a vector along ``var`` can test ``ld``'s guards: each guard the same for every
        lane, or stepping along the lanes while the load advances along them (padding read by
        ``stax::vload_guarded``).  The counting build reads guarded elements one at a time."""
        steps = [lane_step(e, var, self.width) for e, _ in ld.guard if var in e.variables()]
        if None in steps:
            return False
        return not any(steps) or not self.counting and ld.dtype != "bool" and bool(self._vector_stride(ld, var))

    def guarded_tail(self, var: str, rest: int, members: list[Member] | None = None) -> bool:
        """Whether the last ``rest`` points of a loop strip-mined along ``var`` run as one vector
        whose lanes past the loop's end neither read nor write memory (``Emission.guarding_tail``)
        instead of one scalar point each: at least Tuning.vector_tail_min of them, in a build that
        vectorizes, every load moving along ``var`` one that a lane guard can read (not bool),
        every stored buffer not bool, no carried buffer, no scratch row unless ``var`` runs along
        the rows (their last vector is then guarded too), and no integer division a lane past the
        end could make a division by zero (it would set the error flag)."""
        members = self.members if members is None else members
        rows_across = self.scratch_rows and var not in self.frame.inner_vars
        if rest < self.tuning.vector_tail_min or self.counting or self.carried or rows_across:
            return False
        for m in members:
            if not m.internal and m.buf.dtype == "bool":
                return False
            for ld in self.memory_loads(m):
                if access_kind(ld.index, var, self.width) != "invariant" and \
                        (ld.dtype == "bool" or not self._vector_stride(ld, var)):
                    return False
            for e in walk(m.body):
                if isinstance(e, Op) and e.name in ("floordiv", "truncdiv", "mod") and not is_floating(e.dtype) \
                        and not (isinstance(e.args[1], Const) and e.args[1].value != 0):
                    return False
        return True

    def choose_form(self) -> tuple[str, str | None]:
        """The kernel form and its vector variable (seed 8.3)."""
        f = self.frame
        if self.width == 1 or not f.outer and not f.inner or self.scans or any(f.guard(m.buf) for m in self.members):
            return "scalar", None
        in_order = self.sequential_reason is None  # tiles and outer vectors reorder the points
        if not f.inner:
            last = f.outer_vars[-1]
            if self.vectorizable(last, self.members, with_store=True):
                return "vector", last
            if self.interleave.divisor() is not None:
                return "interleaved", last
            if in_order and len(f.outer) >= 2 and all(m.store.is_affine_in(last) for m in self.members):
                return ("tiled-vector", last) if self.tiles.transposed_loads() is not None else ("tiled", None)
            return "scalar", None
        inner_last = f.inner_vars[-1]
        looped = [m for m in self.members if m.inner]
        pointwise_rows = [m for m in looped if not m.buf.reduction]
        inner_vector = self.vectorizable(inner_last, looped, with_store=False) and \
            all(m.internal or access_kind(m.store, inner_last, self.width) == "contiguous" for m in pointwise_rows)
        if inner_vector and f.inner[-1] >= self.width:
            return "vector", inner_last
        # rows shorter than a vector (a convolution's kernel width): across neighbouring outputs,
        # at least a vector of them or a guarded one
        whole = f.outer and f.outer[-1] >= self.width
        if in_order and (whole or f.outer and self.guarded_tail(f.outer_vars[-1], f.outer[-1])) and \
                not pointwise_rows and self.vectorizable(f.outer_vars[-1], self.members, with_store=True):
            return ("split-reduction" if whole and self.split.applies() else "outer-vector"), f.outer_vars[-1]
        return ("vector", inner_last) if inner_vector else ("scalar", None)

    # --- emission -------------------------------------------------------------------------------
    def region_body(self) -> tuple[int, list[str], list[str]]:
        """Algorithm 8.1's parallel depth, and the statements of this block inside a parallel region:
        its per-thread scratch (rows, carried values, strip buffers), then the loop nests with
        their ``omp for``, in a new ``Emission``: the form and whether its streamed stores need a
        fence are decided first."""
        form, vvar = ("blocked-scan", None) if self.scan.applies() else self.choose_form()
        base_form, form = form, "chunked-reduction" if self.chunked.applies(form) else form
        f = self.frame
        fenced = bool(self.streamed) and ((form == "vector" and bool(f.inner))
                                          or (form == "tiled-vector" and self.tiles.in_strips()))
        self.emit = Emission(form, fenced)
        depth = 0 if self.sequential_reason else parallel_depth(f.outer, self.threads, prod(f.outer) * prod(f.inner))
        stack = self.tuning.stack_array_max_bytes
        scratch = [local_array(dtype, f"{name}_row", prod(f.inner), stack) for name, dtype in self.scratch_rows.items()]
        scratch += [local_array(m.buf.dtype, f"{m.buf.name}_carried", prod(m.buf.shape), stack)
                    for m in self.members if m.buf.name in self.carried]
        if form == "tiled-vector" and self.tiles.in_strips():
            scratch += self.tiles.strip_scratch()
        if form == "blocked-scan":
            return 1, scratch, self.scan.body()
        if form == "split-reduction":
            return 1, scratch, self.split.body(vvar)
        if form == "chunked-reduction":
            return 1, scratch, self.chunked.body(base_form, vvar)
        body: list[str] = []
        if form == "tiled":
            body += self.tiles.tiled(depth)
        elif form == "tiled-vector":
            body += self.tiles.tiled_vector(depth)
        elif form == "interleaved":
            body += self.interleave.body(depth)
        else:
            body += self.outer_loops(form, vvar, depth)
        if fenced:  # non-temporal stores are visible to other threads after a fence
            body += ["stax::store_fence();"] + (["#pragma omp barrier"] if depth > 0 else [])
        return depth, scratch, body

    def work(self) -> int:
        """Iterations of the block plus Tuning.expensive_weight per expensive op at each point where it
        runs (8.4's N t, in units of t): an op of a row's values only (RMSNorm's rsqrt of the row
        mean, which the compiler hoists out of the row's loop) counts once a row, not once an
        element."""
        points, rows = prod(self.frame.outer) * prod(self.frame.inner), prod(self.frame.outer)
        outer = set(self.frame.outer_vars)

        def per_row(e: Op) -> bool:
            return all(ld.index.variables() <= outer and all(g.variables() <= outer for g, _ in ld.guard)
                       for ld in loads(e))

        runs = [rows if not m.inner or per_row(e) else points for m in self.members for e in expensive_in(m.body)]
        return points + self.tuning.expensive_weight * sum(runs)

    def shared_lines(self) -> list[str]:
        """Declarations at function scope, shared by the threads (the blocked scan's chunk totals,
        the split reduction's partial results)."""
        if self.partials() is not None:
            return self.partials().shared_lines()
        return self.scan.shared_lines() if self.scan.applies() else []

    def partials(self) -> PartialResults | None:
        """The split-reduction form whose chunks' partial results the outer points combine, if
        the current generation is one."""
        return {"split-reduction": self.split, "chunked-reduction": self.chunked}.get(self.emit.form)

    def comment(self) -> list[str]:
        lines = [f"// {comment_label(m.name)}{' ' + comment_label(self.labels[m.name]) if m.name in self.labels else ''}: "
                 f"{source_name(m.buf.name)} = {m.buf.kind} {(m.buf.ranges, m.buf.reduction_ranges)}"
                 f"{' (kept in the kernel)' if m.internal else ''}" for m in self.members]
        return lines + ([f"// sequential loops: {comment_text(self.sequential_reason)}"] if self.sequential_reason else [])

    def accesses(self) -> tuple[dict[str, set[tuple[str, str]]], dict[str, str]]:
        """Where each storage is read (by which buffer's computation, at which frame index) and written."""
        reads_at: dict[str, set[tuple[str, str]]] = {}
        for m in self.members:
            for ld in self._external_loads(m):
                reads_at.setdefault(self.storage.get(ld.buffer, ld.buffer), set()).add((m.buf.name, str(ld.index)))
        writes_at = {self.storage.get(m.buf.name, m.buf.name): str(m.store) for m in self.members if not m.internal}
        return reads_at, writes_at

    def generate(self) -> Kernel:
        return merge_kernels(self.name, [self])

    def _scratch_rows(self) -> dict[str, str]:
        """Pointwise rows of this block that a later inner loop (a later pass) of the block reads
        (kept in a per-thread row buffer, in cache, whether or not the row is also stored for
        other kernels); a reader in the same pass takes the value from a local."""
        rows = {}
        phases = self.phases(self.members)
        for i, phase in enumerate(phases):
            later = {ld.buffer for p in phases[i + 1:] for m in p for ld in loads(m.body)}
            for m in phase:
                if m.inner and not m.buf.reduction and not m.buf.scan and m.buf.name not in self.memory_read \
                        and m.buf.name in later:
                    rows[m.buf.name] = m.buf.dtype
        return rows

    def loop(self, var: str, start: str, stop: str, step: int = 1) -> str:
        inc = f"{var} += {step}" if step != 1 else f"{var} += 1"
        return f"for (int64_t {var} = {start}; {var} < {stop}; {inc})"

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

    def line_start(self, var: str, n: int, candidates: list[Load]) -> str | None:
        """A pointer whose cache-line alignment every row read along ``var`` shares: the row
        start of a load among ``candidates`` read contiguously along ``var`` whose other strides
        are whole lines (a column walk down a matrix, the transposed operand of a tile).  Its
        vectors then read whole lines, not one more per row where the array does not start on a
        line (numpy's large arrays start 16 bytes past one), once a scalar head has taken the
        elements before the first line boundary.  None when no load qualifies, the rows are
        too short for a head to pay, or the block reads ``var`` through a division (its vectors
        must then start at multiples of W, ``indexing.lane_step``)."""
        if n < self.tuning.outer_head_min or self.counting or not self._affine_along(var):
            return None
        for ld in candidates:
            size = ITEMSIZE[ld.dtype]
            if ld.guard or ld.dtype == "bool" or access_kind(ld.index, var) != "contiguous" or \
                    any(not isinstance(atom, str) for atom, _ in ld.index.terms):
                continue
            if all(c * size % self.tuning.cache_line == 0 for atom, c in ld.index.terms if atom != var):
                return f"{self._pointer(ld.buffer)} + {ld.index.const}"
        return None

    def _affine_along(self, var: str) -> bool:
        """Every load, guard and store of the block affine in ``var``."""
        indices = [m.store for m in self.members] + \
            [e for m in self.members for ld in loads(m.body) for e in (ld.index, *(g for g, _ in ld.guard))]
        return all(e.is_affine_in(var) for e in indices)

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

    def member_copies(self, mapping: dict[str, Index], suffix: str, ranges: dict[str, int]) -> list[Member]:
        """The members at the point ``mapping`` gives (variables substituted, simplified with
        ``ranges``), each buffer renamed with ``suffix`` so that the copies' values stay apart."""
        names = {m.buf.name: f"{m.buf.name}{suffix}" for m in self.members}
        copies = []
        for m in self.members:
            name = names[m.buf.name]
            copies.append(Member(m.name, replace(m.buf, name=name), substitute(m.body, mapping, ranges, names),
                                 m.store.subs(mapping, ranges), m.internal, m.inner))
            self.storage[name] = self.storage.get(m.buf.name, m.buf.name)
            self.produced.add(name)
        return copies

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

    # --- one outer point ----------------------------------------------------------------------------
    def phases(self, members: list[Member]) -> list[list[Member]]:
        """Members grouped into passes over the inner loop: consecutive inner-loop members share
        one pass unless one needs a reduction finished earlier in the same pass; a member
        without an inner loop is a step of its own (one pass per row: the sum and the max of
        example 7.2 read the row once).  A reduction that reads nothing of the steps between an
        earlier pass and itself joins the earliest such pass (a mean and an m2 of the same rows,
        with the mean's division between them, read the rows once)."""
        phases: list[list[Member]] = []
        for m in members:
            reads = {ld.buffer for ld in loads(m.body)}
            target = self._earliest_pass(phases, reads) if m.inner and m.buf.reduction and not m.buf.aliases \
                and not self.memory_read else None
            if target is None and m.inner and phases and phases[-1][0].inner and \
                    not reads & {p.buf.name for p in phases[-1] if p.buf.reduction}:
                target = phases[-1]
            if target is None:
                phases.append([m])
            else:
                target.append(m)
        return phases

    @staticmethod
    def _earliest_pass(phases: list[list[Member]], reads: set[str]) -> list[Member] | None:
        """The earliest pass that a member reading ``reads`` may join: none of the reductions of
        that pass nor anything computed after it among ``reads``."""
        earliest, later = None, set()
        for phase in reversed(phases):
            names = {p.buf.name for p in phase}
            if phase[0].inner and not reads & later and not reads & {p.buf.name for p in phase if p.buf.reduction}:
                earliest = phase
            later |= names
        return earliest

    def point(self, form: str, vvar: str | None, ind: str, outer_vector: bool, lanes: int = 1) -> list[str]:
        """Code for every member at one outer point (or ``lanes`` x W neighbouring points when
        outer_vector)."""
        lines: list[str] = []
        if self.scans:
            identity = {m.name: literal(reduction_identity(m.buf.scan, m.buf.dtype), m.buf.dtype, False)
                        for m in self.scans}
            self.scan.scan_pass(self.members, identity, "0", str(self.frame.inner[0]), True, ind, lines)
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
            if phase[0].inner and self.partials() is not None:
                self.partials().combine_parts(phase, outer_vector, ind, lines, ctx)
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

    def printer(self, vector: bool, vvar: str | None, ctx: LoadContext | list[LoadContext], lines: list[str],
                 ind: str, hoist: Hoist | None = None) -> BodyPrinter:
        """A printer of one lane, or of one lane per context of ``ctx`` (lane k a vector further
        along ``vvar`` than lane k - 1); ``hoist`` takes the loop's invariant values."""
        def lane_load(local: LoadContext, lane: int) -> Callable[[Load], str]:
            def load(ld: Load) -> str:
                if ld in self.emit.transposed_values:
                    return self.emit.transposed_values[ld]
                if ld.buffer in self.produced:
                    return self._internal_value(ld, vector, vvar, local, lane)
                return self.load_text(ld, vector, vvar)
            return load
        contexts = ctx if isinstance(ctx, list) else [ctx]
        return BodyPrinter(vector, [lane_load(c, lane) for lane, c in enumerate(contexts)], lines, ind, self.emit.state,
                           hoist=hoist)

    def _lane_shift(self, vvar: str | None, lane: int) -> dict[str, Index]:
        """The point of lane ``lane`` of an unrolled vector loop: ``vvar`` a vector per lane further."""
        return {vvar: Index.var(vvar) + lane * self.width} if lane else {}

    def _internal_value(self, ld: Load, vector: bool, vvar: str | None, ctx: LoadContext, lane: int = 0) -> str:
        """A block-internal buffer: a local of this loop body, a per-point value, or a row (at
        ``lane``'s point); or a load of its stored value when it is read back from memory."""
        name = ld.buffer
        if name in self.carried:
            kind = access_kind(ld.index, vvar, self.width) if vector else "scalar"
            if kind == "contiguous":
                return f"stax::vload({name}_carried.get() + {ld.index})"
            element = f"{name}_carried[{ld.index}]"
            return element if kind == "scalar" else f"stax::splat<{lane_type(ld.dtype)}>({element})"
        if name in self.memory_read:
            return self.load_text(ld, vector, vvar)
        if name in ctx.local:
            return ctx.local[name]
        if name in ctx.point:
            value = ctx.point[name]
            if vector and name not in ctx.vector_point:
                return f"stax::splat<{lane_type(ld.dtype)}>({value})"
            return value
        row_index = self._row_index(self._lane_shift(vvar, lane))
        if vector and self.emit.tail:
            return f"stax::vload_first({name}_row.get() + {row_index}, {self.emit.tail_lanes()}, {literal(0, ld.dtype, False)})"
        if vector:
            return f"stax::vload({name}_row.get() + {row_index})"
        return f"{name}_row[{row_index}]"

    def _row_index(self, shift: dict[str, Index] | None = None) -> Index:
        """The index of the current point in a row buffer (``shift``ed: another lane's point)."""
        index = linear_index([Index.var(v) for v in self.frame.inner_vars], contiguous_strides(self.frame.inner))
        return index.subs(shift, self.frame.var_ranges) if shift else index

    def _pointer(self, buffer: str) -> str:
        """The kernel parameter holding ``buffer``'s storage."""
        return self.pointer[self.storage.get(buffer, buffer)]

    def load_text(self, ld: Load, vector: bool, vvar: str | None) -> str:
        tail = self.emit.tail
        if vector and tail and tail[0] == vvar and access_kind(ld.index, vvar, self.width) != "invariant":
            if not ld.guard:
                stride = self._vector_stride(ld, vvar)
                load = f"vload_first_strided<{stride}>" if stride > 1 else "vload_first"
                return (f"stax::{load}({self._pointer(ld.buffer)} + {ld.index}, {self.emit.tail_lanes()}, "
                        f"{literal(ld.other, ld.dtype, False)})")
            ld = replace(ld, guard=ld.guard + ((Index.var(vvar), tail[1]),))  # no lane past the loop's end
        if ld.guard:  # padding: memory is read only where the guard holds
            # tested lane by lane, or the same for every lane
            lanes = [(e, n) for e, n in ld.guard if vector and vvar in e.variables() and lane_step(e, vvar, self.width)]
            points = [(e, n) for e, n in ld.guard if (e, n) not in lanes]
            if lanes:
                tests = ", ".join(f"stax::LaneGuard{{{e}, {lane_step(e, vvar, self.width)}, {n}}}" for e, n in lanes)
                stride = self._vector_stride(ld, vvar)
                inner = (f"stax::vload_guarded{f'<{stride}>' if stride > 1 else ''}({self._pointer(ld.buffer)} + "
                         f"{ld.index}, {literal(ld.other, ld.dtype, False)}, {{{tests}}})")
            else:
                inner = self.load_text(replace(ld, guard=()), vector, vvar)
            if not points:
                return inner
            return f"({guard_condition(points, self.frame.var_ranges)} ? {inner} : {literal(ld.other, ld.dtype, vector)})"
        storage = self.storage.get(ld.buffer, ld.buffer)
        ptr, slot = self.pointer[storage], self.params.index(storage)
        element = f"stax::count_load({ptr}, {ld.index}, {slot})" if self.counting else f"{ptr}[{ld.index}]"
        if not vector:
            return element
        kind = access_kind(ld.index, vvar, self.width)
        if kind == "contiguous":
            return f"stax::count_vload({ptr} + {ld.index}, {slot})" if self.counting else f"stax::vload({ptr} + {ld.index})"
        if kind == "strided":
            return f"stax::vload_strided<{self._vector_stride(ld, vvar)}>({ptr} + {ld.index})"
        cast = "(int8_t)" if ld.dtype == "bool" else ""
        return f"stax::splat<{lane_type(ld.dtype)}>({cast}{element})"

    def store(self, m: Member, value: str, vector: bool, vvar: str | None, ind: str, lines: list[str],
               row_pass: bool = False) -> None:
        if m.buf.name in self.carried:
            target = f"{m.buf.name}_carried"
            lines.append(f"{ind}stax::vstore({target}.get() + {m.store}, {value});" if vector
                         else f"{ind}{target}[{m.store}] = {value};")
            return
        if m.internal:
            return
        storage = self.storage.get(m.buf.name, m.buf.name)
        ptr, slot = self.pointer[storage], self.params.index(storage)
        if self.counting:
            line = (f"stax::count_vstore({ptr} + {m.store}, {value}, {slot})" if vector
                    else f"stax::count_store({ptr}, {m.store}, {value}, {slot})")
        else:
            streams = (row_pass or self.emit.strip_rows) and storage in self.streamed
            write = "stax::vstore_stream" if streams else "stax::vstore"
            line = f"{write}({ptr} + {m.store}, {value})" if vector else f"{ptr}[{m.store}] = {value}"
            if vector and self.emit.tail:  # the lanes before the loop's end
                line = f"stax::vstore_first({ptr} + {m.store}, {value}, {self.emit.tail_lanes()})"
        lines.append(f"{ind}{line};")

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


def expensive_in(body: Expr) -> list[Op]:
    """The expensive ops (exp, erf, sqrt, ...) of a body."""
    return [e for e in walk(body) if isinstance(e, Op) and e.name in EXPENSIVE_OPS]


def expensive_ops(members: list[Member]) -> int:
    """How many expensive ops the members' bodies compute per point."""
    return sum(len(expensive_in(m.body)) for m in members)


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


def merge_kernels(name: str, blocks: list[BlockKernel]) -> Kernel:
    """One C++ function for consecutive blocks, sharing one OpenMP parallel region (seed 8.5:
    adjacent loops of a wrapper in one function save the region's fixed cost).  Each block's
    ``omp for`` ends with a barrier, so a block sees the results of the blocks before it; a
    block too small to run in parallel (depth 0) runs under ``omp single``."""
    params = list(dict.fromkeys(p for b in blocks for p in b.params))
    written = set().union(*(b.written for b in blocks))
    dtypes = {p: b.dtypes[p] for b in blocks for p in b.params}
    pointer, counts = {}, {"in": 0, "out": 0}
    for p in params:
        kind = "out" if p in written else "in"
        pointer[p] = f"{kind}_ptr{counts[kind]}"
        counts[kind] += 1
    for b in blocks:
        b.pointer = pointer
    generated = [b.region_body() for b in blocks]
    shared = [line for b in blocks for line in b.shared_lines()]
    heap = on_the_heap(shared + [line for _, scratch, _ in generated for line in scratch])
    bodies = [(depth, fail_soft(scratch, body) if heap else scratch + body) for depth, scratch, body in generated]
    parallel = any(depth > 0 for depth, _ in bodies)
    param_types = [f"{'' if p in written else 'const '}{CPP_TYPE[dtypes[p]]}*" for p in params]
    args = ", ".join(f"{t} {pointer[p]}" for t, p in zip(param_types, params))
    lines = [c for b in blocks for c in b.comment()]
    lines.append("// " + ", ".join(f"{pointer[p]}={source_name(p)}" for p in params))
    lines.append(f'extern "C" void {source_name(name)}({args}{", " if args else ""}int64_t* err) {{')
    inner: list[str] = []
    for depth, body in bodies:
        if len(bodies) == 1:
            inner += body
        else:  # a scope per block: blocks reuse temporary names
            inner += (["#pragma omp single"] if parallel and depth == 0 else []) + ["{", *("    " + line for line in body), "}"]
    if parallel:  # below Tuning.parallel_min_work the worksharing constructs run orphaned, on the calling thread
        work = sum(b.work() for b in blocks)
        if work >= blocks[0].tuning.parallel_min_work:
            region = f"#pragma omp parallel num_threads({blocks[0].threads})"
            inner = without_final_barrier(inner)
        else:
            region = f"// work {work} < PARALLEL_MIN_WORK: no parallel region (one thread)"
        inner = [region, "{", *("    " + line for line in inner), "}"]
    inner = ([f"int64_t {SCRATCH_SHORT} = 0;  // bytes a scratch allocation could not get"] if heap else []) + shared + inner
    lines += ["    " + line for line in inner]
    if heap:  # the call raises MemoryError
        lines.append(f"    if ({SCRATCH_SHORT} != 0) *err = -{SCRATCH_SHORT};")
    lines.append("}")
    reads_at: dict[str, set[tuple[str, str]]] = {}
    writes_at: dict[str, str] = {}
    for b in blocks:
        r, w = b.accesses()
        for key, value in r.items():
            reads_at.setdefault(key, set()).update(value)
        writes_at.update(w)
    return Kernel(name, [m.name for b in blocks for m in b.members], [m.buf.name for b in blocks for m in b.members],
                  params, "\n".join(lines), "+".join(b.emit.form for b in blocks),
                  any(b.emit.state.uses_error_flag for b in blocks), None, param_types, reads_at, writes_at,
                  generators=list(blocks), depths=tuple(depth for depth, _ in bodies))


def generate_extern(name: str, node_name: str, buf, storage: dict[str, str], threads: int, isa: Isa) -> Kernel:
    """An extern call has no C++ source; the wrapper calls the library directly (a matmul on
    ``threads`` OpenMP threads, ``stax.kernels.matmul``), built for ``isa`` (its name)."""
    return Kernel(name, [node_name], [buf.name], [storage.get(i, i) for i in buf.inputs] + [buf.name], "", "extern",
                  extern={"op": buf.op, "inputs": list(buf.inputs), "views": list(buf.views), "output": buf.name,
                          "attrs": dict(buf.attrs),
                          "threads": threads, "isa": isa.name})
