"""What the sequential fusion rule buys (spec 7.2, Proposition 7.3 (1) against (2)): a printed table.

On the shifted-read and stencil programs of ``instances/shifted_programs.py`` and on random
programs of shifted views, every elementwise node materialized (their cost model, so each shift
is a real producer/consumer pair), for each dependence rule:

- ``pairs``: candidate fusions, node pairs the rule does not forbid;
- ``greedy`` / ``exact``: modeled traffic (Definition 7.3, bytes) of Algorithm 7.1 and of the
  CP-SAT optimum (``fusion="cpsat"``) under that rule;
- ``kernels``: the greedy partition's kernel count;
- ``ms``: the median time of a call of the compiled greedy program (the kernels and the
  wrapper): the parallel rule's kernels run their outer loops on every thread but do not fuse
  across a shift; the sequential rule's fuse across it and run on one thread;
- ``par1.ms``: the parallel rule's program on one thread (fusion's effect without OpenMP's).

Usage: ``python -m experiments.studies.sequential_fusion [--size N] [--random K]`` (about a minute).
"""
from __future__ import annotations

import argparse

import numpy as np

import stax
from instances.programs import Program
from instances.shifted_programs import SHIFTED_PROGRAMS, random_shifted
from stax.compiler import fusion_problem_of
from stax.environment import threads_from_env
from stax.frontend.tracing import trace
from stax.reference import evaluate
from stax.scheduler.strategies import run_fusion
from stax.measure.timing import time_call

RULES = ("parallel", "sequential")


def cases(randoms: int) -> list[Program]:
    """The fixed shifted-read programs, then ``randoms`` random chains of shifted views."""
    return [*SHIFTED_PROGRAMS.values(), *(random_shifted(seed) for seed in range(randoms))]


def row(program: Program, size: int) -> dict:
    x, = program.inputs(size)
    fn, cost_model = program.fn, program.cost_model
    graph = trace(fn, x)
    want = evaluate(graph, x.copy())[0]
    result = {"program": program.name, "shape": "x".join(map(str, x.shape))}
    for rule in RULES:
        problem = fusion_problem_of(graph, stax.Options(cost_model=cost_model, dependence=rule))
        nodes = problem.nodes
        result[f"{rule}.pairs"] = len(nodes) * (len(nodes) - 1) // 2 - len(problem.forbidden)
        result[f"{rule}.greedy"] = run_fusion("greedy", problem).cost
        result[f"{rule}.exact"] = run_fusion("cpsat", problem).cost
        compiled = stax.compile(fn, x, cost_model=cost_model, dependence=rule)
        np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
        result[f"{rule}.kernels"] = len(compiled.block_kernels)
        result[f"{rule}.ms"] = time_call(lambda: compiled(x), repeat=5) * 1e3
    one_thread = stax.compile(fn, x, cost_model=cost_model, threads=1)
    result["par1.ms"] = time_call(lambda: one_thread(x), repeat=5) * 1e3
    return result


def table(rows: list[dict]) -> str:
    columns = ["program", "shape"] + [f"{r}.{c}" for c in ("pairs", "greedy", "exact", "kernels", "ms") for r in RULES]
    columns.append("par1.ms")
    short = {"parallel": "par", "sequential": "seq", "par1": "par1"}
    heads = [c if "." not in c else f"{short[c.split('.')[0]]}.{c.split('.')[1]}" for c in columns]

    def text(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    cells = [[text(r[c]) for c in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="elements of the input")
    parser.add_argument("--random", type=int, default=6, help="random programs of shifted views")
    args = parser.parse_args()
    rows = [row(program, args.size) for program in cases(args.random)]
    print(table(rows))
    print("traffic in bytes (Definition 7.3); ms: median call time of the greedy program, "
          f"{threads_from_env()} threads for parallel kernels")


if __name__ == "__main__":
    main()
