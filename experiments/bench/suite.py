"""Memory-bound programs of the suite at three sizes: kernels before and after fusion, modeled
bytes (Definition 7.3), Stax's time against numpy (the op-by-op reference evaluator) and, when
PyTorch is installed, TorchInductor; achieved bandwidth as a fraction of STREAM; page faults per
call; compile times: cold (gcc included, an empty kernel cache), the pipeline alone (trace to
source, the kernels found in the process's cache) and warm (a new process, the kernels found in
the cache on disk and the modules' bytecode in ``__pycache__``).  Prints a table (a benchmark, not a test).

The host's bandwidth drifts by tens of percent from one minute to the next, so the fraction of
STREAM is taken pair by pair: each batch of calls is followed by one STREAM copy and triad, the
pair's ratio is the program's GB/s over the better of the two, and the table shows the median
ratio of PAIRS pairs (and the median time).

A second table times the idioms of model code that stax.passes.simplify rewrites (``x.pow(2)``,
``** 0.5``, ``x.norm(p=2)``) against their hand-expanded forms, alternating the two PAIRS times
in one run; the target is a ratio within 1.1 (where the two compile to the same C++, "same C++",
their ratio is the host's noise).

    python -m experiments.bench.suite [--sizes 64x128 1024 4096] [--programs softmax ...] [--inductor]
    python -m experiments.bench.suite --idioms --sizes 1024 --threads 1 --inductor   # the idioms only

A size is ``N`` (n x n inputs) or ``NxM`` (n rows, m columns where the program's width is free).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np

import stax
from experiments.bench.bandwidth import Stream
from instances.programs import PROGRAMS
from stax.reference import evaluate
from stax.environment import threads_from_env
from stax.measure.timing import time_call

MEMORY_BOUND = ("softmax", "layernorm", "rmsnorm", "bias_gelu", "adam_step", "batchnorm_stats", "logsumexp",
                "transposed_add", "example_7_2", "example_7_2/inline", "example_7_2/spec")
#: variants measured beside the defaults, which were chosen by such measurements: "/inline"
#: inlines shared expensive ops instead of materializing them (the spec's example 7.2 rule);
#: "/spec" fuses under the spec's rule="cpu" (Definition 7.2 without the default's split of a
#: pointwise loop where a reduction's rows end: example 7.2 keeps exp in a kernel of its own)
VARIANTS = {"inline": {"cost_model": stax.CostModel(materialize_shared_expensive=False)},
            "spec": {"rule": "cpu"}}
#: suite programs written as model code writes them -> the same program expanded by hand
IDIOMS = {"rmsnorm_pow": "rmsnorm", "mse_pow": "mse", "polynomial_pow": "polynomial",
          "normalize_norm": "normalize", "layernorm_pow": "layernorm"}


def page_faults(fn, calls: int = 5) -> float:
    """Minor page faults per call (first touches of fresh memory)."""
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def inductor_time(program, arrays, threads: int | None = None) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    tensors = [torch.from_numpy(a.copy()) for a in arrays]
    compiled = torch.compile(program.fn)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        with torch.no_grad():
            return time_call(lambda: compiled(*tensors), repeat=5)
    finally:
        torch.set_num_threads(before)


PAIRS = 7


def paired_with_stream(fn: Callable[[], object], nbytes: int, stream: Stream) -> tuple[float, float]:
    """Median seconds per call of ``fn``, and the median over PAIRS pairs of its GB/s (moving
    ``nbytes``) over STREAM's, STREAM timed right after each batch of calls."""
    times, fractions = [], []
    for _ in range(PAIRS):
        t = time_call(fn, repeat=1)
        times.append(t)
        fractions.append(nbytes / t / 1e9 / stream.best())
    return statistics.median(times), statistics.median(fractions)


def parse_size(text: str) -> tuple[int, int]:
    """``"N"`` -> (N, N); ``"NxM"`` -> (N, M)."""
    rows, _, columns = text.partition("x")
    try:
        return int(rows), int(columns or rows)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: write N (n x n inputs) or NxM, e.g. 64x128") from None


def compile_seconds(name: str, size: tuple[int, int]) -> float:
    """Seconds ``stax.compile`` takes on suite program ``name`` (``NAME/VARIANT``) at ``size``."""
    base, _, variant = name.partition("/")
    program = PROGRAMS[base]
    arrays = program.inputs(size[0], columns=size[1])
    start = time.perf_counter()
    stax.compile(program.fn, *arrays, **(VARIANTS[variant] if variant else {}))
    return time.perf_counter() - start


def warm_compile_seconds(name: str, size: tuple[int, int]) -> float:
    """``compile_seconds`` in a new process that finds the kernels in the on-disk cache, and the
    modules' bytecode in ``__pycache__`` as Python writes it by default (PYTHONDONTWRITEBYTECODE,
    which some hosts set, would recompile the modules a first compile imports in every process)."""
    code = f"from experiments.bench.suite import compile_seconds; print(compile_seconds({name!r}, {size}))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                env=env).stdout)


def measure(name: str, size: tuple[int, int], stream: Stream, inductor: bool) -> dict:
    base, _, variant = name.partition("/")
    options = VARIANTS[variant] if variant else {}
    program = PROGRAMS[base]
    arrays = program.inputs(size[0], columns=size[1])
    cold = compile_seconds(name, size)
    start = time.perf_counter()
    fused = stax.compile(program.fn, *arrays, **options)  # the kernels are cached now: the pipeline alone
    pipeline = time.perf_counter() - start
    unfused = stax.compile(program.fn, *arrays, fusion="none", **options)
    calls = [a.copy() for a in arrays]  # in-place programs update these; the timing does not care
    modeled = fused.modeled_traffic
    t_stax, of_stream = paired_with_stream(lambda: fused(*calls), modeled, stream)
    t_numpy = time_call(lambda: evaluate(fused.graph, *calls), repeat=3)
    row = {"program": name, "size": "x".join(map(str, size)), "kernels none": len(unfused.block_kernels),
           "kernels greedy": len(fused.block_kernels), "modeled MB": modeled / 1e6,
           "stax us": t_stax * 1e6, "numpy us": t_numpy * 1e6, "numpy/stax": t_numpy / t_stax,
           "GB/s": modeled / t_stax / 1e9, "of STREAM": of_stream,
           "faults/call": page_faults(lambda: fused(*calls)), "cold compile s": cold,
           "pipeline ms": pipeline * 1e3, "warm compile ms": warm_compile_seconds(name, size) * 1e3}
    if inductor:
        t_ind = inductor_time(program, arrays) if not variant else None
        row["inductor us"] = t_ind * 1e6 if t_ind else float("nan")
    return row


def measure_idiom(idiom: str, size: tuple[int, int], inductor: bool, threads: int | None) -> dict:
    """An idiom and its hand-expanded form compiled alike and timed alternately (PAIRS each)."""
    program, hand = PROGRAMS[idiom], PROGRAMS[IDIOMS[idiom]]
    arrays = program.inputs(size[0], columns=size[1])
    ours, theirs = (stax.compile(p.fn, *arrays, threads=threads) for p in (program, hand))
    times: dict[str, list[float]] = {"idiom": [], "hand": []}
    for _ in range(PAIRS):
        times["idiom"].append(time_call(lambda: ours(*arrays), repeat=1))
        times["hand"].append(time_call(lambda: theirs(*arrays), repeat=1))
    t_idiom, t_hand = statistics.median(times["idiom"]), statistics.median(times["hand"])
    row = {"idiom": idiom, "hand-expanded": hand.name, "size": "x".join(map(str, size)),
           "idiom us": t_idiom * 1e6, "hand us": t_hand * 1e6, "idiom/hand": t_idiom / t_hand,
           "vector pow": "v_pow" in ours.kernel_source, "same C++": ours.kernel_source == theirs.kernel_source}
    if inductor:
        t_ind = inductor_time(program, arrays, threads)
        row["inductor us"] = t_ind * 1e6 if t_ind else float("nan")
        row["idiom/inductor"] = t_idiom / t_ind if t_ind else float("nan")
    return row


def print_table(rows: list[dict]) -> None:
    columns = list(rows[0])
    print(" ".join(f"{c:>14s}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:>14.3f}" if isinstance(row[c], float) else f"{row[c]!s:>14s}" for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_size, nargs="+", default=[(64, 128), (1024, 1024), (4096, 4096)],
                        help="N (n x n) or NxM; default 64x128 1024 4096")
    parser.add_argument("--programs", nargs="+", default=list(MEMORY_BOUND),
                        help="suite programs, optionally NAME/VARIANT with VARIANT in " + ", ".join(VARIANTS))
    parser.add_argument("--inductor", action="store_true", help="also time torch.compile (needs torch)")
    parser.add_argument("--idioms", action="store_true", help="only the table of idioms beside their hand-expanded forms")
    parser.add_argument("--threads", type=int, default=None, help="threads of the idiom table (default: every core)")
    args = parser.parse_args()
    os.environ.setdefault("STAX_CACHE_DIR", tempfile.mkdtemp(prefix="stax-bench-"))
    idiom_rows = [measure_idiom(name, size, args.inductor, args.threads) for size in args.sizes for name in IDIOMS]
    if args.idioms:
        print_table(idiom_rows)
        return
    stax.compile(lambda x: x + 1, np.ones(4, np.float32))  # build the precompiled headers once
    warm_compile_seconds(args.programs[0], (8, 8))  # and the bytecode of what a warm compile imports
    stream = Stream(32 * 1024 * 1024, threads_from_env())
    rates = stream.rates()
    print(f"STREAM copy {rates['copy']:.1f} GB/s, triad {rates['triad']:.1f} GB/s at the start (each row's "
          f"fraction of STREAM pairs its own timings with STREAM runs); sizes are rows x columns")
    print_table([measure(name, size, stream, args.inductor) for size in args.sizes for name in args.programs])
    print("\nidioms beside their hand-expanded forms (alternating, same run)")
    print_table(idiom_rows)


if __name__ == "__main__":
    main()
