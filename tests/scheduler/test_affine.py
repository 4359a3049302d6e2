"""Affine dependence analysis (spec 7.2 end, 7.7) and Farkas schedules (Lemma 7.1, Proposition 7.5)."""
from __future__ import annotations

from fractions import Fraction
from itertools import product
from math import floor

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers.theory.affine_schedule import AffineSchedule, Verification, dependences_of, one_dimensional_schedule, verify
from stax import CostModel
from stax.affine import (WORK_LIMIT, Access, Budget, DependenceProblem, Domain, Outcome, Polyhedron, WorkLimitReached,
                         apply, banerjee_test, dependence_pairs, determinant, enumeration_test, exact_test,
                         fully_permutable, gcd_test, integer_solutions, interchange, is_unimodular, lll_reduce,
                         pair_fusion, parallelepiped_tiling_legal, rectangular_tiling_legal, reversal, skew,
                         transformation_legal, transformation_preserves)
from stax.ir.indexing import Index, Mod

IDENTITY = [[1, 0], [0, 1]]
TESTS = (gcd_test, banerjee_test, exact_test, enumeration_test)


def stencil(n: int = 8) -> DependenceProblem:
    """``for i: for j: X[i][j] = X[i-1][j+1] + 1`` (spec 7.7): write X[i][j], read X[i-1][j+1]."""
    box = Domain.box((n, n))
    return DependenceProblem(Access.of(IDENTITY, [0, 0]), box, Access.of(IDENTITY, [-1, 1]), box)


# --- the spec's example -------------------------------------------------------------------------
@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.__name__)
def test_seed_stencil_distance_is_1_minus_1_carried_by_the_outer_loop(test):
    result = test(stencil())
    assert result.carried == (1,)
    assert result.distance == (1, -1)


def test_seed_stencil_interchange_illegal_skew_legal():
    delta = [(1, -1)]
    assert not transformation_legal(interchange(2, 0, 1), delta)
    assert transformation_legal(skew(2, 1, 0), delta)
    assert apply(skew(2, 1, 0), delta[0]) == (1, 0)
    assert not transformation_legal(reversal(2, 0), delta)
    # the same verdicts from the dependence polyhedra, without assuming uniformity
    assert not transformation_preserves(interchange(2, 0, 1), stencil(5))
    assert transformation_preserves(skew(2, 1, 0), stencil(5))


def test_theorem_7_2_needs_a_unimodular_matrix():
    assert is_unimodular(skew(3, 2, 0, 5)) and is_unimodular(interchange(3, 0, 2)) and is_unimodular(reversal(2, 1))
    assert not is_unimodular([[2, 0], [0, 1]])
    with pytest.raises(ValueError, match="unimodular"):
        transformation_legal([[2, 0], [0, 1]], [(1, 0)])


def test_transformation_preserves_a_non_uniform_dependence():
    """write X[i][j], read X[j][i] (a transpose): distances (d, -d); no interchange can order them."""
    box = Domain.box((4, 4))
    problem = DependenceProblem(Access.of(IDENTITY, [0, 0]), box, Access.of([[0, 1], [1, 0]], [0, 0]), box)
    assert exact_test(problem).carried == (1,) and exact_test(problem).distance is None
    assert transformation_preserves(IDENTITY, problem)
    assert not transformation_preserves(interchange(2, 0, 1), problem)


def test_access_from_stax_indices():
    i, j = Index.var("x0"), Index.var("x1")
    assert Access.from_indices([i + (-1), j * 2 + 1], ["x0", "x1"]) == Access.of([[1, 0], [0, 2]], [-1, 1])
    with pytest.raises(ValueError, match="not affine"):
        Access.from_indices([Index(((Mod(i, 4), 1),), 0)], ["x0"])


# --- GCD, Banerjee and exact against enumeration ------------------------------------------------
def test_gcd_and_banerjee_each_miss_what_the_other_sees():
    """X[2i+3] vs X[2j]: only the GCD test sees the parity; X[i] vs X[2j+10] on 0..4: only bounds."""
    box = Domain.box((5,))
    parity = DependenceProblem(Access.of([[2]], [3]), box, Access.of([[2]], [0]), box)
    far = DependenceProblem(Access.of([[1]], [0]), box, Access.of([[2]], [10]), box)
    assert not gcd_test(parity).possible and banerjee_test(parity).possible
    assert gcd_test(far).possible and not banerjee_test(far).possible
    assert not exact_test(parity).possible and not exact_test(far).possible


def test_integer_solutions_parametrize_every_solution():
    x0, basis = integer_solutions([[2, 3, -1], [0, 1, 1]], [6, 2], 3)
    for z in product(range(-2, 3), repeat=len(basis)):
        x = [x0[k] + sum(zc * b[k] for zc, b in zip(z, basis)) for k in range(3)]
        assert 2 * x[0] + 3 * x[1] - x[2] == 6 and x[1] + x[2] == 2


def test_exact_test_on_a_triangular_domain():
    """``0 <= j <= i < 6`` (a general inequality): X[i][j] written, X[j][i] read; both in the
    domain only on the diagonal, so the only pairs are loop-independent (level 3)."""
    tri = Domain(2, Domain.box((6, 6)).rows + ((1, -1, 0),))
    problem = DependenceProblem(Access.of(IDENTITY, [0, 0]), tri, Access.of([[0, 1], [1, 0]], [0, 0]), tri,
                                loop_independent=True)
    assert exact_test(problem).carried == enumeration_test(problem).carried == (3,)


@st.composite
def problems(draw, max_loops: int = 3) -> DependenceProblem:
    """Small nests of 1 to ``max_loops`` loops: coupled subscripts (up to 3), boxes cut by
    triangular (``i_a <= i_b``) or diagonal (``i_0 + i_1 <= k``) bounds, any common depth."""
    rank = draw(st.integers(1, 3))
    ds, dt = draw(st.integers(1, max_loops)), draw(st.integers(1, max_loops))

    def domain(d: int) -> Domain:
        box = Domain.box([draw(st.integers(1, 4)) for _ in range(d)])
        cut = draw(st.sampled_from(["none", "triangle", "diagonal"])) if d >= 2 else "none"
        if cut == "triangle":
            a, b = draw(st.permutations(range(d)))[:2]
            return Domain(d, box.rows + (tuple(int(c == b) - int(c == a) for c in range(d)) + (0,),))
        if cut == "diagonal":
            return Domain(d, box.rows + ((-1, -1) + (0,) * (d - 2) + (draw(st.integers(0, 5)),),))
        return box

    def access(d: int) -> Access:
        coeff = st.integers(-3, 3)
        return Access.of([[draw(coeff) for _ in range(d)] for _ in range(rank)],
                         [draw(st.integers(-4, 4)) for _ in range(rank)])
    return DependenceProblem(access(ds), domain(ds), access(dt), domain(dt),
                             common=draw(st.integers(0, min(ds, dt))), loop_independent=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(problems())
def test_tests_agree_with_enumeration_and_weaker_tests_are_conservative(problem):
    """GCD and Banerjee never miss a dependence; the exact test gives enumeration's verdict and,
    wherever every dependent pair of a level has one distance, that distance, within its work limit."""
    truth = enumeration_test(problem)
    pairs = dependence_pairs(problem)
    for test in (gcd_test, banerjee_test):
        result = test(problem)
        for got, want in zip(result.levels, truth.levels):
            assert got.level == want.level
            if want.possible:
                assert got.possible, f"{result.test} misses a dependence at level {got.level}"
            if got.possible and want.possible and got.distance is not None:
                assert got.distance == want.distance
    exact = exact_test(problem)
    assert exact.complete
    for got, want in zip(exact.levels, truth.levels):
        assert (got.level, got.possible, got.distance) == (want.level, want.possible, want.distance)
        if got.possible:
            assert got.witness in pairs[got.level]


# --- tiling (Definition 7.7, Theorem 7.3, Irigoin-Triolet) --------------------------------------
def tiled_order_preserves(distances, n: int, tiles, h=IDENTITY) -> bool:
    """Simulate tiling of an n x n nest by the hyperplanes ``h`` with sizes ``tiles``: tiles in
    lexicographic order, the original order inside a tile; check every dependence."""
    def key(i):
        return tuple(floor(v / b) for v, b in zip(apply(h, i), tiles)) + tuple(i)
    points = list(product(range(n), repeat=2))
    return all(key(i) < key(j) for d in distances for i in points
               for j in [tuple(a + b for a, b in zip(i, d))] if all(0 <= v < n for v in j))


@pytest.mark.parametrize("distances", [
    [(1, 0), (0, 1)], [(1, 1)], [(1, 0)], [(0, 1), (1, 2)],        # fully permutable
    [(1, -1)], [(0, 1), (1, -1)], [(1, -2), (1, 0)],               # not
])
def test_rectangular_tiling_legal_exactly_for_fully_permutable_bands(distances):
    legal = rectangular_tiling_legal(distances)
    assert legal == all(tiled_order_preserves(distances, 7, tiles) for tiles in [(2, 2), (3, 2), (2, 3)])


def test_skewing_makes_the_seed_stencil_tileable():
    delta = [(1, -1)]
    skewed = [apply(skew(2, 1, 0), d) for d in delta]
    assert not rectangular_tiling_legal(delta) and rectangular_tiling_legal(skewed)
    h = skew(2, 1, 0)   # parallelepiped tiles along the hyperplanes i = const and i + j = const
    assert parallelepiped_tiling_legal(h, delta) and tiled_order_preserves(delta, 7, (2, 2), h)
    assert not parallelepiped_tiling_legal(IDENTITY, delta)


def test_a_band_ignores_dependences_carried_outside_it():
    assert fully_permutable([(1, -1)], band=(1, 2)) and not fully_permutable([(0, -1)], band=(1, 2))
    assert tiled_order_preserves([(1, -1)], 7, (1, 3))   # tile only the inner loop


# --- Proposition 7.3 for a pair -----------------------------------------------------------------
def test_proposition_7_3_for_shifted_reads():
    n = Domain.box((12,))
    write = Access.of([[1]], [0])
    behind, same, ahead = (pair_fusion(write, n, Access.of([[1]], [k]), n) for k in (-1, 0, 1))
    assert (behind.sequential, behind.parallel, behind.deltas) == (True, False, ((-1,),))
    assert (same.sequential, same.parallel, same.deltas) == (True, True, ((0,),))
    assert (ahead.sequential, ahead.parallel, ahead.deltas) == (False, False, ((1,),))
    assert ahead.under(reversal(1, 0)) == (True, False)   # run both loops backwards


def test_skewing_gives_a_parallel_outer_loop_to_a_fused_pair():
    """Consumer reads B[i+1][j-1]: delta (1, -1) breaks even sequential fusion; after the skew
    i' = i + j the outer loop carries nothing, so the fused nest is parallel over it."""
    box = Domain.box((6, 6))
    verdict = pair_fusion(Access.of(IDENTITY, [0, 0]), box, Access.of(IDENTITY, [1, -1]), box)
    assert verdict.deltas == ((1, -1),) and not verdict.sequential
    assert verdict.under([[1, 1], [0, 1]]) == (True, True)


# --- one-dimensional affine schedules (Lemma 7.1, Proposition 7.5) ------------------------------
def satisfied_by_enumeration(schedule, problem: DependenceProblem, source: str, target: str) -> bool:
    return all(schedule.time(target, j) - schedule.time(source, i) >= 1
               for pairs in dependence_pairs(problem).values() for i, j in pairs)


def test_farkas_schedule_for_the_seed_stencil():
    problem = stencil(6)
    schedule = one_dimensional_schedule({"S": 2}, dependences_of(problem, "S", "S"))
    assert schedule is not None and verify(schedule, dependences_of(problem, "S", "S")).valid
    assert satisfied_by_enumeration(schedule, problem, "S", "S")


def test_farkas_schedule_for_a_two_read_stencil_is_a_wavefront():
    """``X[i][j] = X[i-1][j] + X[i][j-1]``: distances (1, 0) and (0, 1), schedule like i + j."""
    box = Domain.box((5, 5))
    write = Access.of(IDENTITY, [0, 0])
    problems_ = [DependenceProblem(write, box, Access.of(IDENTITY, off), box) for off in ([-1, 0], [0, -1])]
    deps = [d for p in problems_ for d in dependences_of(p, "S", "S")]
    schedule = one_dimensional_schedule({"S": 2}, deps)
    assert schedule is not None and verify(schedule, deps).valid
    assert all(c >= 1 for c in schedule.coefficients["S"])
    assert all(satisfied_by_enumeration(schedule, p, "S", "S") for p in problems_)


def test_farkas_schedule_for_a_non_uniform_dependence():
    """write X[i], read X[n-1-i] in one loop: distances from 1 to n-1."""
    n = Domain.box((7,))
    problem = DependenceProblem(Access.of([[1]], [0]), n, Access.of([[-1]], [6]), n)
    schedule = one_dimensional_schedule({"S": 1}, dependences_of(problem, "S", "S"))
    assert schedule is not None and satisfied_by_enumeration(schedule, problem, "S", "S")


def test_no_schedule_for_a_cycle_at_distance_zero():
    """a -> b and b -> a in the same iteration: theta_b - theta_a >= 1 and theta_a - theta_b >= 1."""
    n = Domain.box((4,))
    same = DependenceProblem(Access.of([[1]], [0]), n, Access.of([[1]], [0]), n, loop_independent=True)
    deps = dependences_of(same, "a", "b") + dependences_of(same, "b", "a")
    assert [d.source for d in deps] == ["a", "b"]
    assert one_dimensional_schedule({"a": 1, "b": 1}, deps) is None


def test_verify_rejects_a_wrong_schedule():
    deps = dependences_of(stencil(4), "S", "S")
    diagonal = AffineSchedule({"S": (Fraction(1), Fraction(1))}, {"S": Fraction(0)})   # i + j: delta (1,-1) -> 0
    assert not verify(diagonal, deps).valid


def test_polyhedron_integer_point_needs_bounds():
    with pytest.raises(ValueError, match="bounded"):
        Polyhedron(2, ineqs=((1, 0, 0), (0, 1, 0), (-1, 1, 0))).integer_point()


def test_row_shift_keeps_the_outer_loop_parallel():
    box = Domain.box((5, 5))
    verdict = pair_fusion(Access.of(IDENTITY, [0, 0]), box, Access.of(IDENTITY, [0, -1]), box)
    assert (verdict.sequential, verdict.outer_parallel, verdict.parallel) == (True, True, False)


def test_conservative_fusion_experiment_stax_rule_is_sound():
    """Whatever stax's own rule fuses is legal under Proposition 7.3 (2); it fuses only delta = 0."""
    from experiments.studies.conservative_fusion import CASES, affine_verdicts, combined, stax_verdict
    fused = []
    for name, reads in CASES.items():
        verdict = combined(affine_verdicts(reads, len(reads[0])))
        if stax_verdict(reads, len(reads[0])) == "fuse":
            fused.append(name)
            assert verdict.parallel
        assert verdict.parallel <= verdict.outer_parallel <= verdict.sequential
    assert fused == ["same index B[i]"]


# --- the exact test within a work bound (issue 32) ----------------------------------------------
def answers(result) -> list[tuple[int, bool, tuple[int, ...] | None]]:
    return [(r.level, r.possible, r.distance) for r in result.levels]


def test_a_problem_whose_rational_elimination_blew_up_is_answered_like_enumeration():
    """Ran over 3 minutes and took 8 GB in the rational bounds of every distance (equalities kept
    as inequality pairs); enumeration answers in milliseconds, and now the exact test does too."""
    box = Domain.box((5, 6, 3))
    problem = DependenceProblem(Access.of([[-2, 0, -1], [-2, -1, -2]], [-4, -1]), box,
                                Access.of([[3, -1, 2], [0, 3, 3]], [-3, -4]), box, loop_independent=True)
    result = exact_test(problem, work_limit=WORK_LIMIT // 10)
    assert result.complete
    assert answers(result) == answers(enumeration_test(problem))
    assert result.distance == (0, 1, 0)   # one level, uniform: the rational test gave no distance here


def test_verify_of_a_schedule_that_timed_out_is_exact_on_the_integer_points():
    """``verify`` took seconds on this nest by rational elimination; one integer point per dependence now."""
    box = Domain.box((3, 2, 2))
    problem = DependenceProblem(Access.of([[2, 1, 2]], [-1]), box, Access.of([[2, -1, -1]], [2]), box)
    deps = dependences_of(problem, "S", "S")
    pairs = [pair for level in dependence_pairs(problem).values() for pair in level]
    for coefficients in ((1, 2, 1), (1, 1, 1), (0, 0, 1)):
        schedule = AffineSchedule({"S": tuple(map(Fraction, coefficients))}, {"S": Fraction(0)})
        verdict = verify(schedule, deps, work_limit=WORK_LIMIT // 10)
        assert verdict.outcome is Outcome.COMPLETE
        assert verdict.valid == satisfied_by_enumeration(schedule, problem, "S", "S")
        if not verdict.valid:
            dep, i, j = verdict.violation
            assert (i, j) in pairs and schedule.time("S", j) - schedule.time("S", i) < 1


def test_four_dimensional_sequential_compile_decides_every_pair_within_the_work_limit(check, monkeypatch):
    """``y[..., 1:] + y[..., :-1]`` in 4-D under the sequential rule took 49-57 s to compile (the
    elimination behind ``pair_fusion``); every exact test it makes must finish, and fuse the pair."""
    import stax.affine.fusion as affine_fusion
    results = []

    def recorded(problem):
        results.append(real(problem))
        return results[-1]
    real = affine_fusion.exact_test
    monkeypatch.setattr(affine_fusion, "exact_test", recorded)

    def shifted(x):
        y = x * 2
        return y[..., 1:] + y[..., :-1]
    x = np.random.default_rng(0).standard_normal((2, 4, 8, 16)).astype(np.float32)
    compiled = check(shifted, x, cost_model=CostModel(max_inline_ops=0), dependence="sequential")
    assert results and all(r.complete for r in results)
    assert len(compiled.fusion.partition) == 1


def test_a_spent_budget_gives_conservative_typed_answers():
    """With no work allowed: a level that needs a search is dependent with no distance and
    ``Outcome.WORK_LIMIT`` (level 2 of the stencil needs none: its equations have no integer
    solution); ``verify`` does not call the schedule valid, nor ``transformation_preserves`` the skew."""
    result = exact_test(stencil(), work_limit=0)
    assert not result.complete
    assert [(r.level, r.possible, r.distance, r.outcome) for r in result.levels] == [
        (1, True, None, Outcome.WORK_LIMIT), (2, False, None, Outcome.COMPLETE)]
    deps = dependences_of(stencil(6), "S", "S")
    schedule = one_dimensional_schedule({"S": 2}, deps)
    assert verify(schedule, deps).valid
    assert verify(schedule, deps, work_limit=0) == Verification(False, Outcome.WORK_LIMIT)
    assert transformation_preserves(skew(2, 1, 0), stencil(5))
    assert not transformation_preserves(skew(2, 1, 0), stencil(5), work_limit=0)
    with pytest.raises(WorkLimitReached):
        Polyhedron(1, ineqs=((1, 0), (-1, 5))).integer_point(Budget(0))


@st.composite
def polytopes(draw) -> tuple[Polyhedron, list[tuple[int, ...]]]:
    """A polytope in the box ``[-3, 3]^n`` with random equalities and inequalities, and extra rows."""
    n = draw(st.integers(1, 4))

    def row(const: st.SearchStrategy) -> tuple[int, ...]:
        return tuple(draw(st.integers(-3, 3)) for _ in range(n)) + (draw(const),)
    box = tuple(tuple(sign * int(c == k) for c in range(n)) + (3,) for k in range(n) for sign in (1, -1))
    eqs = tuple(row(st.integers(-6, 6)) for _ in range(draw(st.integers(0, 2))))
    ineqs = box + tuple(row(st.integers(-3, 9)) for _ in range(draw(st.integers(0, 3))))
    extra = [row(st.integers(-3, 9)) for _ in range(draw(st.integers(0, 2)))]
    return Polyhedron(n, eqs, ineqs), extra


@settings(max_examples=150, deadline=None)
@given(polytopes())
def test_integer_point_with_extra_rows_agrees_with_enumeration(case):
    poly, extra = case
    points = [x for x in product(range(-3, 4), repeat=poly.nvars) if poly.with_rows(ineqs=extra).contains(x)]
    form = poly.lattice()
    found = None if form is None else form.integer_point(extra)
    assert (found is None) == (not points)
    if found is not None:
        assert found in points


def test_rational_bounds_keep_the_row_of_fewer_origins_among_equal_rows():
    """A polytope (found by the property test below) where two derivations of one row differ in
    how many original rows they combine: kept with the larger set, Chernikov's rule pruned a row
    the bound needs, and the max of the sum came out -1/5; GLOP and a hand derivation give -1/4
    (at x = (-3, -3/4, 3/4, 11/4))."""
    poly = Polyhedron(nvars=4, eqs=((-1, -2, -1, -1, -1),),
                      ineqs=((1, 0, 0, 0, 3), (-1, 0, 0, 0, 3), (0, 1, 0, 0, 3), (0, -1, 0, 0, 3), (0, 0, 1, 0, 3),
                             (0, 0, -1, 0, 3), (0, 0, 0, 1, 3), (0, 0, 0, -1, 3), (-2, 1, -2, -1, -1),
                             (0, 1, 1, 0, 0), (0, 0, -1, 1, 0)))
    assert poly.rational_bounds((1, 1, 1, 1, 0)) == (Fraction(-4), Fraction(-1, 4))


@settings(max_examples=100, deadline=None)
@given(polytopes())
def test_rational_bounds_agree_with_a_linear_program(case):
    """Fourier-Motzkin with Chernikov's rule against GLOP's optimum of the same linear program."""
    from ortools.linear_solver import pywraplp
    poly, extra = case
    objective = extra[0] if extra else (1,) * poly.nvars + (0,)
    bounds = poly.rational_bounds(objective)
    for sense, bound in ((1, None if bounds is None else bounds[0]), (-1, None if bounds is None else bounds[1])):
        solver = pywraplp.Solver.CreateSolver("GLOP")
        x = [solver.NumVar(-solver.infinity(), solver.infinity(), f"x{k}") for k in range(poly.nvars)]
        for eq in poly.eqs:
            solver.Add(sum(c * v for c, v in zip(eq, x)) + eq[-1] == 0)
        for ineq in poly.ineqs:
            solver.Add(sum(c * v for c, v in zip(ineq, x)) + ineq[-1] >= 0)
        solver.Minimize(sense * (sum(c * v for c, v in zip(objective, x)) + objective[-1]))
        status = solver.Solve()
        if bounds is None:
            assert status == pywraplp.Solver.INFEASIBLE
        else:
            assert status == pywraplp.Solver.OPTIMAL
            assert abs(sense * solver.Objective().Value() - float(bound)) < 1e-6


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5).flatmap(lambda m: st.lists(st.lists(st.integers(-60, 60), min_size=m, max_size=m),
                                                   min_size=1, max_size=m)))
def test_lll_reduce_keeps_the_lattice_and_reduces_its_basis(basis):
    gram = [[sum(a * b for a, b in zip(u, v)) for v in basis] for u in basis]
    assume(determinant(gram) != 0)   # independent vectors: a basis
    reduced = lll_reduce(basis)
    assert determinant([[sum(a * b for a, b in zip(u, v)) for v in reduced] for u in reduced]) == determinant(gram)
    columns = [[vec[k] for vec in basis] for k in range(len(basis[0]))]
    assert all(integer_solutions(columns, r, len(basis)) is not None for r in reduced)   # same lattice
    ortho, norms = [], []
    for k, vec in enumerate(reduced):   # Gram-Schmidt: size-reduced (|mu| <= 1/2), Lovasz condition
        mu = [sum((a * b for a, b in zip(vec, w)), Fraction(0)) / nw for w, nw in zip(ortho, norms)]
        assert all(abs(m) <= Fraction(1, 2) for m in mu)
        w = [a - sum((m * wj[c] for m, wj in zip(mu, ortho)), Fraction(0)) for c, a in enumerate(vec)]
        norm = sum(c * c for c in w)
        if k:
            assert norm >= (Fraction(3, 4) - mu[-1] ** 2) * norms[-1]
        ortho.append(w)
        norms.append(norm)
