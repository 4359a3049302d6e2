"""The differential fuzzer: its generator's coverage, its failure detection and shrinking, a short
seeded sample (CI) and a long run (``-m slow``)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import stax
from experiments import fuzz_check
from experiments.fuzz import Tally, combos_for, fuzz_one, main
from experiments.fuzz_check import FUSIONS, ORDERS, Combo, cross_check, run_case
from instances.random_programs import OPS, FuzzProgram, generate
from experiments.fuzz_shrink import shrink


def test_generator_covers_what_the_fuzzer_promises():
    ops, dtypes, layouts, sizes, outputs, mutated = collections.Counter(), set(), set(), set(), set(), 0
    for seed in range(400):
        program = generate(seed)
        assert FuzzProgram.from_dict(program.to_dict()) == program
        graph = program.trace(seed)
        ops.update(s.op for s in program.steps)
        dtypes.update(i.dtype for i in program.inputs)
        layouts.update(i.layout for i in program.inputs)
        sizes.update(d for i in program.inputs for d in i.shape)
        outputs.add(len(graph.outputs))
        mutated += bool(graph.mutations)
    assert set(OPS) == set(ops)
    assert dtypes == {"float32", "float64", "int32", "int64", "bool"}
    assert layouts == {"c", "t", "flip", "step", "bcast"}
    assert {0, 1, 7, 17, 33} <= sizes and outputs == {1, 2, 3} and mutated >= 20


def test_programs_are_reproducible():
    assert generate(11) == generate(11) and generate(11) != generate(12)
    arrays = generate(11).arrays(3)
    for a, b in zip(arrays, generate(11).arrays(3)):
        assert a.strides == b.strides and np.array_equal(a, b)


def test_arrays_have_the_declared_shapes():
    for seed in range(300):
        program = generate(seed)
        assert [a.shape for a in program.arrays(seed)] == [i.shape for i in program.inputs], seed


def test_combinations_rotate_through_every_strategy():
    combos = [c for i in range(12) for c in combos_for(i, i, 3, nodes=5)]
    assert {c.fusion for c in combos} == set(FUSIONS) and {c.order for c in combos} == set(ORDERS)
    big = [c for i in range(12) for c in combos_for(i, i, 3, nodes=40)]
    assert not {c.fusion for c in big} & {"cpsat", "mwc"} and not {c.order for c in big} & {"cpsat", "dp"}


def test_a_wrong_answer_is_reported(monkeypatch):
    program = FuzzProgram.from_dict({"inputs": [[[5, 7], "float32", "t"]], "steps": [["sum", [0], [-1, False]]],
                                     "outputs": [1]})
    assert run_case(program, Combo(), 0) == []
    real = fuzz_check.evaluate
    monkeypatch.setattr(fuzz_check, "evaluate", lambda graph, *arrays, **kw: tuple(o + 1 for o in real(graph, *arrays, **kw)))
    [problem] = run_case(program, Combo(), 0)
    assert problem.startswith("output 0: 5 of 5 elements differ")


def test_a_compile_crash_is_reported(monkeypatch):
    program = generate(4)
    monkeypatch.setattr(stax, "compile_graph", lambda graph, options: 1 / 0)
    assert run_case(program, Combo(), 0) == ["compile: ZeroDivisionError: division by zero"]


def test_shrinking_keeps_only_what_the_failure_needs():
    program = next(p for p in map(generate, range(100)) if len(p.steps) >= 6 and "sin" in {s.op for s in p.steps})

    def fails(candidate: FuzzProgram, combo: Combo) -> bool:
        return combo.threads == 2 and any(s.op == "sin" for s in candidate.steps)
    small, combo = shrink(program, Combo(threads=2, reuse=False, isa="none"), fails)
    assert [s.op for s in small.steps] == ["sin"] and len(small.outputs) == 1
    assert combo == Combo(threads=2)
    assert all(d <= 1 for i in small.inputs for d in i.shape)


def test_cross_checks_pass_on_a_program_with_several_kernels():
    program = next(p for p in map(generate, range(100)) if len(p.steps) >= 6)
    problems, nodes = cross_check(program)
    assert problems == [] and nodes >= 1


def test_short_seeded_sample():
    """What CI runs: 25 programs, 3 combinations each, no mismatch, no cross-check failure."""
    tally, log = Tally(), []
    for index in range(25):
        fuzz_one(index, 2024, 3, None, tally, log.append)
    assert (tally.programs, tally.combinations) == (25, 75)
    assert (tally.failures, tally.cross_failures) == (0, 0), log


@pytest.mark.slow
def test_long_fuzz_run(tmp_path):
    tally = main(["--programs", "1000", "--seed", "99", "--out", str(tmp_path), "--progress", "0"])
    assert (tally.failures, tally.cross_failures) == (0, 0), tally.saved
