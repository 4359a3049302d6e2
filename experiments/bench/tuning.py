"""The code generator's thresholds (``stax.Tuning``), each timed against neighbouring values.

For every threshold a program whose kernels it changes is compiled with the default Tuning and
with each alternative (``Options(tuning=...)``), and the builds are timed in this one process in
alternating batches (the machine's load falls on all of them alike).  The table shows each
alternative's median time over the rounds divided by the default's: above 1, the default is the
faster.  Rows whose alternative generates the same C++ as the default say so instead.  A
benchmark, not a test.

    python -m experiments.bench.tuning [--only strip_rows ...] [--rounds 7] [--scale 1.0]

What the thresholds were chosen from (figures of earlier hosts are in the git history of
stax/codegen/tuning.py and in the commit messages that set them):

- parallel_min_work: x * 2 + 1, RMSNorm and layernorm at a few hundred rows, one thread against
  two (the region's fixed cost against the time it saves; see also experiments.bench.regions).
- vector_tile_block, strip_rows, stream_min_bytes (strips): x + y.T at 4096
  (experiments.bench.transposed compares hand-written traversals of the same loop).
- stream_min_bytes (row passes), prefetch_ahead_bytes: softmax, exp-sum-amax and bias + GELU
  at 4096 x 4096.
- split_min_rows, split_row_step, outer_head_min: column sums and batch-norm statistics.
- chunked_min_points: the mean squared error between 65,536 and a million points, two threads.
- stack_array_max_bytes: softmax at 64 x 128, whose scratch row is on the stack or the heap.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

import stax
from stax.codegen.tuning import TUNING_MAX, Tuning
from experiments.textable import text_table
from stax.measure.timing import time_call

NEVER = TUNING_MAX  # a threshold no input reaches: the behaviour it enables is off


def _softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _exp_sum_amax(x):
    e = x.exp()
    return e.sum(-1), e.amax(-1)


def _rmsnorm(x):
    return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt()


def _mse(x, y):
    return ((x - y) * (x - y)).mean()


def _batchnorm_stats(x):
    mean = x.mean(0)
    return mean, ((x - mean) ** 2).mean(0)


@dataclass(frozen=True)
class Case:
    """One threshold on one program: ``shapes`` of its float32 inputs at scale 1."""

    threshold: str  # a field of stax.Tuning
    alternatives: tuple[int, ...]  # values timed against the default
    program: str
    fn: Callable
    shapes: tuple[tuple[int, ...], ...]
    threads: int = 2


CASES = (
    Case("parallel_min_work", (1 << 13, 1 << 16), "x * 2 + 1", lambda x: x * 2 + 1, ((128, 256),)),
    Case("parallel_min_work", (1 << 13, 1 << 16), "rmsnorm", _rmsnorm, ((128, 256),)),
    Case("vector_tile_block", (16, 4096), "x + y.T", lambda x, y: x + y.t(), ((4096, 4096), (4096, 4096)), 1),
    Case("strip_rows", (64, 128, 512), "x + y.T", lambda x, y: x + y.t(), ((4096, 4096), (4096, 4096))),
    Case("stream_min_bytes", (NEVER,), "x + y.T", lambda x, y: x + y.t(), ((4096, 4096), (4096, 4096))),
    Case("stream_min_bytes", (NEVER,), "softmax", _softmax, ((4096, 4096),)),
    Case("prefetch_ahead_bytes", (512, 1 << 10, 8 << 10), "exp sum amax", _exp_sum_amax, ((4096, 4096),)),
    Case("split_min_rows", (NEVER,), "x.sum(0)", lambda x: x.sum(0), ((4096, 4096),)),
    Case("split_min_rows", (NEVER,), "x.sum(0)", lambda x: x.sum(0), ((65536, 32),)),
    Case("chunked_min_points", (1 << 16,), "mse", _mse, ((256, 256), (256, 256))),
    Case("chunked_min_points", (1 << 18, NEVER), "mse", _mse, ((256, 512), (256, 512))),
    Case("chunked_min_points", (NEVER,), "mse", _mse, ((1024, 1024), (1024, 1024))),
    Case("split_row_step", (1, 2, 8), "batch-norm statistics", _batchnorm_stats, ((4096, 4096),)),
    Case("outer_head_min", (NEVER,), "batch-norm statistics", _batchnorm_stats, ((4096, 4096),), 1),
    Case("stack_array_max_bytes", (0,), "softmax", _softmax, ((64, 128),), 1),
)


def scaled(shape: tuple[int, ...], scale: float) -> tuple[int, ...]:
    """``shape`` with its extents above 256 scaled (a transposed pair stays a pair)."""
    return tuple(max(1, round(n * scale)) if n > 256 else n for n in shape)


def measure(case: Case, rounds: int, scale: float = 1.0) -> list[dict]:
    """One row per alternative: its median time over the rounds against the default's, or
    ``same C++`` when the alternative changes nothing in this program's kernels."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(scaled(s, scale)).astype(np.float32) for s in case.shapes]
    builds = {value: stax.compile(case.fn, *arrays, threads=case.threads,
                                  tuning=replace(Tuning(), **{case.threshold: value}))
              for value in (getattr(Tuning(), case.threshold), *case.alternatives)}
    default, *others = builds
    times: dict[int, list[float]] = {value: [] for value in builds}
    for _ in range(rounds):
        for value, f in builds.items():
            times[value].append(time_call(lambda: f(*arrays), repeat=3))
    base = statistics.median(times[default])
    shape = " ".join("x".join(map(str, a.shape)) for a in arrays)
    return [{"threshold": case.threshold, "program": f"{case.program} {shape}", "threads": case.threads,
             "default": default, "value": "never" if value == NEVER else value,
             "over default": ("same C++" if builds[value].kernel_source == builds[default].kernel_source
                              else statistics.median(times[value]) / base),
             "default us": base * 1e6}
            for value in others]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted({c.threshold for c in CASES}), help="thresholds to time")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    parser.add_argument("--scale", type=float, default=1.0, help="scale of the inputs' extents above 256 (default 1)")
    args = parser.parse_args()
    rows = [row for case in CASES if not args.only or case.threshold in args.only
            for row in measure(case, args.rounds, args.scale)]
    columns = ["threshold", "program", "threads", "default", "value", "over default", "default us"]
    print(text_table(columns, [[f"{r[c]:.3f}" if isinstance(r[c], float) else r[c] for c in columns] for r in rows],
                     right=["threads", "default", "value", "over default", "default us"]))


if __name__ == "__main__":
    main()
