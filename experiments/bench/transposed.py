"""Layouts for the transposed add ``x + y.T`` at n x n (float32): the generated kernel (the
tiled-vector form of 8.2: 8 x 8 register transposes, in 64 x 64 blocks, or in strips over
inputs of ``Tuning.stream_min_bytes``) against hand-written candidates, each checked against numpy, timed
in one process, alternating.  A benchmark of what the code generator could emit, not a test.

- ``stream x + y``: no transposition, the floor (three arrays streamed);
- ``blocks BxB``: the generated kernel's traversal below ``stream_min_bytes``, for several block shapes;
- ``strips H``: two phases per strip of H rows of out, as the generated kernel's strips: y's
  strided strip is transposed into a per-thread buffer (rows padded by a cache line: its rows
  would be 16 KiB apart, like y's), then x and the buffer stream into out;
- ``strips 256 nt``: the same, out written with non-temporal stores, as the generated kernel's
  strips write an output of ``stream_min_bytes`` or more;
- parts of that work (PARTS), which do not compute x + y.T: ``strips 256 phase 1`` transposes
  every strip into the buffer and stops there; ``strips 256 reads`` only loads what phase 1
  loads, in its order (and sums it into out[0, 0]).  Their difference is what the buffer's
  stores cost.

    python -m experiments.bench.transposed [--n 4096] [--rounds 7]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

import stax
from instances.programs import PROGRAMS
from stax.runtime import build as runtime
from stax.environment import isa_from_env

#: the hand-written candidates (C++ that includes the kernels' stax_vec.h)
SOURCE = Path(__file__).with_suffix(".cpp")
CANDIDATES = {"stream x + y": "stream_add", "blocks 64x64": "blocks_64x64", "blocks 256x256": "blocks_256x256",
              "blocks 32x1024": "blocks_32x1024", "strips 32": "strips_32", "strips 64": "strips_64",
              "strips 256": "strips_256", "strips 256 nt": "strips_256_nt", "strips 256 phase 1": "strips_256_phase1",
              "strips 256 reads": "strips_256_reads"}
#: parts of the strips' work: they neither compute x + y.T nor move three arrays
PARTS = ("strips 256 phase 1", "strips 256 reads")


def kernels(n: int) -> dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]]:
    """Each candidate as a function of (x, y, out) on n x n float32 arrays (n a multiple of
    1024) returning its result: ``out``, or the generated kernel's own output."""
    if n % 1024:
        raise SystemExit(f"--n {n}: the hand-written candidates take n a multiple of 1024")
    isa = isa_from_env()
    if isa.width == 1:
        raise SystemExit("the candidates are vector code: this CPU (or STAX_ISA) has no vector level")
    library = runtime.load(runtime.build(SOURCE.read_text(), isa))
    found = {}
    for label, name in CANDIDATES.items():
        fn = getattr(library, name)
        fn.restype, fn.argtypes = None, [ctypes.c_void_p] * 3 + [ctypes.c_int64]
        found[label] = lambda x, y, out, fn=fn: fn(x.ctypes.data, y.ctypes.data, out.ctypes.data, n) or out
    program = PROGRAMS["transposed_add"]
    generated = stax.compile(program.fn, *program.inputs(n))
    found["generated"] = lambda x, y, out: generated(x, y)  # its output from the caching allocator
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x, y = (rng.random((args.n, args.n), dtype=np.float32) for _ in range(2))
    out, want = np.empty_like(x), x + y.T
    candidates = kernels(args.n)
    times = {label: [] for label in candidates}
    for _ in range(args.rounds):
        for label, fn in candidates.items():
            start = time.perf_counter()
            result = fn(x, y, out)
            times[label].append(time.perf_counter() - start)
            if label != "stream x + y" and label not in PARTS and not np.array_equal(result, want):
                raise SystemExit(f"{label}: the result differs from numpy's x + y.T")
    print(f"x + y.T at {args.n} x {args.n} float32, {args.rounds} rounds; GB/s counts three arrays")
    print(f"{'candidate':>18} {'best ms':>9} {'median ms':>10} {'GB/s':>7}")
    for label, t in times.items():
        gbs = f"{'-':>7}" if label in PARTS else f"{3 * x.nbytes / min(t) / 1e9:>7.1f}"
        print(f"{label:>18} {min(t) * 1e3:>9.2f} {statistics.median(t) * 1e3:>10.2f} {gbs}")


if __name__ == "__main__":
    main()
