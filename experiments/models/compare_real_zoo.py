"""Stax next to TorchInductor and eager torch on the real-model zoo (:mod:`experiments.models.real_zoo`:
torchvision, timm and transformers models with random weights), forward pass and training step.

For each model and mode, a row gives: whether the captured graph imports, and how (``make_fx``
on real tensors, or on fake ones for code that reads tensor values while traced); the graph
breaks ``torch.compile`` would make (``torch._dynamo.explain``); the error against a float64 run
of the model (:func:`experiments.models.real_zoo.relative_error`) of stax, of Inductor's compilation of
the same captured graph and of eager float32 torch; each compiler's cold compile time (stax:
translation, scheduling, code generation and the C++ build into an empty kernel cache; Inductor:
``torch._inductor.compile`` of the FX graph, caches off, into an empty cache directory); the
median time per call at 1 and 2 threads over alternating rounds with stax / Inductor and its 95%
interval (:func:`experiments.models.inductor_timing.alternating_times`); and the peak memory of one
call measured for stax, Inductor and eager in a child process (:mod:`experiments.models.peak_memory`).

    python -m experiments.models.compare_inductor --real-zoo [--small] [--rounds N] [MODEL ...]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from typing import Any, Callable, Iterator

from experiments.models.inductor_timing import THREADS, alternating_times, compiled_inductor, goal_verdict
from experiments.models.peak_memory import call_peak, in_child
from experiments.models.real_zoo import REAL_ZOO, RealModel, float64_outputs, relative_error
from stax.torch.capture import TorchProgram, require_torch

MODES = ("forward", "training")
MIB = 1 << 20
#: seconds the peak-memory child of one model and mode may take (capture and both compilations)
PEAK_TIMEOUT = 1800.0


def program_of(model: RealModel, mode: str) -> TorchProgram:
    return model.forward() if mode == "forward" else model.training()


def eager_call(model: RealModel, mode: str) -> Callable[[], Any]:
    return model.eager_forward() if mode == "forward" else model.eager_training()


def graph_breaks(model: RealModel, mode: str) -> int:
    """The graph breaks of ``torch.compile`` on the model's forward pass or loss (dynamo's explain)."""
    torch = require_torch()
    if mode == "forward":
        model.module.eval()
        with torch.no_grad():
            found = torch._dynamo.explain(model.module)(*model.inputs)
    else:
        model.module.train()
        found = torch._dynamo.explain(lambda *a: model.loss(model.module(*a), *model.targets))(*model.inputs)
    torch._dynamo.reset()
    return found.graph_break_count


@contextlib.contextmanager
def _empty_caches() -> Iterator[None]:
    """Stax's kernel cache and Inductor's cache directory pointed at new empty directories."""
    saved = {key: os.environ.get(key) for key in ("STAX_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    with tempfile.TemporaryDirectory(prefix="stax-cold-") as fresh:
        os.environ.update(STAX_CACHE_DIR=os.path.join(fresh, "stax"), TORCHINDUCTOR_CACHE_DIR=os.path.join(fresh, "ind"))
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _timed(make: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    made = make()
    return made, time.perf_counter() - start


def real_row(name: str, mode: str, small: bool, rounds: int) -> dict[str, Any]:
    """One row of the table (see the module docstring); a failure is the row's ``failure``."""
    torch = require_torch()
    model = REAL_ZOO[name](small)
    row: dict[str, Any] = {"model": name, "mode": mode}
    try:
        row["breaks"] = graph_breaks(model, mode)
        program = program_of(model, mode)
    except Exception as error:  # a model that does not import is a row of the table, not the end of the run
        row["failure"] = f"import: {type(error).__name__}: {error}"
        return row
    row["path"] = f"make_fx/{program.provenance['tracing']}"
    reference = float64_outputs(model, mode)
    row["eager_error"] = relative_error(program.expected, reference)
    before = torch.get_num_threads()
    try:
        for threads in THREADS:
            with _empty_caches():
                compiled, stax_seconds = _timed(lambda: program.compile(fusion="greedy", order="best", threads=threads))
                inductor, inductor_seconds = _timed(lambda: compiled_inductor(program, threads))
            arguments = program.arguments()
            if threads == THREADS[0]:
                row["stax_error"] = relative_error(compiled(*program.arguments()), reference)
                row["inductor_error"] = relative_error(torch.utils._pytree.tree_leaves(inductor()), reference)
                row["stax_compile"], row["inductor_compile"] = stax_seconds, inductor_seconds
            calls = {"stax": lambda: compiled(*arguments), "inductor": inductor, "eager": eager_call(model, mode)}
            row.update({f"{key}_{threads}": value for key, value in alternating_times(calls, rounds).items()})
    except Exception as error:
        row["failure"] = f"compile or run: {type(error).__name__}: {error}"
        return row
    finally:
        torch.set_num_threads(before)
    try:
        row["peaks"] = in_child("experiments.models.compare_real_zoo", ["--peak", name, mode] + ["--small"] * small,
                                PEAK_TIMEOUT)
    except Exception as error:
        row["peak_failure"] = f"{type(error).__name__}: {error}"
    return row


def peaks(name: str, mode: str, small: bool) -> dict[str, int]:
    """Each runtime's measured peak of its first call at one thread (run in the measuring child)."""
    torch = require_torch()
    model = REAL_ZOO[name](small)
    program = program_of(model, mode)
    compiled = program.compile(fusion="greedy", order="best", threads=1)
    arguments = program.arguments()
    calls = {"stax": lambda: compiled(*arguments), "inductor": compiled_inductor(program, 1),
             "eager": eager_call(model, mode)}
    torch.set_num_threads(1)
    return {runtime: call_peak(call) for runtime, call in calls.items()}


def print_real_zoo(rows: list[dict[str, Any]]) -> None:
    times = "".join(f" {c + str(t):>10}" for t in THREADS for c in ("stax", "ind", "eager"))
    ratios = "".join(f" {'ratio' + str(t):>6} {'95% CI':>10} {'goal':>7}" for t in THREADS)
    print(f"{'model':<22} {'mode':<8} {'import':<12} {'brk':>3} {'err stax':>8} {'err ind':>8} {'err eag':>8} "
          f"{'cc stax':>7} {'cc ind':>7}{times}{ratios} {'peak stax':>9} {'ind':>7} {'eager':>7}")
    for row in rows:
        head = f"{row['model']:<22} {row['mode']:<8}"
        if "failure" in row:
            print(f"{head} {row.get('path', 'no'):<12} {row.get('breaks', ''):>3}  {row['failure'][:160]}")
            continue
        errors = f"{row['stax_error']:8.1e} {row['inductor_error']:8.1e} {row['eager_error']:8.1e}"
        compiles = f"{row['stax_compile']:7.1f} {row['inductor_compile']:7.1f}"
        cells = "".join(f" {row[f'{c}_{t}'] * 1e6:10.0f}" for t in THREADS for c in ("stax", "inductor", "eager"))
        verdicts = "".join(f" {row[f'ratio_{t}']:6.2f} {'{:.2f}-{:.2f}'.format(*row[f'ratio_ci_{t}']):>10} "
                           f"{goal_verdict(row[f'ratio_{t}'], row[f'ratio_ci_{t}']):>7}" for t in THREADS)
        peak = row.get("peaks")
        memory = (" ".join(f"{peak[r] / MIB:{w}.1f}" for r, w in (("stax", 9), ("inductor", 7), ("eager", 7)))
                  if peak else f"  {row.get('peak_failure', '')[:60]}")
        print(f"{head} {row['path']:<12} {row['breaks']:>3} {errors} {compiles}{cells}{verdicts} {memory}")


def run_real_zoo(names: list[str], small: bool, rounds: int) -> None:
    rows = [real_row(name, mode, small, rounds) for name in names for mode in MODES]
    print(f"real zoo ({'tiny' if small else 'small'} configs, random weights): import = capture path "
          "(make_fx on real or fake tensors); brk = torch.compile's graph breaks (dynamo explain); err = largest "
          "error against a float64 run (each output's max |difference| over its max |value|) of stax, Inductor "
          "(same captured graph) and eager float32; cc = cold compile seconds; median us per call at 1 and 2 "
          f"threads over {rounds} alternating rounds; ratio = stax / Inductor with its 95% interval, goal <= 1.0 "
          "(met / missed / open); peak = MiB the resident set grows during one call (child process, 1 thread)")
    print_real_zoo(rows)


def main() -> None:
    """The peak-memory child: ``python -m experiments.models.compare_real_zoo --peak MODEL MODE [--small]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peak", nargs=2, metavar=("MODEL", "MODE"), required=True,
                        help="measure one row's peak memory in this process and print it as JSON (the table's child)")
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    name, mode = args.peak
    if name not in REAL_ZOO or mode not in MODES:
        parser.error(f"choose a model of {', '.join(REAL_ZOO)} and a mode of {', '.join(MODES)}")
    print(json.dumps(peaks(name, mode, args.small)))


if __name__ == "__main__":
    main()
