"""GFLOP/s of stax's narrow GEMM (``stax.kernels.narrow_gemm``) against numpy's BLAS on the products of
convolutions' GEMM forms: a weight of a few rows times the column matrix, and the weight
gradient (the output gradient times the columns read transposed).  One process, alternating
rounds, on one and two threads (the BLAS's through threadpoolctl).  A benchmark, not a test.

    python -m experiments.bench.narrow_gemm [--rounds 5] [--threads 1 2] [--shapes 32x288x2048 ...]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from stax.kernels import narrow_gemm
from stax.measure.timing import time_call

#: M x K x N of a convolution's forward GEMM (C_out x C * 9 x batch * OH * OW): the zoo's ResNet
#: block, its small CNN's three layers, and a ResNet stage at 64 channels
SHAPES = ("32x288x2048", "16x27x16384", "32x144x4096", "64x288x1024", "64x576x8192")
SETTLE_SECONDS = 0.25


def row(shape: str, threads: int, rounds: int) -> dict[str, float]:
    """Median GFLOP/s of the forward product and of the weight gradient, ours and the BLAS's."""
    m, k, n = (int(x) for x in shape.split("x"))
    rng = np.random.default_rng(0)
    weight, columns = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    grad = rng.standard_normal((m, n), dtype=np.float32)
    out, weight_grad = np.empty((m, n), np.float32), np.empty((m, k), np.float32)
    calls = {"forward ours": lambda: narrow_gemm.narrow_matmul(weight, columns, out, threads, (False, False)),
             "forward blas": lambda: np.matmul(weight, columns, out=out),
             "gradient ours": lambda: narrow_gemm.narrow_matmul(grad, columns, weight_grad, threads, (False, True)),
             "gradient blas": lambda: np.matmul(grad, columns.T, out=weight_grad)}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            # ours with the BLAS at one thread, as the wrapper runs it; a pause first, so that the
            # BLAS's threads, which spin a while after a call, do not take the cores ours needs
            time.sleep(SETTLE_SECONDS)
            with threadpool_limits(threads if name.endswith("blas") else 1):
                samples[name].append(time_call(call, 3))
    return {name: 2 * m * k * n / statistics.median(s) / 1e9 for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per figure")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), metavar="MxKxN", help="default: %(default)s")
    args = parser.parse_args()
    print("GFLOP/s; forward = weight (M x K) times columns (K x N); gradient = output gradient (M x N) times "
          "the columns read transposed; ratio = ours / BLAS")
    print(f"{'M x K x N':>14} {'threads':>7} {'fwd ours':>9} {'fwd blas':>9} {'ratio':>6} {'grad ours':>9} "
          f"{'grad blas':>9} {'ratio':>6}")
    for threads in args.threads:
        for shape in args.shapes:
            r = row(shape, threads, args.rounds)
            print(f"{shape:>14} {threads:>7} {r['forward ours']:9.1f} {r['forward blas']:9.1f} "
                  f"{r['forward ours'] / r['forward blas']:6.2f} {r['gradient ours']:9.1f} {r['gradient blas']:9.1f} "
                  f"{r['gradient ours'] / r['gradient blas']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
