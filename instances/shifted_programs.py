"""Shifted-read and stencil programs: where the sequential dependence rule fuses more (spec 7.2).

Each program reads a producer at shifted points (``y[1:] + y[:-1]``), a dependence of nonzero
distance that the parallel rule (distance 0) refuses to fuse and the sequential rule (distances
``<= 0``) accepts.  Their cost model materializes every elementwise node
(``CostModel(max_inline_ops=0)``), so each shift is a real producer/consumer pair rather than
an inlined recomputation.  ``size`` is the number of input elements: 1-D programs take
``(size,)``, 2-D ones a ``(side, side)`` square with ``side = isqrt(size)``.

    >>> [a.shape for a in SHIFTED_PROGRAMS["stencil_5pt"].inputs(64)]
    [(8, 8)]
"""
from __future__ import annotations

import math
import random

import numpy as np

from stax.lowering import CostModel

from instances.programs import Program

MATERIALIZE = CostModel(max_inline_ops=0)


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


def _vector(size: int, _: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((size,)).astype(np.float32)]


def _square(size: int, _: int, rng: np.random.Generator) -> list[np.ndarray]:
    side = math.isqrt(size)
    return [rng.standard_normal((side, side)).astype(np.float32)]


def _shifted(name: str, fn, rank: int, description: str) -> Program:
    return Program(name, fn, _vector if rank == 1 else _square, description, MATERIALIZE)


def random_shifted(seed: int) -> Program:
    """A chain of 3 to 6 steps, each ``tanh``, ``* 0.5`` or a shifted pair ``v[k:] op v[:-k]`` along
    a random dim (``k`` in 1, 2; ``op`` add, sub or mul), on a 1-D or 2-D input."""
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
                v = getattr(v[tuple(head)], f"__{op}__")(v[tuple(tail)])
        return v
    described = ", ".join(kind if kind != "shift" else f"shift{k}:{op}@{dim}" for kind, dim, k, op in steps)
    return _shifted(f"random_shifted_{seed}", program, rank, f"random shifted-view chain {seed}: {described}")


_FIXED = [
    _shifted("shift_1d", shift_1d, 1, "y = 2x; y[1:] + y[:-1]; x (size,)"),
    _shifted("stencil_3pt", stencil_3pt, 1, "3-point mean of tanh(x); x (size,)"),
    _shifted("prefix_chain", prefix_chain, 1, "three chained shifted pairs of 2x; x (size,)"),
    _shifted("stencil_5pt", stencil_5pt, 2, "5-point Laplacian of x / 2; x (s, s), s = isqrt(size)"),
    _shifted("upwind_2d", upwind_2d, 2, "2-D upwind difference of exp(x); x (s, s), s = isqrt(size)"),
]

SHIFTED_PROGRAMS: dict[str, Program] = {p.name: p for p in _FIXED}
