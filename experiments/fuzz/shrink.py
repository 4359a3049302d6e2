"""Shrinking a failing fuzz case (delta debugging on the program's choices).

Greedy one-change-at-a-time reduction, repeated until nothing smaller fails: drop an output,
drop a step (its readers read its first argument instead), make an input smaller, contiguous or
float32, and move each compile option to its default.  A candidate that no longer traces is
skipped; the predicate decides what "still fails" means.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from stax.errors import StaxError

from experiments.fuzz.check import Combo
from instances.random_programs import FuzzProgram, Input, Step


def _without_step(program: FuzzProgram, k: int) -> FuzzProgram:
    removed = len(program.inputs) + k
    target = program.steps[k].args[0]

    def remap(i: int) -> int:
        return target if i == removed else i - (i > removed)
    steps = tuple(Step(s.op, tuple(map(remap, s.args)), s.params) for j, s in enumerate(program.steps) if j != k)
    return FuzzProgram(program.inputs, steps, tuple(dict.fromkeys(map(remap, program.outputs))))


def _with_input(program: FuzzProgram, i: int, spec: Input) -> FuzzProgram:
    return replace(program, inputs=program.inputs[:i] + (spec,) + program.inputs[i + 1:])


def candidates(program: FuzzProgram) -> Iterator[FuzzProgram]:
    """Programs one simplification away from ``program``, biggest cuts first."""
    for j in range(len(program.outputs)):
        if len(program.outputs) > 1:
            yield replace(program, outputs=program.outputs[:j] + program.outputs[j + 1:])
    for k in reversed(range(len(program.steps))):
        yield _without_step(program, k)
    for i, spec in enumerate(program.inputs):
        if spec.layout != "c":
            yield _with_input(program, i, replace(spec, layout="c"))
        if spec.dtype != "float32":
            yield _with_input(program, i, replace(spec, dtype="float32"))
        for d, size in enumerate(spec.shape):
            for smaller in sorted({1, 2, size // 2, size - 1}):
                if 0 < smaller < size:
                    shape = spec.shape[:d] + (smaller,) + spec.shape[d + 1:]
                    yield _with_input(program, i, replace(spec, shape=shape))


def _traces(program: FuzzProgram) -> bool:
    try:
        program.trace()
    except StaxError:
        return False
    return True


def shrink(program: FuzzProgram, combo: Combo, fails: Callable[[FuzzProgram, Combo], bool],
           budget: int = 200) -> tuple[FuzzProgram, Combo]:
    """The smallest (program, combo) reachable by single simplifications that still ``fails``;
    at most ``budget`` predicate calls."""
    calls = 0
    improved = True
    while improved and calls < budget:
        improved = False
        for candidate in candidates(program):
            if calls >= budget:
                break
            if not _traces(candidate):
                continue
            calls += 1
            if fails(candidate, combo):
                program, improved = candidate, True
                break
        for simpler in combo.simpler():
            if calls >= budget:
                break
            calls += 1
            if fails(program, simpler):
                combo, improved = simpler, True
    return program, combo
