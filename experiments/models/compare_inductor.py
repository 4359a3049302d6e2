"""Stax next to TorchInductor on the same ATen graphs of real models (needs torch).

For each model of :mod:`experiments.models.suite`, the captured core-ATen FX graph (for a
training step: the joint forward + backward graph) is compiled twice:

- by stax (greedy fusion): kernels (fused blocks, extern matmuls among them), the modeled
  traffic of Definition 7.3, the peak of Definition 7.5 under each order strategy and the exact
  optimum (order ``dp``, or ``cpsat`` when the down-sets are too many), and the measured time;
- by TorchInductor (``torch._inductor.compile`` of the same FX graph, caches off): its
  scheduler nodes after fusion, its generated kernel count, its own peak estimates of the
  original order and of its three reordering heuristics (read from its ``torch._inductor.memory``
  log), and the measured time.

The two peaks are each compiler's own estimate and count buffers differently (Inductor counts
graph inputs it may free; stax counts only the buffers its wrapper allocates), so compare the
spread between orders within a row rather than across rows.

    python -m experiments.models.compare_inductor [--small] [MODEL ...]

``--zoo`` runs the model zoo (:mod:`experiments.models.zoo`) instead: for each module, whether
its forward pass and its training step compile (and agree with eager torch: the largest
absolute error of the step's outputs and updated buffers), the training step's median time by
stax, TorchInductor and eager torch at one and two threads (each compiled for that many, timed
in alternating rounds so that a shared machine's changing load falls on all three alike, each
after a pause longer than stax's longest solo window), the stax / Inductor ratio with a 95%
confidence interval from the rounds' paired ratios and whether it meets the goal of 1.0, the
kernels of each compiler, and the peak of stax's ``best`` order next to the exact optimum.

``--real-zoo`` runs the real-model zoo (torchvision, timm, transformers) forward and training:
:mod:`experiments.models.compare_real_zoo`.
"""
from __future__ import annotations

import argparse
import logging
import re
from typing import Any

import numpy as np

from experiments.sweep.config import ReferenceSpec
from experiments.sweep.measure import exact_order
from experiments.models.inductor_timing import THREADS, alternating_times, compiled_inductor, goal_verdict
from experiments.models.suite import MODELS
from experiments.models.zoo import ZOO, ZooModel
from stax.kernels import blas
from stax.scheduler.strategies import run_order
from stax.measure.timing import time_call
from stax.torch.capture import TorchProgram, require_torch

HEURISTICS = ("original", "lpmf", "bfs", "dfs")
INDUCTOR_ORDERS = {"Baseline": "original", "topological_sort_lpmf": "lpmf", "topological_sort_bfs": "bfs",
                   "topological_sort_dfs": "dfs"}
MIB = 1 << 20


def stax_row(program: TorchProgram) -> dict[str, Any]:
    compiled = program.compile(fusion="greedy", order="best")
    problem = compiled.order_problem
    peaks = {name: problem.peak(run_order(name, problem).order) for name in HEURISTICS}
    exact = exact_order(problem, ReferenceSpec(time_limit=60.0, order="dp"))
    externs = sum(1 for b in compiled.fusion.partition if compiled.fusion_problem.node_info.get(b[0], {}).get("kind") == "extern")
    arrays = program.arguments()
    return {"kernels": len(compiled.fusion.partition), "externs": externs, "traffic": compiled.modeled_traffic,
            "peaks": peaks, "exact": (exact.info.strategy, exact.peak, exact.status),
            "seconds": time_call(lambda: compiled(*arrays))}


class _MemoryLog(logging.Handler):
    """Collects TorchInductor's peak-memory estimates per order."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes, self.peaks = 0, {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if found := re.match(r"Reordering for peak memory -- (\d+) nodes", message):
            self.nodes = int(found.group(1))
        elif found := re.match(r"(\w+) peak memory: (\d+)", message):
            self.peaks[INDUCTOR_ORDERS.get(found.group(1), found.group(1))] = int(found.group(2))


def inductor_row(program: TorchProgram) -> dict[str, Any]:
    torch = require_torch()
    from torch._inductor import config, metrics
    config.force_disable_caches = True
    log, logger = _MemoryLog(), logging.getLogger("torch._inductor.memory")
    logger.addHandler(log)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        inputs = [torch.from_numpy(a.copy()) for a in program.example]
        metrics.reset()
        compiled = torch._inductor.compile(program.fx_graph, inputs)
        outputs = torch.utils._pytree.tree_leaves(compiled(*inputs))
    finally:
        logger.removeHandler(log)
    for got, want in zip(outputs, program.expected):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-3, atol=1e-3)
    return {"kernels": log.nodes, "generated": metrics.generated_kernel_count, "peaks": log.peaks,
            "seconds": time_call(lambda: compiled(*inputs))}


def print_table(rows: list[tuple[str, dict, dict]]) -> None:
    orders = " ".join(f"{o:>8}" for o in HEURISTICS)
    print(f"{'model':<20} {'compiler':<9} {'kernels':>12} {'traffic MiB':>11} {orders} {'exact':>14} {'time ms':>8}")
    for model, ours, theirs in rows:
        peaks = " ".join(f"{ours['peaks'][o] / MIB:8.2f}" for o in HEURISTICS)
        solver, optimum, status = ours["exact"]
        exact = f"{optimum / MIB:.2f} ({solver}{'' if status == 'optimal' else '?'})"
        print(f"{model:<20} {'stax':<9} {ours['kernels']:>6} ({ours['externs']:>2}x) {ours['traffic'] / MIB:11.2f} "
              f"{peaks} {exact:>14} {ours['seconds'] * 1e3:8.2f}")
        peaks = " ".join(f"{theirs['peaks'].get(o, float('nan')) / MIB:8.2f}" for o in HEURISTICS)
        print(f"{'':<20} {'inductor':<9} {theirs['kernels']:>6} ({theirs['generated']:>2}g) {'':>11} "
              f"{peaks} {'':>14} {theirs['seconds'] * 1e3:8.2f}")


#: alternating timing rounds of stax, Inductor and eager per thread count: with 11 paired ratios,
#: the median ratio's 95% interval spans the 3rd to the 9th smallest (stax.measure.timing.median_interval)
ROUNDS = 11
def _largest_error(program: TorchProgram, outputs: Any, arguments: list[np.ndarray]) -> float:
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    updated = [arguments[program.input_names.index(n)] for n in program.updated]
    pairs = list(zip(outputs, program.expected)) + list(zip(updated, program.expected_updates))
    return max(float(np.abs(np.asarray(got, np.float64) - want).max(initial=0)) for got, want in pairs)


def zoo_row(model: ZooModel, rounds: int = ROUNDS) -> dict[str, Any]:
    """Compile the forward pass and the training step; time the step by stax, Inductor and eager
    torch at each thread count, in alternating rounds (the machine's load moves between them)."""
    torch = require_torch()
    from torch._inductor import metrics
    row: dict[str, Any] = {}
    try:
        forward = model.forward()
        arguments = forward.arguments()
        row["forward_error"] = _largest_error(forward, forward.compile()(*arguments), arguments)
    except Exception as error:  # a refused module is a row of the table, not the end of the run
        row["forward_failure"] = f"{type(error).__name__}: {error}"
    try:
        program = model.training()
    except Exception as error:
        row["train_failure"] = f"{type(error).__name__}: {error}"
        return row
    before = torch.get_num_threads()
    try:
        for threads in THREADS:
            compiled = program.compile(fusion="greedy", order="best", threads=threads)
            arguments = program.arguments()
            if threads == THREADS[0]:
                row["train_error"] = _largest_error(program, compiled(*arguments), program.arguments())
                row["kernels"] = len(compiled.fusion.partition)
                problem = compiled.order_problem
                row["peak_best"] = problem.peak(run_order("best", problem).order)
                exact = exact_order(problem, ReferenceSpec(time_limit=30.0, order="dp"))
                row["peak_exact"], row["exact_status"] = exact.peak, exact.status
            metrics.reset()
            calls = {"stax": lambda: compiled(*arguments), "inductor": compiled_inductor(program, threads),
                     "eager": model.eager_training()}
            row["generated"] = metrics.generated_kernel_count
            row.update({f"{key}_{threads}": value for key, value in alternating_times(calls, rounds).items()})
    finally:
        torch.set_num_threads(before)
    return row


def print_zoo(rows: list[tuple[str, dict[str, Any]]]) -> None:
    times = "".join(f" {c + str(t):>11}" for t in THREADS for c in ("stax", "inductor", "eager"))
    steals = "".join(f" {'steal' + str(t):>6}" for t in THREADS)
    ratios = "".join(f" {'ratio' + str(t):>6} {'95% CI' + str(t):>10} {'goal' + str(t):>8}" for t in THREADS)
    print(f"{'module':<20} {'fwd':>3} {'train':>5} {'max error':>9}{times}{ratios}{steals} "
          f"{'kernels':>9} {'peak best':>9} {'optimum':>9}")
    for name, row in rows:
        forward = "yes" if "forward_error" in row else "no"
        if "train_error" not in row:
            print(f"{name:<20} {forward:>3} {'no':>5}  {row.get('train_failure', '')[:120]}")
            continue
        error = max(row["train_error"], row.get("forward_error", 0.0))
        cells = "".join(f" {row[c + '_' + str(t)] * 1e6:11.0f}" for t in THREADS for c in ("stax", "inductor", "eager"))
        ratios = "".join(
            f" {row[f'ratio_{t}']:6.2f} {'{:.2f}-{:.2f}'.format(*row[f'ratio_ci_{t}']):>10} "
            f"{goal_verdict(row[f'ratio_{t}'], row[f'ratio_ci_{t}']):>8}" for t in THREADS)
        optimum = f"{row['peak_exact'] / MIB:.2f}{'' if row['exact_status'] == 'optimal' else '?'}"
        steals = "".join(f" {100 * row[f'steal_{t}']:5.1f}%" for t in THREADS)
        print(f"{name:<20} {forward:>3} {'yes':>5} {error:9.1e}{cells}{ratios}{steals} "
              f"{row['kernels']:>4}/{row['generated']:<4} {row['peak_best'] / MIB:9.2f} {optimum:>9}")


def run_zoo(names: list[str], small: bool, rounds: int) -> None:
    rows = [(name, zoo_row(ZOO[name](small), rounds)) for name in names]
    gemm = blas.gemm("float32")
    print(f"stax's extern matmuls call {gemm.provider if gemm else 'np.matmul'}'s gemm (STAX_BLAS; stax.kernels.blas)")
    print("training step (loss and every parameter's gradient; batch norms update their running statistics): "
          f"median us at 1 and 2 threads over {rounds} alternating rounds; ratio = stax / Inductor, the median "
          "of the rounds' paired ratios, with its 95% confidence interval (order statistics of the rounds); "
          "goal = whether the ratio is at most 1.0: met (the whole interval), missed (none of it) or open "
          "(the interval straddles 1.0; the sign says which side the median lies on); steal = the share of "
          "CPU time the hypervisor gave other machines while that thread count was timed (noise no process "
          "here causes); kernels = stax fused blocks / Inductor generated kernels; peaks in MiB of stax's "
          "best order and the exact optimum (? = not proven). Max error: largest absolute difference from "
          "eager torch (outputs and updated buffers, forward and step)")
    print_zoo(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--small", action="store_true", help="the tests' tiny shapes")
    parser.add_argument("--zoo", action="store_true", help=f"the model zoo instead: {', '.join(ZOO)}")
    parser.add_argument("--real-zoo", action="store_true",
                        help="the real-model zoo instead (torchvision, timm, transformers: pip install -e '.[models]'; "
                             "experiments.models.compare_real_zoo)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"the zoo's alternating timing rounds per thread count (default {ROUNDS})")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.zoo or args.real_zoo:
        if args.real_zoo:
            from experiments.models.compare_real_zoo import run_real_zoo as run
            from experiments.models.real_zoo import REAL_ZOO as suite
        else:
            run, suite = run_zoo, ZOO
        unknown = [m for m in args.models if m not in suite]
        if unknown:
            parser.error(f"unknown zoo modules {unknown}; choose from {', '.join(suite)}")
        run(args.models or list(suite), args.small, args.rounds)
        return
    models = args.models or list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    programs = {m: MODELS[m](args.small) for m in models}
    # stax first: TorchInductor's OpenMP threads keep spinning after its kernels and would slow stax's
    ours = {m: stax_row(p) for m, p in programs.items()}
    rows = [(m, ours[m], inductor_row(p)) for m, p in programs.items()]
    print("kernels: stax = fused blocks (Nx = extern matmuls among them); inductor = scheduler nodes after "
          "fusion (Ng = generated kernels). Peaks in MiB, each compiler's own estimate; exact = optimal order "
          "(? = solver time limit, not proven)")
    print_table(rows)


if __name__ == "__main__":
    main()
