"""The kernel generator's thresholds, each with the measurement that chose it, and Algorithm
8.1's parallel depth."""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import prod
from typing import Sequence


@dataclass(frozen=True)
class Tuning:
    """The kernel generator's thresholds (an ``Options`` field, saved in a Schedule by their
    upper-case names)."""

    blocked_scan_min: int = 1 << 14  # a 1-D scan shorter than this runs on one thread
    tile: int = 32  # B >= cache line / element size, and a B x B tile of two operands fits in L1 (8.2)
    #: the tiled-vector form visits its W x W register tiles in blocks of this many points per side, so
    #: that the lines a tile's rows share with the next tile (misaligned rows) are still cached
    #: (transposed add at 4096 on one thread: 40 ms unblocked, 22 ms in 64 x 64 blocks)
    vector_tile_block: int = 64
    #: over a transposed input of Tuning.stream_min_bytes or more the tiled-vector form runs in strips of
    #: this many rows (tiles.Tiles._strips).  x + y.T at 4096, experiments/bench_transposed.py, best
    #: of 9, two runs: the generated kernel in strips of 64 rows 14.7 and 16.8 ms, in 64 x 64 blocks
    #: 18.2 and 19.6; hand-written strips of 32 rows 16.9 and 16.8, of 64 rows 16.0 and 17.9.  Longer
    #: strips read each transposed row in longer pieces (1 KiB at 256 float32 rows): the generated
    #: kernel, same process, alternating, median time against 64 rows: at 4096 0.95 and 0.93 (128
    #: rows), 0.93, 0.97 and 0.94 (256, the last of 21 rounds), 1.07 (512); at 2048 0.94 (128 rows)
    #: and 0.86 (256)
    strip_rows: int = 256
    strips_per_thread: int = 4  # fewer strips would leave threads idle: the blocks share the work out finer
    strip_buffer_bytes: int = 8 << 20  # a thread's strip buffers (4.2 MB at 4096 float32 columns) stay in L3
    accumulators: int = 4  # independent vector accumulators in a long reduction (hides the add latency)
    #: an output at least this large (half the last-level cache), which its kernel does not read, is
    #: written with non-temporal stores by the passes over a row: it would not stay in the caches, and
    #: they skip the read of every line before its write.  Streaming pointwise loops keep plain
    #: stores: there the stores interleave with the loads and the computation, and non-temporal ones
    #: measured slower (bias+GELU 16 -> 24 ms, the Adam step 20 -> 35 ms at 4096 x 4096, one thread).
    #: The rows of a transposed input's strips (tiles.Tiles._strips) stream theirs: x + y.T, same
    #: process, 21 alternating rounds, median time 0.90 of plain stores' at 4096 (0.58 -> 0.67 of
    #: STREAM), 0.91 at 2048
    stream_min_bytes: int = 16 << 20
    #: the next outer point's input rows are prefetched while a later pass of the current one computes
    #: (the first pass of a row then finds them in L2), when they take at most this many bytes
    prefetch_max_bytes: int = 256 << 10
    #: a vector loop computing at least one expensive op per element of each large row it streams
    #: prefetches those rows this far ahead: its loads come too late for the hardware prefetcher.
    #: Same process, alternating builds, 4096 x 4096: e = x.exp(); e.sum(-1), e.amax(-1) 0.88-0.89
    #: of its time at 2 KiB (0.98 at 512 bytes, 0.93 at 1 KiB, 0.89-0.93 at 8 KiB), bias+GELU
    #: 0.88-0.94 (0.95-0.98 at 1 and 8 KiB); the Adam step, one sqrt for four streams, 0.95-1.06, so
    #: it does not prefetch
    prefetch_ahead_bytes: int = 2 << 10
    cache_line: int = 64
    #: a kernel-local array (a scratch row, a carried buffer, split partial results) of at most this
    #: many bytes lives on the running thread's stack, not the heap: no allocation and free per call
    #: (softmax at 64 x 128, same process, 21 alternating batches: 0.94 of its time on one thread,
    #: 0.99 on two); OpenMP's and Python's threads have stacks of megabytes
    stack_array_max_bytes: int = 16 << 10
    wide_sum_min: int = 1 << 12  # a scalar float32 sum at least this long accumulates in double
    #: a float sum whose innermost loop adds one element per accumulator and step (a column walk, a
    #: strided row) adds blocks of this many into a partial sum first: the rounding error grows with
    #: about Tuning.sum_block + n / Tuning.sum_block additions instead of n
    sum_block: int = 32
    #: bytes of a row one step of the outer-vector form reads (several vectors of neighbouring
    #: columns): whole cache lines per row of a column walk, and independent accumulators
    outer_vector_bytes: int = 256
    #: the outer-vector and tiled-vector forms start their vectors on cache lines (after a scalar
    #: head) on rows at least this long: on numpy-allocated 4096 x 4096 inputs, batch-norm statistics
    #: 5.4 -> 4.5 ms and x + y.t() about 10% faster
    outer_head_min: int = 256

    #: a column reduction (the outer-vector form's blocks) over at least this many rows, whose partial
    #: results take at most Tuning.split_partial_bytes per thread, runs as a split reduction instead when its
    #: columns make fewer than two Tuning.outer_vector_bytes strips per thread or it reads Tuning.stream_min_bytes
    #: or more: each thread streams a chunk of whole rows into partial results of its own, which are
    #: then combined.  A column walk reads a few lines per row at the row stride, which DRAM serves at
    #: about half the rate of a stream, and narrow columns leave threads idle (x.sum(0), two cores,
    #: one run: 4096 x 4096 4.5 -> 3.0 ms, 65536 x 32 0.27 -> 0.10 ms, 16384 x 128 0.12 -> 0.09 ms);
    #: on cache-resident inputs with many strips the column walk stays (1024 x 1024: 0.09 vs 0.12 ms)
    split_min_rows: int = 256
    split_partial_bytes: int = 64 << 10
    #: rows one step of a split reduction reads: each partial result is loaded and stored once for
    #: all of them.  One run each, time over that of half as many rows a step: batch-norm statistics
    #: at 4096 x 4096 0.71 (2 rows), 0.91 (4), 1.00 (8); x.sum(0) at 4096 x 4096 0.81, 0.93, 0.91
    split_row_step: int = 4

    #: the widest element stride a vector loop reads with ``stax::vload_strided`` (a gather of W
    #: elements; stride 2 is two vector loads and a shuffle)
    max_vector_stride: int = 4

    #: a kernel opens its parallel region only when it has this much work (iterations, an expensive
    #: op such as exp counting Tuning.expensive_weight times): below it the region's fixed cost o of 8.4
    #: outweighs the time it saves.  Under libgomp o was about 2 us on two cores (x * 2 + 1 on
    #: 64 x 128: 5.6 us a call with two threads, 3.3 us with one).  On an AVX2 host, where an empty
    #: region on stax_parallel.cpp's pool cost 0.2-0.3 us, x * 2 + 1 on 64 x 128 took 2.2 and 1.7 us
    #: with two threads, 2.2 and 1.5 with one (two runs), and the threshold stayed at 2**16.
    #: Algorithm 8.1's loops keep their ``omp for``, which then runs orphaned on the calling thread.
    #: An op of a row's values only counts once a row: RMSNorm and layernorm at 64 x 128, whose rsqrt
    #: is a row's, then run on one thread (same process, 21 alternating batches, three runs: RMSNorm
    #: 0.81-0.90 of its time on two, layernorm 0.78-1.04, its best batches 1.02-1.06).  On an AVX-512
    #: host whose empty region costs 0.7 us, two runs, calls in us at 2**16 and 2**14: x * 2 + 1 at
    #: 128 x 256 4.24 -> 3.07 and 4.61 -> 3.32, at 128 x 384 6.07 -> 4.23 and 6.54 -> 4.46, RMSNorm
    #: at 128 x 256 5.01 -> 4.06 and 6.56 -> 3.57, layernorm 8.39 -> 6.49 and 7.75 -> 6.04, bias +
    #: GELU at 32 x 128 2.91 -> 2.49 and 3.05 -> 2.36; at 2**13 the 64 x 128 programs gained in one
    #: run and lost in the other (RMSNorm 2.22 -> 2.97, then 2.53 -> 2.14), so the threshold is 2**14
    parallel_min_work: int = 1 << 14
    expensive_weight: int = 8
    #: chunks per thread of a parallel loop, claimed dynamically (stax_parallel.cpp): a region's
    #: caller takes back the chunks of a pool thread that is not running, so a late thread costs at
    #: most what it claimed; more chunks cost one claim (an atomic compare-and-swap) each
    chunks_per_thread: int = 4

    def values(self) -> dict[str, int]:
        """The thresholds by their saved (upper-case) names, sorted."""
        return {f.name.upper(): getattr(self, f.name) for f in sorted(fields(self), key=lambda f: f.name)}

    @classmethod
    def from_values(cls, values: dict[str, int]) -> Tuning:
        """The inverse of :meth:`values`: every threshold, each a whole number, or a ``ValueError``."""
        names = {f.name.upper(): f.name for f in fields(cls)}
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in values.values())
        if set(values) != set(names) or not whole:
            raise ValueError(f"expected a whole number for each of {sorted(names)}, found {values!r}")
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
