"""What the kernel forms share: a block's member, the context a load of a block-internal buffer
is read in, and small pieces of C++ text."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence

from stax.dtypes import CPP_TYPE, ITEMSIZE
from stax.ir.indexing import Index, lane_step
from stax.ir.loops import ComputedBuffer, Expr, Load
from stax.codegen.exprs import PrintState, literal, reduction_identity


@dataclass
class Member:
    """A buffer of the block, its body and store index in the block's loop frame."""

    name: str
    buf: ComputedBuffer
    body: Expr
    store: Index
    internal: bool
    inner: bool  # runs an inner loop


@dataclass
class LoadContext:
    """What a load of a block-internal buffer reads at the current point."""

    point: dict[str, str] = field(default_factory=dict)  # per outer point (scalars or outer vectors)
    vector_point: set[str] = field(default_factory=set)  # point values that are already vectors
    local: dict[str, str] = field(default_factory=dict)  # computed earlier in this loop body

    def inner(self) -> "LoadContext":
        return LoadContext(self.point, self.vector_point, {})


class PartialParts(Protocol):
    """A split-reduction form's partial results, as the builder sees them: declared at function
    scope (``shared_lines``) and combined at each outer point of the epilogue (``combine_parts``)."""

    def shared_lines(self) -> list[str]: ...

    def combine_parts(self, phase: list[Member], vector: bool, ind: str, lines: list[str],
                      ctx: LoadContext) -> None: ...


@dataclass
class Emission:
    """The state of one generation of a block's statements (``generate.region_body`` starts a
    new one): the form chosen, whether its streamed stores end with a fence, the partial results
    its outer points combine (a split-reduction form's), the printer's names and error flag;
    while a tile or a strip's rows are printed (``reading``), the loads its registers or buffer
    answer and whether those rows stream; while a guarded tail is printed (``guarding_tail``),
    its vector variable and the loop's end."""

    form: str = ""
    fenced: bool = False
    partials: PartialParts | None = None
    state: PrintState = field(default_factory=PrintState)
    transposed_values: dict[Load, str] = field(default_factory=dict)
    strip_rows: bool = False
    tail: tuple[str, int] | None = None

    def tail_lanes(self) -> str:
        """The C++ count of the guarded last vector's lanes before the loop's end."""
        var, end = self.tail
        return f"{end} - {var}"

    @contextmanager
    def guarding_tail(self, var: str, end: int) -> Iterator[None]:
        """Print the enclosed point as the last vector of a loop along ``var`` ending at ``end``:
        its lanes at ``var`` >= ``end`` neither read nor write memory."""
        self.tail = (var, end)
        try:
            yield
        finally:
            self.tail = None

    @contextmanager
    def reading(self, transposed_values: dict[Load, str], strip_rows: bool = False) -> Iterator[None]:
        """Print the enclosed points with ``transposed_values`` answering those loads."""
        self.transposed_values, self.strip_rows = transposed_values, strip_rows
        try:
            yield
        finally:
            self.transposed_values, self.strip_rows = {}, False


def with_line_head(var: str, line: str | None, lines: list[str]) -> list[str]:
    """``lines`` in a scope that first computes ``{var}_head``, the elements of ``line`` before
    its first cache-line boundary (none when ``line`` is None)."""
    if line is None:
        return lines
    return ["{", f"    const int64_t {var}_head = stax::line_head({line});"] + ["    " + t for t in lines] + ["}"]


def fold(op: str, values: list[str]) -> str:
    """``values`` combined left to right by the reduction ``op`` (``stax::r_<op>``)."""
    combined = values[0]
    for value in values[1:]:
        combined = f"stax::r_{op}({combined}, {value})"
    return combined


def accumulator(buf: ComputedBuffer, vector: bool) -> tuple[str, str]:
    """The C++ type and initial value of a reduction's accumulator (a scalar, or one lane per
    vector element): the op's identity, or for m2 an empty Welford state."""
    if buf.reduction == "m2":
        return f"stax::welford_{'vec' if vector else 'of'}<{CPP_TYPE[buf.dtype]}>", "{}"
    return ("auto" if vector else CPP_TYPE[buf.dtype]), literal(reduction_identity(buf.reduction, buf.dtype),
                                                                 buf.dtype, vector)


#: the generated function's count of the bytes a heap scratch allocation could not get (0: none)
SCRATCH_SHORT = "scratch_short"


def local_array(dtype: str, name: str, size: int, stack_max_bytes: int) -> str:
    """A zeroed kernel-local array (not std::vector, whose bool form is bit-packed and has no
    data()): on the stack up to ``stack_max_bytes``, else on the heap, null when the memory
    cannot be had (``stax::scratch_array`` records the size in ``SCRATCH_SHORT``; ``fail_soft``)."""
    if size * ITEMSIZE[dtype] <= stack_max_bytes:
        return f"stax::stack_array<{CPP_TYPE[dtype]}, {size}> {name};"
    return f"std::unique_ptr<{CPP_TYPE[dtype]}[]> {name}(stax::scratch_array<{CPP_TYPE[dtype]}>({size}, &{SCRATCH_SHORT}));"


def on_the_heap(lines: Sequence[str]) -> bool:
    """Whether any of these statements allocates heap scratch that may fail (``local_array``)."""
    return any(f"&{SCRATCH_SHORT})" in line for line in lines)


def fail_soft(scratch: list[str], body: list[str]) -> list[str]:
    """A block's statements in a function with heap scratch: its own scratch, then the rest only
    while no allocation has failed (the call then raises MemoryError).  A thread that skips the
    rest has left the region early, which the kernels' pool allows (stax_parallel.cpp: a barrier
    waits for claimed chunks, not for threads)."""
    return scratch + [f"if (stax::scratch_ok(&{SCRATCH_SHORT}))", "{", *("    " + line for line in body), "}"]


def guard_condition(guard: Sequence[tuple[Index, int]], ranges: dict[str, int]) -> str:
    """The C++ test of a guarded load: ``0 <= e < n`` for every ``(e, n)``, omitting the bounds
    that the loop ranges already ensure."""
    tests = []
    for e, n in guard:
        lo, hi = e.bounds(ranges)
        tests += ([f"{e} >= 0"] if lo < 0 else []) + ([f"{e} < {n}"] if hi >= n else [])
    return " && ".join(tests) or "true"


def access_kind(index: Index, var: str | None, width: int | None = None) -> str:
    """How a vector along ``var`` reads ``index``: contiguous, invariant (broadcast) or strided.
    With ``width``, for a vector of that many lanes starting at a multiple of it, an index that
    reads ``var`` through floor divisions and modulos is classified by its ``lane_step``."""
    if var is None or var not in index.variables():
        return "invariant"
    if width:
        step = lane_step(index, var, width)
    else:
        step = index.coeff(var) if index.is_affine_in(var) else None
    return "contiguous" if step == 1 else "invariant" if step == 0 else "strided"
