"""The fixed cost of a parallel region (spec 8.4's o): the kernels' runtime (stax_parallel.cpp's
pool) against libgomp, on the same loop built both ways.  Each runtime is timed in processes of
its own, alternating (one's threads spinning after a batch would slow the other's), and the
table shows the median over the rounds of each process's best batch, in microseconds a region,
and the median of the rounds' ratios.  A benchmark, not a test.

    python -m experiments.bench.regions [--rounds 5] [--threads 2] [--elements 0 2000 8000 32000]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from stax.runtime import build as runtime
from stax.environment import isa_from_env

SOURCE = r"""
#include <chrono>
#include <cstdint>
// Seconds a region: `regions` regions of `threads` threads, each sharing out `elements` updates.
extern "C" double region_seconds(int64_t regions, int64_t elements, int threads, float* data) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < regions; ++r) {
    #pragma omp parallel num_threads(threads)
    {
      #pragma omp for schedule(dynamic, (elements + 4 * threads - 1) / (4 * threads) + 1) nowait  // as the kernels'
      for (int64_t i = 0; i < elements; ++i) data[i] = data[i] * 0.999f + 1.0f;
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / regions;
}
"""
RUNTIMES = ("pool", "libgomp")


def library(kind: str) -> ctypes.CDLL:
    """The loop built for the kernels' runtime (as every kernel is) or for libgomp."""
    isa = isa_from_env()
    if kind == "pool":
        return runtime.load(runtime.build(SOURCE, isa))
    directory = Path(tempfile.mkdtemp())
    (directory / "regions.cpp").write_text(SOURCE)
    subprocess.run(["g++", *runtime.compile_flags(isa), "-shared", str(directory / "regions.cpp"), "-o",
                    str(directory / "regions.so")], check=True)
    return ctypes.CDLL(str(directory / "regions.so"))


def best_seconds(kind: str, elements: int, threads: int, batches: int = 7) -> float:
    """The best of ``batches`` batches of about 50 ms, in seconds a region."""
    fn = library(kind).region_seconds
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
    data = np.ones(max(elements, 1), np.float32)
    regions = max(1, int(0.05 / fn(1000, elements, threads, data.ctypes.data) / 1000) * 1000)
    return min(fn(regions, elements, threads, data.ctypes.data) for _ in range(batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--elements", type=int, nargs="+", default=[0, 2000, 8000, 32000])
    parser.add_argument("--one", choices=RUNTIMES, help=argparse.SUPPRESS)  # a round's process
    args = parser.parse_args()
    if args.one:
        print(" ".join(str(best_seconds(args.one, n, args.threads)) for n in args.elements))
        return
    times = {kind: [] for kind in RUNTIMES}
    for _ in range(args.rounds):
        for kind in RUNTIMES:
            out = subprocess.run([sys.executable, "-m", "experiments.bench.regions", "--one", kind,
                                  "--threads", str(args.threads), "--elements", *map(str, args.elements)],
                                 check=True, capture_output=True, text=True).stdout
            times[kind].append([float(t) for t in out.split()])
    print(f"{args.threads} threads, {args.rounds} rounds; us a region (median of the rounds' best batches)")
    print(f"{'elements':>10} {'pool':>10} {'libgomp':>10} {'pool/libgomp':>13}")
    for i, n in enumerate(args.elements):
        pool, gomp = ([r[i] for r in times[k]] for k in RUNTIMES)
        ratio = statistics.median(p / g for p, g in zip(pool, gomp))
        print(f"{n:>10} {statistics.median(pool) * 1e6:>10.3f} {statistics.median(gomp) * 1e6:>10.3f} {ratio:>13.3f}")


if __name__ == "__main__":
    main()
