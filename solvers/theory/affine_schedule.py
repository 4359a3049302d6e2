"""One-dimensional affine schedules by Farkas linearization (spec 7.7, Lemma 7.1, Proposition 7.5).

Each statement ``S`` gets ``theta_S(i) = c_S . i + c_S0``.  For every dependence
``S at i -> T at j`` over a nonempty polyhedron ``{x = (i, j) : B x + beta >= 0}`` (equalities as
two rows), the constraint ``theta_T(j) - theta_S(i) - 1 >= 0`` on the whole polyhedron is, by
Lemma 7.1, the existence of ``lambda_0, lambda >= 0`` with
``theta_T(j) - theta_S(i) - 1 == lambda_0 + lambda . (B x + beta)`` as affine functions of ``x``:
one linear equation per coefficient of ``x`` and one for the constant.  All of them together are
one linear program over ``(c, lambda)`` (Proposition 7.5), solved by OR-Tools' GLOP; among the
feasible schedules it picks one with the smallest ``sum |c| + sum |c_0|``.

The program is the rational relaxation: a schedule it returns is legal on the integer points too
(before its values are rounded to fractions); ``verify`` re-checks a schedule exactly on the
integer points, one integer-point query per dependence ("a pair with
``theta_T(j) - theta_S(i) < 1``?"), within a work limit.

    >>> from stax.affine import Access, DependenceProblem, Domain
    >>> box, identity = Domain.box((6, 6)), [[1, 0], [0, 1]]
    >>> problem = DependenceProblem(Access.of(identity, [0, 0]), box, Access.of(identity, [-1, 1]), box)
    >>> deps = dependences_of(problem, "S", "S")
    >>> schedule = one_dimensional_schedule({"S": 2}, deps)
    >>> schedule.time("S", (1, 0)) - schedule.time("S", (0, 1)), verify(schedule, deps).valid
    (Fraction(1, 1), True)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import lcm
from typing import Mapping, Sequence

from ortools.linear_solver import pywraplp

from stax.affine import WORK_LIMIT, Budget, DependenceProblem, Outcome, Polyhedron, WorkLimitReached, exact_test


@dataclass(frozen=True)
class Dependence:
    """``source`` at ``i`` must run before ``target`` at ``j`` for every ``(i, j)`` in ``polyhedron``
    (over ``i`` then ``j``; ``source == target`` allowed)."""

    source: str
    target: str
    polyhedron: Polyhedron


def dependences_of(problem: DependenceProblem, source: str, target: str) -> list[Dependence]:
    """The nonempty levels of a dependence problem (Definition 7.6), as schedule constraints."""
    result = exact_test(problem)
    return [Dependence(source, target, problem.polyhedron(r.level)) for r in result.levels if r.possible]


@dataclass(frozen=True)
class AffineSchedule:
    """``theta_S(i) = coefficients[S] . i + constants[S]``."""

    coefficients: dict[str, tuple[Fraction, ...]]
    constants: dict[str, Fraction]

    def time(self, statement: str, i: Sequence[int]) -> Fraction:
        return sum((c * v for c, v in zip(self.coefficients[statement], i)), self.constants[statement])

    def delay_row(self, dep: Dependence) -> tuple[Fraction, ...]:
        """``theta_T(j) - theta_S(i) - 1`` as a row over ``(i, j)``."""
        cs, ct = self.coefficients[dep.source], self.coefficients[dep.target]
        return (tuple(-c for c in cs) + tuple(ct)
                + (self.constants[dep.target] - self.constants[dep.source] - 1,))


@dataclass(frozen=True)
class Verification:
    """``verify``'s answer: ``valid`` when every dependent pair is ordered; otherwise ``violation``
    names a dependence and a pair ``(i, j)`` it leaves unordered, or ``outcome`` is
    ``Outcome.WORK_LIMIT`` (undecided: not shown valid)."""

    valid: bool
    outcome: Outcome = Outcome.COMPLETE
    violation: tuple[Dependence, tuple[int, ...], tuple[int, ...]] | None = None


def verify(schedule: AffineSchedule, dependences: Sequence[Dependence], work_limit: int = WORK_LIMIT) -> Verification:
    """Exactly on the integer points: ``theta_T(j) - theta_S(i) >= 1`` on every dependence, that
    is, no integer point of its polyhedron with ``theta_T(j) - theta_S(i) - 1 <= -1/scale``
    (``scale`` clears the schedule's denominators).  The dependences share ``work_limit`` units."""
    budget = Budget(work_limit)
    for dep in dependences:
        row = schedule.delay_row(dep)
        scale = lcm(*(v.denominator for v in row))
        late = tuple(-int(v * scale) for v in row[:-1]) + (-int(row[-1] * scale) - 1,)   # scale * delay <= -1
        form = dep.polyhedron.lattice()
        try:
            pair = None if form is None else form.integer_point([late], budget)
        except WorkLimitReached:
            return Verification(False, Outcome.WORK_LIMIT)
        if pair is not None:
            ds = len(schedule.coefficients[dep.source])
            return Verification(False, violation=(dep, pair[:ds], pair[ds:]))
    return Verification(True)


def one_dimensional_schedule(dims: Mapping[str, int], dependences: Sequence[Dependence],
                             max_denominator: int = 1000) -> AffineSchedule | None:
    """Proposition 7.5: a one-dimensional affine schedule of the statements (``dims``: loops per
    statement) satisfying every dependence, or None when the linear program is infeasible."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    coeff = {s: [solver.NumVar(-inf, inf, f"c_{s}_{k}") for k in range(d)] for s, d in dims.items()}
    const = {s: solver.NumVar(-inf, inf, f"c_{s}_0") for s in dims}
    size = []
    for var in [v for vs in coeff.values() for v in vs] + list(const.values()):
        bound = solver.NumVar(0, inf, f"abs_{var.name()}")
        solver.Add(bound >= var)
        solver.Add(bound >= -var)
        size.append(bound)
    for n, dep in enumerate(dependences):
        rows = dep.polyhedron.inequalities()
        lam = [solver.NumVar(0, inf, f"lambda_{n}_{r}") for r in range(len(rows))]
        lam0 = solver.NumVar(0, inf, f"lambda_{n}_0")
        psi = [-c for c in coeff[dep.source]] + list(coeff[dep.target])   # Lemma 7.1: compare coefficients
        for m, term in enumerate(psi):
            solver.Add(term == solver.Sum([lam[r] * rows[r][m] for r in range(len(rows)) if rows[r][m]]))
        constant = const[dep.target] - const[dep.source] - 1
        solver.Add(constant == lam0 + solver.Sum([lam[r] * rows[r][-1] for r in range(len(rows)) if rows[r][-1]]))
    solver.Minimize(solver.Sum(size))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None

    def value(var: pywraplp.Variable) -> Fraction:
        return Fraction(var.solution_value()).limit_denominator(max_denominator)
    return AffineSchedule({s: tuple(value(v) for v in vs) for s, vs in coeff.items()},
                          {s: value(v) for s, v in const.items()})
