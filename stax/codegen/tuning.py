"""The kernel generator's thresholds (``Tuning``) and Algorithm 8.1's parallel depth.

Each threshold says what it trades off; ``python -m experiments.bench.tuning`` times the ones
that trade speed against neighbouring values.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import prod
from typing import Sequence

from stax.errors import StaxError


TUNING_MAX = (1 << 62) - 1  # no input reaches this threshold (bench_tuning's NEVER); sums stay in int64
#: Tuning's ranges (low, high, power of two); a threshold not listed is a whole number from 0 to
#: TUNING_MAX.  Counts that divide are at least 1; the cache line is at least the 64 bytes the C++
#: headers align to (stax::line_head); a strip or a register-tile block holds whole vectors; a stack
#: array stays far below a thread's stack
TUNING_RANGES = {
    "tile": (1, 1 << 12, False), "vector_tile_block": (16, 1 << 16, True), "strip_rows": (16, 1 << 16, True),
    "strips_per_thread": (0, 1 << 10, False), "accumulators": (1, 64, False), "cache_line": (64, 1 << 12, True),
    "stack_array_max_bytes": (0, 1 << 20, False), "sum_block": (1, 1 << 20, False),
    "outer_vector_bytes": (1, 1 << 16, False), "split_row_step": (1, 64, False), "vector_tail_min": (1, 64, False),
    "max_vector_stride": (1, 64, False), "expensive_weight": (0, 1 << 20, False),
    "chunks_per_thread": (1, 1 << 10, False),
}


@dataclass(frozen=True)
class Tuning:
    """The kernel generator's thresholds (an ``Options`` field, saved in a Schedule by their
    upper-case names)."""

    blocked_scan_min: int = 1 << 14  # a 1-D scan shorter than this runs on one thread
    tile: int = 32  # B >= cache line / element size, and a B x B tile of two operands fits in L1 (8.2)
    #: the tiled-vector form visits its W x W register tiles in blocks of this many points per side,
    #: so the lines a tile's rows share with the next tile are still cached (bench_tuning)
    vector_tile_block: int = 64
    #: over a transposed input of stream_min_bytes or more the tiled-vector form runs in strips of
    #: this many rows (tiles.Tiles._strips): longer strips read each transposed row in longer
    #: pieces, but need larger per-thread buffers (bench_tuning, bench_transposed)
    strip_rows: int = 256
    strips_per_thread: int = 4  # fewer strips would leave threads idle: the blocks share the work out finer
    strip_buffer_bytes: int = 8 << 20  # a thread's strip buffers stay in the last-level cache
    accumulators: int = 4  # independent vector accumulators in a long reduction (hides the add latency)
    #: an output at least this large (half the last-level cache), which its kernel does not read, is
    #: written with non-temporal stores by a row's passes and by the strips of a transposed input:
    #: it would not stay cached, and they skip reading each line before writing it.  Streaming
    #: pointwise loops keep plain stores, which interleave with their loads (bench_tuning)
    stream_min_bytes: int = 16 << 20
    #: the next outer point's input rows are prefetched while a later pass of the current one computes
    #: (the first pass of a row then finds them in L2), when they take at most this many bytes
    prefetch_max_bytes: int = 256 << 10
    #: a vector loop computing at least one expensive op per element of each large row it streams
    #: prefetches those rows this far ahead, where the hardware prefetcher's loads come too late
    #: (bench_tuning)
    prefetch_ahead_bytes: int = 2 << 10
    cache_line: int = 64
    #: a kernel-local array (a scratch row, a carried buffer, split partial results) of at most this
    #: many bytes lives on the running thread's stack, saving an allocation and a free per call;
    #: OpenMP's and Python's threads have stacks of megabytes (bench_tuning)
    stack_array_max_bytes: int = 16 << 10
    wide_sum_min: int = 1 << 12  # a scalar float32 sum at least this long accumulates in double
    #: a float sum whose innermost loop adds one element per accumulator and step (a column walk, a
    #: strided row) adds blocks of this many into a partial sum first: the rounding error grows with
    #: about sum_block + n / sum_block additions instead of n
    sum_block: int = 32
    #: bytes of a row one step of the outer-vector form reads (several vectors of neighbouring
    #: columns): whole cache lines per row of a column walk, and independent accumulators
    outer_vector_bytes: int = 256
    #: the outer-vector and tiled-vector forms start their vectors on cache lines (after a scalar
    #: head) on rows at least this long (bench_tuning)
    outer_head_min: int = 256
    #: a column reduction over at least this many rows, whose partial results take at most
    #: split_partial_bytes per thread, runs as a split reduction (each thread streams whole rows
    #: into partial results, then combined) when its columns make fewer than two
    #: outer_vector_bytes strips per thread or it reads stream_min_bytes or more: a column walk
    #: reads a few lines per row at the row stride, and narrow columns leave threads idle; cached
    #: inputs with many strips keep the walk (bench_tuning)
    split_min_rows: int = 256
    split_partial_bytes: int = 64 << 10
    #: rows one step of a split reduction reads: each partial result is loaded and stored once for
    #: all of them (bench_tuning)
    split_row_step: int = 4
    #: the last points of a strip-mined loop, when at least this many, run as one vector whose lanes
    #: past the loop's end neither read nor write (a row of 14 or 28 outputs); fewer run as scalar
    #: points (bench_tuning)
    vector_tail_min: int = 4
    #: the widest element stride a vector loop reads with ``stax::vload_strided`` (a gather of W
    #: elements; stride 2 is two vector loads and a shuffle)
    max_vector_stride: int = 4
    #: a kernel opens its parallel region only when it has this much work (iterations, an expensive
    #: op such as exp counting expensive_weight times; an op of a row's values counts once a row):
    #: below it the region's fixed cost o of 8.4 outweighs the time it saves, and Algorithm 8.1's
    #: ``omp for`` runs orphaned on the calling thread (bench_tuning; bench_regions measures o)
    parallel_min_work: int = 1 << 14
    expensive_weight: int = 8
    #: a reduction of fewer rows than threads (a whole tensor to one value) over at least this
    #: many points cuts its rows into chunks the threads share (the chunked-reduction form): below
    #: it the region's fixed cost outweighs the time a second thread saves (bench_tuning)
    chunked_min_points: int = 1 << 17
    #: chunks per thread of a parallel loop, claimed dynamically (stax_parallel.cpp): a region's
    #: caller takes back the chunks of a pool thread that is not running, so a late thread costs at
    #: most what it claimed; more chunks cost one claim (an atomic compare-and-swap) each
    chunks_per_thread: int = 4

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            low, high, power = TUNING_RANGES.get(name, (0, TUNING_MAX, False))
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not whole or not low <= value <= high or (power and value & (value - 1)):
                kind = "a power of two" if power else "a whole number"
                raise StaxError(f"Tuning.{name} = {value!r}: give {kind} from {low} to {high}")

    def values(self) -> dict[str, int]:
        """The thresholds by their saved (upper-case) names, sorted."""
        return {f.name.upper(): getattr(self, f.name) for f in sorted(fields(self), key=lambda f: f.name)}

    @classmethod
    def from_values(cls, values: dict[str, int]) -> Tuning:
        """The inverse of :meth:`values`: every threshold in its range, or a ``StaxError`` naming it."""
        names = {f.name.upper(): f.name for f in fields(cls)}
        if not isinstance(values, dict) or set(values) != set(names):
            raise ValueError(f"expected a whole number for each of {sorted(names)}")
        return cls(**{names[k]: v for k, v in values.items()})


def parallel_depth(ranges: Sequence[int], threads: int, total: int, min_chunk: int = 512) -> int:
    """Algorithm 8.1: how many outer loops run in parallel."""
    seq, par, depth = total, 1, 0
    for r in ranges:
        if par >= 2 * threads or par == threads:
            break
        if seq / threads < min_chunk:
            break
        depth += 1
        par *= r
        seq = seq // max(r, 1)
    return depth


def chunk_iterations(loops: Sequence[tuple[int | str, int | str, int]], threads: int,
                     chunks_per_thread: int = Tuning.chunks_per_thread) -> int | str:
    """Iterations of one dynamically claimed chunk of the parallel loops ``(start, stop, step)``
    (numbers, or C++ expressions): Algorithm 8.1's per-thread share cut into ``chunks_per_thread``
    chunks; a C++ expression when a bound is one."""
    parts = threads * chunks_per_thread
    if all(isinstance(x, int) for loop in loops for x in loop):
        return max(1, -(-prod(-(-(stop - start) // step) for start, stop, step in loops) // parts))
    trips = " * ".join(f"(({stop}) - ({start}) + {step - 1}) / {step}" for start, stop, step in loops)
    return f"std::max<int64_t>(1, ({trips} + {parts - 1}) / {parts})"
