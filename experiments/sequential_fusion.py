"""What the sequential fusion rule buys (seed 7.2, Proposition 7.3 (1) against (2)): a printed table.

On shifted-read and stencil programs and on random programs of shifted views, every
elementwise node materialized (``CostModel(max_inline_ops=0)``, so each shift is a real
producer/consumer pair), for each dependence rule:

- ``pairs``: candidate fusions, node pairs the rule does not forbid;
- ``greedy`` / ``exact``: modeled traffic (Definition 7.3, bytes) of Algorithm 7.1 and of the
  CP-SAT optimum (``fusion="cpsat"``) under that rule;
- ``kernels``: the greedy partition's kernel count;
- ``ms``: the median time of a call of the compiled greedy program (the kernels and the
  wrapper): the parallel rule's kernels run their outer loops on every thread but do not fuse
  across a shift; the sequential rule's fuse across it and run on one thread;
- ``par1.ms``: the parallel rule's program on one thread (fusion's effect without OpenMP's).

Usage: ``python -m experiments.sequential_fusion [--size N] [--random K]`` (about a minute).
"""
from __future__ import annotations

import argparse
import random
from typing import Callable

import numpy as np

import stax
from stax.frontend import trace
from stax.lowering import lower
from stax.reference import evaluate
from stax.scheduler.nodes import Scheduler
from stax.strategy import run_fusion
from stax.timing import time_call

RULES = ("parallel", "sequential")
MATERIALIZE = stax.CostModel(max_inline_ops=0)


def shift_1d(x):
    y = x * 2
    return y[1:] + y[:-1]


def stencil_3pt(x):
    y = x.tanh()
    return (y[2:] + y[1:-1] + y[:-2]) * (1 / 3)


def stencil_5pt(x):
    y = x * 0.5
    return y[1:-1, 1:-1] * 4 - y[:-2, 1:-1] - y[2:, 1:-1] - y[1:-1, :-2] - y[1:-1, 2:]


def prefix_chain(x):
    y = x * 2
    z = y[1:] * y[:-1]
    w = z[1:] - z[:-1]
    return w[1:] + w[:-1]


def upwind_2d(x):
    y = x.exp()
    return y[1:, 1:] - y[:-1, 1:] - y[1:, :-1]


def random_program(seed: int) -> tuple[Callable, tuple[int, ...]]:
    """A chain of pointwise ops and shifted views ``v[k:] op v[:-k]`` along random dims."""
    rng = random.Random(seed)
    rank = rng.choice((1, 2))
    steps = [(rng.choice(("tanh", "mul", "shift")), rng.randrange(rank), rng.choice((1, 2)),
              rng.choice(("add", "sub", "mul"))) for _ in range(rng.randint(3, 6))]

    def program(x):
        v = x
        for kind, dim, k, op in steps:
            if kind == "tanh":
                v = v.tanh()
            elif kind == "mul":
                v = v * 0.5
            else:
                head = [slice(None)] * rank
                tail = [slice(None)] * rank
                head[dim], tail[dim] = slice(k, None), slice(None, -k)
                v = getattr(v[tuple(head)], {"add": "__add__", "sub": "__sub__", "mul": "__mul__"}[op])(v[tuple(tail)])
        return v
    program.__name__ = f"random{seed}"
    return program, (rank,)


def cases(size: int, randoms: int) -> list[tuple[str, Callable, tuple[int, ...]]]:
    side = int(size ** 0.5)
    fixed = [("shift_1d", shift_1d, (size,)), ("stencil_3pt", stencil_3pt, (size,)),
             ("prefix_chain", prefix_chain, (size,)), ("stencil_5pt", stencil_5pt, (side, side)),
             ("upwind_2d", upwind_2d, (side, side))]
    out = list(fixed)
    for seed in range(randoms):
        fn, (rank,) = random_program(seed)
        out.append((fn.__name__, fn, (size,) if rank == 1 else (side, side)))
    return out


def row(name: str, fn: Callable, shape: tuple[int, ...]) -> dict:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    graph = trace(fn, x)
    want = evaluate(graph, x.copy())[0]
    result = {"program": name, "shape": "x".join(map(str, shape))}
    for rule in RULES:
        problem = Scheduler(lower(graph, MATERIALIZE)).fusion_problem(dependence=rule)
        nodes = problem.nodes
        result[f"{rule}.pairs"] = len(nodes) * (len(nodes) - 1) // 2 - len(problem.forbidden)
        result[f"{rule}.greedy"] = run_fusion("greedy", problem).cost
        result[f"{rule}.exact"] = run_fusion("cpsat", problem).cost
        compiled = stax.compile(fn, x, cost_model=MATERIALIZE, dependence=rule)
        np.testing.assert_allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
        result[f"{rule}.kernels"] = len(compiled.block_kernels)
        result[f"{rule}.ms"] = time_call(lambda: compiled(x), repeat=5) * 1e3
    one_thread = stax.compile(fn, x, cost_model=MATERIALIZE, threads=1)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="elements of the input")
    parser.add_argument("--random", type=int, default=6, help="random programs of shifted views")
    args = parser.parse_args()
    rows = [row(*case) for case in cases(args.size, args.random)]
    print(table(rows))
    print("traffic in bytes (Definition 7.3); ms: median call time of the greedy program, "
          f"{stax.runtime.default_threads()} threads for parallel kernels")


if __name__ == "__main__":
    main()
