"""A seeded generator of random, always-valid tensor programs (for sweeps and fuzzing).

``random_program(seed)`` draws a *recipe* — a list of steps over a pool of values whose shapes
the generator tracks — and wraps it as a suite :class:`~instances.programs.Program`.  Steps are
bounded elementwise ops (so values stay finite), broadcasting binary ops between values whose
shapes broadcast, reductions over random dims with or without ``keepdim``, and views
(transpose, reshape that splits or merges dims, unsqueeze).  Values are reused by later steps
(shared subexpressions) and the program returns one to ``max_outputs`` values, preferring ones
no step consumed.

    >>> program = random_program(3)
    >>> import stax
    >>> graph = stax.trace(program.fn, *program.inputs(1))
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from .programs import Program

Shape = tuple[int, ...]

UNARY = ("tanh", "sigmoid", "abs", "neg", "relu", "sin", "cos", "erf")
BINARY = ("add", "sub", "mul", "maximum", "minimum")
REDUCTIONS = ("sum", "amax", "amin", "mean")
DIMS = (1, 2, 3, 4, 5, 6, 8, 16, 17, 32)


@dataclass(frozen=True)
class Step:
    """One operation: ``op`` on pool values ``args`` with attributes ``attrs``."""

    op: str
    args: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Recipe:
    """Input shapes, steps (each appends one value to the pool) and the returned pool indices.

    Calling a recipe replays it on proxy tensors (or anything with torch's methods).
    """

    input_shapes: tuple[Shape, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]

    def __call__(self, *inputs: Any) -> tuple:
        pool = list(inputs)
        for step in self.steps:
            pool.append(_apply(step, [pool[i] for i in step.args]))
        return tuple(pool[i] for i in self.outputs)


def _apply(step: Step, args: list) -> Any:
    attrs = dict(step.attrs)
    x = args[0]
    if step.op in UNARY:
        return getattr(x, step.op)()
    if step.op in BINARY:
        return getattr(x, step.op)(args[1])
    if step.op == "scale":
        return x * attrs["factor"]
    if step.op in REDUCTIONS:
        return getattr(x, step.op)(attrs["dim"], keepdim=attrs["keepdim"])
    if step.op == "transpose":
        return x.transpose(*attrs["dims"])
    if step.op == "reshape":
        return x.reshape(*attrs["shape"])
    if step.op == "unsqueeze":
        return x.unsqueeze(attrs["dim"])
    raise ValueError(f"unknown recipe op {step.op!r}")


def _broadcast(a: Shape, b: Shape) -> Shape | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class _Builder:
    """Draws steps while tracking the shape of every pool value."""

    def __init__(self, rng: random.Random, rank: int):
        self.rng = rng
        self.full = tuple(rng.choice(DIMS) for _ in range(rank))
        self.shapes: list[Shape] = []
        self.steps: list[Step] = []
        self.used: set[int] = set()

    def input_shapes(self, count: int) -> tuple[Shape, ...]:
        shapes = [self.full]
        for _ in range(count - 1):  # broadcastable variants: some dims 1, or a suffix of the shape
            if self.rng.random() < 0.5:
                shapes.append(tuple(1 if self.rng.random() < 0.4 else d for d in self.full))
            else:
                shapes.append(self.full[self.rng.randrange(len(self.full)):])
        self.shapes = list(shapes)
        return tuple(shapes)

    def add(self, op: str, args: tuple[int, ...], result: Shape, **attrs: Any) -> None:
        self.steps.append(Step(op, args, tuple(sorted(attrs.items()))))
        self.used.update(args)
        self.shapes.append(result)

    def pick(self) -> int:
        """A pool value, biased towards recent ones so chains form (older ones give sharing)."""
        n = len(self.shapes)
        return max(self.rng.randrange(n), self.rng.randrange(n))

    def step(self) -> None:
        kind = self.rng.choices(("unary", "binary", "reduce", "view"), weights=(4, 5, 2, 1))[0]
        a = self.pick()
        shape = self.shapes[a]
        if kind == "unary":
            if self.rng.random() < 0.2:
                self.add("scale", (a,), shape, factor=self.rng.choice((0.5, 2.0, -1.5)))
            else:
                self.add(self.rng.choice(UNARY), (a,), shape)
        elif kind == "binary":
            partners = [b for b in range(len(self.shapes)) if _broadcast(shape, self.shapes[b]) is not None]
            b = self.rng.choice(partners)  # a itself always broadcasts with a
            self.add(self.rng.choice(BINARY), (a, b), _broadcast(shape, self.shapes[b]))
        elif kind == "reduce" and shape:
            dim = self.rng.randrange(-len(shape), len(shape))
            keepdim = self.rng.random() < 0.6
            out = list(shape)
            if keepdim:
                out[dim] = 1
            else:
                del out[dim]
            self.add(self.rng.choice(REDUCTIONS), (a,), tuple(out), dim=dim, keepdim=keepdim)
        else:
            self.view(a, shape)

    def view(self, a: int, shape: Shape) -> None:
        choice = self.rng.random()
        if len(shape) >= 2 and choice < 0.4:
            i, j = self.rng.sample(range(len(shape)), 2)
            out = list(shape)
            out[i], out[j] = out[j], out[i]
            self.add("transpose", (a,), tuple(out), dims=(i, j))
        elif len(shape) >= 2 and choice < 0.7:  # merge two adjacent dims
            i = self.rng.randrange(len(shape) - 1)
            out = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
            self.add("reshape", (a,), out, shape=out)
        elif shape and choice < 0.85 and any(d % 2 == 0 for d in shape):  # split an even dim
            i = self.rng.choice([k for k, d in enumerate(shape) if d % 2 == 0])
            out = shape[:i] + (2, shape[i] // 2) + shape[i + 1:]
            self.add("reshape", (a,), out, shape=out)
        else:
            dim = self.rng.randrange(len(shape) + 1)
            self.add("unsqueeze", (a,), shape[:dim] + (1,) + shape[dim:], dim=dim)


def random_recipe(seed: int, steps: int = 8, max_inputs: int = 3, max_outputs: int = 3,
                  max_rank: int = 3) -> Recipe:
    """A random valid recipe; the same arguments always give the same recipe."""
    rng = random.Random(seed)
    builder = _Builder(rng, rng.randint(1, max_rank))
    inputs = builder.input_shapes(rng.randint(1, max_inputs))
    for _ in range(rng.randint(1, steps)):
        builder.step()
    computed = range(len(inputs), len(builder.shapes))
    unused = [i for i in computed if i not in builder.used]
    count = rng.randint(1, max_outputs)
    rest = [i for i in computed if i not in unused]
    outputs = (unused + rng.sample(rest, min(len(rest), max(0, count - len(unused)))))[:max(count, 1)]
    return Recipe(inputs, tuple(builder.steps), tuple(sorted(outputs)))


def random_program(seed: int, **options: Any) -> Program:
    """:func:`random_recipe` as a suite Program; its inputs ignore ``size`` (shapes are drawn)."""
    recipe = random_recipe(seed, **options)

    def make_inputs(size: int, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.standard_normal(s).astype(np.float32) for s in recipe.input_shapes]
    steps = ", ".join(s.op for s in recipe.steps)
    return Program(f"random_{seed}", recipe, make_inputs, f"random program {seed}: {steps}")
