"""What a block's kernel is made of (spec section 8): its loop frame, its members in that frame,
which buffers stay in the kernel (locals, per-thread rows, carried arrays), its pointer
parameters, and how each access runs along a loop variable (contiguous, strided, invariant),
from which the forms are chosen (``generate.py``).

Sequential blocks (Proposition 7.3 (1), ``dependence="sequential"``): when a member reads a
buffer of the block at an index other than the one it is written at (a value of an earlier
point), that read is a real load of the stored value, never a local, and the block's loops run
in order (``sequential_reason`` says why).  Such a buffer with no user outside the block lives
in a kernel-local array (``<buf>_carried``) that Definition 7.3 does not charge, like the
per-thread rows; one stored for other kernels is re-read from its output, and the counting
build does not count a load of bytes the kernel itself wrote (they come from cache).  Smaller
members of a shape frame run under a guard and are read back the same way.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from stax.dtypes import ITEMSIZE, is_floating, nbytes
from stax.ir.indexing import Index, lane_step
from stax.ir.loops import EXPENSIVE_OPS, ComputedBuffer, Const, Expr, Load, Op, loads, walk
from stax.lowering import substitute
from stax.scheduler.frame import Frame, make_frame
from stax.codegen.kernel_parts import Member, access_kind
from stax.codegen.names import comment_label, comment_text, source_name
from stax.codegen.tuning import Tuning


class BlockAnalysis:
    """The analysis of one block, shared by every kernel form: its frame and members, the
    buffers it keeps, its parameters, and how its accesses run along a loop variable."""

    name: str
    width: int  # vector lanes (1: the none ISA level)
    threads: int
    tuning: Tuning
    labels: dict[str, str]  # node -> its op in the user's words, safe in a comment (stax.scheduler.labels)
    counting: bool  # emit the counting build's loads and stores (stax_count.h)
    frame: Frame
    members: list[Member]
    internal: set[str]  # produced here, never stored: no user outside the block
    produced: set[str]  # read through locals, points or rows
    memory_read: set[str]  # produced, but read back from memory (Proposition 7.3 (1))
    sequential_reason: str | None  # why the loops run in order, if they must
    carried: set[str]  # read back and internal: kept in a kernel-local array
    scratch_rows: dict[str, str]  # pointwise rows a later pass reads -> dtype (per-thread buffers)
    scans: list[Member]
    storage: dict[str, str]  # buffer -> the storage it is written to (extended by member copies)
    params: list[str]  # storages passed as pointers, in order
    written: set[str]
    pointer: dict[str, str]  # storage -> its parameter (in_ptr<k>, out_ptr<k>)
    dtypes: dict[str, str]  # storage -> dtype
    streamed: set[str]  # storages written with non-temporal stores

    def __init__(self, name: str, members: list[tuple[str, ComputedBuffer]], internal: set[str],
                 storage: dict[str, str], width: int, threads: int, counting: bool = False,
                 sequential: bool = False, *, tuning: Tuning, labels: dict[str, str] | None = None):
        self.name, self.width, self.threads, self.tuning = name, width, threads, tuning
        self.labels = labels or {}
        self.counting = counting
        self.frame = make_frame([b for _, b in members])
        ranges = self.frame.var_ranges
        self.members = []
        for node_name, buf in members:
            mapping = self.frame.mapping(buf)
            self.members.append(Member(node_name, buf, substitute(buf.body, mapping, ranges),
                                        buf.store_index.subs(mapping, ranges), buf.name in internal,
                                        self.frame.uses_inner(buf)))
        self.internal = internal
        self.produced = {m.buf.name for m in self.members}
        self.memory_read, self.sequential_reason = self._memory_reads() if sequential else (set(), None)
        self.carried = self.memory_read & internal
        self.scratch_rows = self._scratch_rows()
        self.scans = [m for m in self.members if m.buf.scan]
        self.storage = dict(storage)
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

    def reorder_outer(self, order: list[str]) -> None:
        """Run the outer loops in ``order`` (a permutation of the outer variables, the one
        ``Tiles.loop_order`` asks for): the frame's variables renamed by position, in every
        member's body and store."""
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

    def _pointer(self, buffer: str) -> str:
        """The kernel parameter holding ``buffer``'s storage."""
        return self.pointer[self.storage.get(buffer, buffer)]

    # --- members, passes, work ------------------------------------------------------------------
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


def expensive_in(body: Expr) -> list[Op]:
    """The expensive ops (exp, erf, sqrt, ...) of a body."""
    return [e for e in walk(body) if isinstance(e, Op) and e.name in EXPENSIVE_OPS]


def expensive_ops(members: list[Member]) -> int:
    """How many expensive ops the members' bodies compute per point."""
    return sum(len(expensive_in(m.body)) for m in members)
