"""Memory bandwidth of stax kernels against a STREAM-style copy and triad built by the same
toolchain, and the per-call overhead of the smallest program against numpy.

Prints a table; every ratio is measured in this one run (the machine's bandwidth drifts).

    python -m experiments.bench.bandwidth [--n 67108864] [--threads 2]
"""
from __future__ import annotations

import argparse
import ctypes

import numpy as np

import stax
from stax.environment import isa_from_env, threads_from_env
from stax.runtime.build import build, load
from stax.measure.timing import time_call

STREAM_SOURCE = r"""
#include <cstdint>
extern "C" void stream_copy(const float* a, float* c, int64_t n) {
    #pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) c[i] = a[i];
}
extern "C" void stream_triad(const float* a, const float* b, float* c, float s, int64_t n) {
    #pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) c[i] = a[i] + s * b[i];
}
"""


class Stream:
    """STREAM copy and triad over ``n`` floats on ``threads`` threads, built by the kernels'
    toolchain; ``rates`` times them (bytes moved: 2n and 3n floats)."""

    def __init__(self, n: int, threads: int):
        import os
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        lib = load(build(STREAM_SOURCE, isa_from_env()))
        lib.stream_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        lib.stream_triad.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int64]
        a, b, c = (np.ones(n, np.float32) for _ in range(3))
        self.n = n
        self.copy = lambda: lib.stream_copy(a.ctypes.data, c.ctypes.data, n)
        self.triad = lambda: lib.stream_triad(a.ctypes.data, b.ctypes.data, c.ctypes.data, 3.0, n)

    def rates(self, repeat: int = 5) -> dict[str, float]:
        """GB/s of copy and triad, each the median of ``repeat`` timings."""
        return {"copy": 8 * self.n / time_call(self.copy, repeat=repeat) / 1e9,
                "triad": 12 * self.n / time_call(self.triad, repeat=repeat) / 1e9}

    def best(self, repeat: int = 1) -> float:
        """The larger of the two rates: the reference a kernel's bandwidth is a fraction of."""
        return max(self.rates(repeat).values())


def stream(n: int, threads: int) -> dict[str, float]:
    """STREAM copy and triad in GB/s."""
    return Stream(n, threads).rates()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=64 * 1024 * 1024, help="floats per large array")
    parser.add_argument("--threads", type=int, default=threads_from_env())
    args = parser.parse_args()
    n, side = args.n, int(round(args.n ** 0.5))
    rates = stream(n, args.threads)
    best = max(rates.values())
    print(f"ISA {isa_from_env().name}, {args.threads} threads; STREAM copy {rates['copy']:.1f} GB/s, "
          f"triad {rates['triad']:.1f} GB/s (reference: the larger)")
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    rows = []
    scale = stax.compile(lambda x: x * 2 + 1, x, threads=args.threads)
    t = time_call(lambda: scale(x), repeat=5)
    rows.append(("x * 2 + 1", n * 8, t, time_call(lambda: x * 2 + 1, repeat=3)))
    m = x[: side * side].reshape(side, side)
    rowsum = stax.compile(lambda x: x.sum(-1), m, threads=args.threads)
    t = time_call(lambda: rowsum(m), repeat=5)
    rows.append((f"row sum {side}x{side}", side * side * 4 + side * 4, t, time_call(lambda: m.sum(-1), repeat=3)))
    print(f"{'program':24s} {'bytes':>12s} {'stax ms':>9s} {'GB/s':>7s} {'of STREAM':>9s} {'numpy ms':>9s}")
    for name, nbytes, t, t_np in rows:
        print(f"{name:24s} {nbytes:12d} {t * 1e3:9.2f} {nbytes / t / 1e9:7.1f} {nbytes / t / 1e9 / best:9.2f} "
              f"{t_np * 1e3:9.2f}")
    small = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    tiny = stax.compile(lambda x: x * 2 + 1, small, threads=args.threads)
    t_stax, t_np = time_call(lambda: tiny(small)), time_call(lambda: small * 2 + 1)
    print(f"per-call time of x * 2 + 1 on 64x128: stax {t_stax * 1e6:.2f} us, numpy {t_np * 1e6:.2f} us "
          f"(ratio {t_stax / t_np:.2f})")


if __name__ == "__main__":
    main()
