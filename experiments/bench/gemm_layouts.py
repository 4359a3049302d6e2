"""GFLOP/s of numpy's BLAS on a product whose right operand is stored transposed (``x @ w.t()``, read
in place with a transpose flag) against the same product with the operand stored as it is read,
and the copy that stores it so: the figures behind lowering's rule that a transpose two or more
products take as their right operand is stored once (``Lowering._shared_right_transpose``).
One BLAS thread, one process, alternating rounds.  A benchmark, not a test.

    python -m experiments.bench.gemm_layouts [--rounds 5] [--shapes 32x128x768 ...]
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
from threadpoolctl import threadpool_limits

from stax.measure.timing import time_call

#: M x K x N: a recurrent cell's steps (batch 32) and transformer-sized linear layers
SHAPES = ("32x128x768", "32x256x768", "32x256x1024", "256x256x1024", "512x512x1376", "512x1376x512")


def row(shape: str, rounds: int) -> dict[str, float]:
    """Median GFLOP/s in place and stored, and the copy's time as a fraction of an in-place call."""
    m, k, n = (int(x) for x in shape.split("x"))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    stored, out = np.ascontiguousarray(w.T), np.empty((m, n), np.float32)
    calls = {"in_place": lambda: np.matmul(x, w.T, out=out), "stored": lambda: np.matmul(x, stored, out=out),
             "copy": lambda: np.copyto(stored, w.T)}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    with threadpool_limits(1):
        for _ in range(rounds):
            for name, call in calls.items():
                samples[name].append(time_call(call, 3))
    seconds = {name: statistics.median(s) for name, s in samples.items()}
    flops = 2 * m * k * n
    return {"in_place": flops / seconds["in_place"] / 1e9, "stored": flops / seconds["stored"] / 1e9,
            "copy_calls": seconds["copy"] / seconds["in_place"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per figure")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), metavar="MxKxN", help="default: %(default)s")
    args = parser.parse_args()
    print("GFLOP/s on one BLAS thread; copy = numpy's transposing copy of the operand, in in-place calls")
    print(f"{'M x K x N':>14} {'in place':>9} {'stored':>7} {'ratio':>6} {'copy':>6}")
    for shape in args.shapes:
        r = row(shape, args.rounds)
        print(f"{shape:>14} {r['in_place']:9.1f} {r['stored']:7.1f} {r['stored'] / r['in_place']:6.2f} "
              f"{r['copy_calls']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
