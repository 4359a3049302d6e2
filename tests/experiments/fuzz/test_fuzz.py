"""The differential fuzzer: its generator's coverage, its failure detection and shrinking, a short
seeded sample (CI) and a long run (``-m slow``)."""
from __future__ import annotations

import collections
import json

import numpy as np
import pytest

import stax
from experiments.fuzz import check as fuzz_check
from experiments.fuzz.run import Tally, combos_for, fuzz_one, main
from experiments.fuzz.check import FUSIONS, ORDERS, Combo, cross_check, run_case
from instances.random_programs import OPS, FuzzProgram, generate
from experiments.fuzz.shrink import shrink
from stax.reference import ROUNDING_UNITS, evaluate
from tests.helpers import ROOT


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


#: the cosine of a float32 sum of 300 products near 674 (a fuzz case of seed 2042)
ILL_CONDITIONED = {"inputs": [[[1], "float32", "c"], [[300], "float32", "c"]],
                   "steps": [["maximum", [0, 1], []], ["mul", [0, 2], []], ["sum", [3], [0, False]], ["cos", [4], []]],
                   "outputs": [5]}


def test_an_output_as_near_as_rounding_moves_it_matches():
    """The kernels' order of the sum moves the cosine by 7e-5, past RTOL of the float64 and the
    numpy float32 references (whose pairwise sum is nearer), but not past where rounding in some
    order can move it (the spread of references perturbed by stax.reference's rounding); the
    same sum missing one of its terms is still a wrong answer."""
    program, seed = FuzzProgram.from_dict(ILL_CONDITIONED), 2042006485
    graph = program.trace(seed)
    x, y = program.arrays(seed)
    terms = x * np.maximum(x, y)
    want = evaluate(graph, x, y, upcast=True)[0]
    [spread] = fuzz_check.rounding_spreads(program, graph, seed, [want])
    in_order = np.asarray(np.cos(np.add.accumulate(terms)[-1]), np.float32)  # one float32 accumulator
    missing_a_term = np.asarray(np.cos(terms[:-1].astype(np.float64).sum()), np.float32)
    assert fuzz_check.compare("cos", in_order, want, want) is not None  # without the spread: a mismatch
    assert fuzz_check.compare("cos", in_order, want, want, spread=spread) is None
    assert fuzz_check.compare("cos", missing_a_term, want, want, spread=spread) is not None
    assert run_case(program, Combo(isa="none"), seed) == []


def test_rounding_perturbs_by_at_most_the_backward_error_of_any_order():
    """A sum of 1000 float32 terms evaluated with ``rounding`` lands within ROUNDING_UNITS * 1000
    units of float32 rounding of the sum of the terms' magnitudes from the exact sum (and its own
    result's rounding), and not on it; integer values and views are left exact."""
    steps = [["sum", [0], [0, False]], ["transpose", [1], [0, 1]], ["sum", [3], [1, False]]]
    program = FuzzProgram.from_dict({"inputs": [[[1000], "float32", "c"], [[4, 5], "int32", "c"]], "steps": steps,
                                     "outputs": [2, 3, 4]})
    graph = program.trace(7)
    x, ints = program.arrays(7)
    exact = x.astype(np.float64).sum()
    bound = ROUNDING_UNITS * (1000 * np.abs(x).astype(np.float64).sum() + abs(exact)) * 2.0 ** -24
    for seed in range(5):
        total, transposed, row_sums = evaluate(graph, x, ints, upcast=True, rounding=np.random.default_rng(seed))
        assert 0 < abs(float(total) - exact) <= bound + abs(exact) * 2.0 ** -24  # the float32 output's rounding
        np.testing.assert_array_equal(transposed, ints.T)
        np.testing.assert_array_equal(row_sums, ints.T.sum(1))


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


def test_a_comparison_rounding_can_flip_matches_and_no_other():
    """``prod(sigmoid(x**2), 0) > 0`` over 284 rows: the exact products (1e-51) are below float32's
    smallest subnormal, so the kernels' products are 0 and the comparison False, where the float64
    reference says True and numpy's float32 one (stuck at the smallest subnormal) too.  Every run
    rounded to float32 underflows alike, so the spread covers those 33 columns (the program seed
    2024006093 of the short sample; avx2 kernels multiply 4 rows before the partial product, where
    the scalar loop, as numpy, gets stuck there); a flip where a comparison cannot flip is still wrong."""
    data = json.loads((ROOT / "tests" / "regressions" / "prod_underflow_compared_with_zero.json").read_text())
    program, seed = FuzzProgram.from_dict(data["program"]), data["data_seed"]
    graph, arrays = program.trace(seed), program.arrays(seed)
    want = evaluate(graph, *[a.copy() for a in arrays], upcast=True)[0]
    want32 = evaluate(graph, *[a.copy() for a in arrays])[0]
    [spread] = fuzz_check.rounding_spreads(program, graph, seed, [want])
    got = stax.compile(program, *arrays, isa="avx2", threads=1)(*[a.copy() for a in arrays])
    assert not got[:, :33].any() and want[:, :33].all() and want32[:, :33].all()
    assert fuzz_check.compare("out", got, want, want32) is not None  # without the spread: a mismatch
    assert fuzz_check.compare("out", got, want, want32, spread=spread) is None
    wrong = got.copy()
    wrong[0, 40] = False  # its product underflows too, but the column is True by x**2 > 0 alone
    assert fuzz_check.compare("out", wrong, want, want32, spread=spread) is not None


@pytest.mark.slow
def test_long_fuzz_run(tmp_path):
    tally = main(["--programs", "1000", "--seed", "99", "--out", str(tmp_path), "--progress", "0"])
    assert (tally.failures, tally.cross_failures) == (0, 0), tally.saved


def test_a_perturbed_run_keeps_a_max_equal_to_one_of_the_values_it_took():
    """Rounding perturbs the rounded ops only: a max stays exact in every perturbed run, so a max
    pooling's index (the window compared with its max) finds it (a tie then flips between runs)."""
    x = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    graph = stax.trace(lambda t: ((t * 3).amax(1, keepdim=True) == t * 3).any(1), x)
    for run in range(4):
        [found] = evaluate(graph, x, upcast=True, rounding=np.random.default_rng(run))
        assert found.all()
