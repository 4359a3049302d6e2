"""Polyhedra ``{x : E x + e = 0, B x + b >= 0}``, Fourier-Motzkin elimination and exact integer
points (spec 7.2, 7.7), each under a work budget.

A row holds the coefficients and then the constant: ``(2, -1, 3)`` is ``2 x0 - x1 + 3``.

- ``Polyhedron.lattice``: the equalities solved over the integers first (``lattice.integer_solutions``,
  a Hermite-style column echelon form): every integer point is ``x = origin + N z`` with ``z``
  integer in a polyhedron of inequalities only (a ``LatticeForm``), so no elimination ever
  sees an equality, and every variable it fixed is gone.
- ``LatticeForm.integer_point``: an integer point or None, exactly (the Omega test's idea, spec 7.2):
  the variables are fixed one at a time over the range that the integer-tightened
  Fourier-Motzkin shadow allows, pruning every branch whose shadow is empty.  Worst-case
  exponential, as the spec says; fast on dependence problems, where the shadows are tight.
  Extra inequalities (a question such as "a pair whose distance is below 3?") are added to the
  form without solving the equalities again.  The polyhedron must be bounded.
- ``Polyhedron.rational_bounds``: the smallest and largest value of an affine function over the
  rational polyhedron, by eliminating every variable but a new one equal to the function.

Each elimination and each branch of the search spends from a ``Budget``; when it runs out,
``WorkLimitReached`` is raised, so a caller gets "unknown" (and answers conservatively) instead of
a run that takes minutes and gigabytes.

    >>> square = Polyhedron(2, ineqs=((1, 0, 0), (-1, 0, 3), (0, 1, 0), (0, -1, 3)))   # 0 <= x, y <= 3
    >>> square.rational_bounds((1, 1, 0))
    (Fraction(0, 1), Fraction(6, 1))
    >>> Polyhedron(2, eqs=((2, -4, 1),), ineqs=square.ineqs).integer_point() is None   # 2x - 4y + 1 = 0
    True
    >>> diagonal = Polyhedron(2, eqs=((1, 1, -4),), ineqs=square.ineqs)                   # x + y = 4
    >>> diagonal.lattice().integer_point([(1, -1, -2)])                                  # and x - y >= 2
    (3, 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd
from typing import Sequence

from stax.affine.lattice import integer_solutions

Row = tuple[int, ...]
WORK_LIMIT = 50_000
"""Default budget of a call (of ``exact_test``, ``verify``, ``integer_point``...), in units of a few
microseconds: rows the eliminations combine and rows the search's branches visit."""


class WorkLimitReached(Exception):
    """A query spent its whole budget before it could answer: the answer is unknown."""


@dataclass
class Budget:
    """Work units a query may still spend (``WORK_LIMIT`` by default)."""

    limit: int = WORK_LIMIT
    spent: int = 0

    def spend(self, units: int) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise WorkLimitReached(f"the exact test spent its work limit of {self.limit} units")


def _normalize(row: Sequence[int], integer: bool) -> Row:
    """Divide by the coefficients' gcd; over the integers, round the constant down (tightening)."""
    *coeffs, const = row
    g = 0
    for c in coeffs:
        g = gcd(g, c)
    if g == 0:
        return tuple(row)
    if not integer:
        g = gcd(g, const)
    return tuple(c // g for c in coeffs) + (const // g,)


def _dedupe(rows: Sequence[Row], origins: Sequence[int] | None = None) -> list[Row]:
    """Keep the tightest constant per coefficient vector; one ``-1 >= 0`` row if a constant row fails.
    With ``origins`` (one per row), returns ``(row, origin)`` pairs, each row with its own; of equal
    rows, the one combining the fewest original rows, which Chernikov's rule keeps longest (kept
    with a larger set, a row the bounds need was pruned: the max of a sum came out -1/5, not -1/4)."""
    best: dict[Row, tuple[int, int]] = {}
    for n, row in enumerate(rows):
        *coeffs, const = row
        key = tuple(coeffs)
        origin = origins[n] if origins is not None else 0
        if key not in best or (const, origin.bit_count()) < (best[key][0], best[key][1].bit_count()):
            best[key] = (const, origin)
    zero = (0,) * (len(rows[0]) - 1) if rows else None
    if zero is not None and zero in best and best[zero][0] < 0:
        kept = [(zero + (-1,), best[zero][1])]
    else:
        kept = [(k + (c,), o) for k, (c, o) in best.items() if any(k)]
    return kept if origins is not None else [row for row, _ in kept]


def _eliminate_tracked(rows: Sequence[tuple[Row, int]], var: int, integer: bool, budget: Budget | None,
                       eliminated: int | None = None) -> list[tuple[Row, int]]:
    """Fourier-Motzkin on rows paired with the bit set of the original rows they combine.  With
    ``eliminated`` (variables gone so far, this one included), Chernikov's rule drops every row
    combining more than ``eliminated + 1`` originals: another row then implies it (over Q)."""
    pos = [r for r in rows if r[0][var] > 0]
    neg = [r for r in rows if r[0][var] < 0]
    if budget is not None:
        budget.spend(len(pos) * len(neg) + len(rows))
    out = [r for r in rows if r[0][var] == 0]
    for p, p_origin in pos:
        for q, q_origin in neg:
            origin = p_origin | q_origin
            if eliminated is None or origin.bit_count() <= eliminated + 1:
                out.append((tuple(-q[var] * a + p[var] * b for a, b in zip(p, q)), origin))
    return _dedupe([_normalize(r, integer) for r, _ in out], [o for _, o in out]) if out else []


def eliminate(rows: Sequence[Row], var: int, integer: bool = False, budget: Budget | None = None) -> list[Row]:
    """Fourier-Motzkin: the inequalities on the other variables implied by ``rows`` (``var``'s
    column becomes zero).  With ``integer``, rows are tightened for integer points."""
    return [row for row, _ in _eliminate_tracked([(r, 0) for r in rows], var, integer, budget)]


def _growth(rows: Sequence[tuple[Row, int]], var: int) -> int:
    """How many rows eliminating ``var`` adds (negative when it removes some)."""
    pos = sum(r[var] > 0 for r, _ in rows)
    neg = sum(r[var] < 0 for r, _ in rows)
    return pos * neg - pos - neg


def _shadow(rows: Sequence[Row], keep: int, integer: bool, budget: Budget
            ) -> tuple[Fraction | None, Fraction | None] | None:
    """Bounds of variable ``keep`` after eliminating every other variable, the cheapest first
    (Chernikov's rule prunes redundant rows); None when empty."""
    tracked = [(row, 1 << n) for n, row in enumerate(rows)]
    others = set(range(len(rows[0]) - 1 if rows else 0)) - {keep}
    eliminated = 0
    while others and tracked:
        var = min(others, key=lambda v: (_growth(tracked, v), v))
        others.remove(var)
        eliminated += 1
        tracked = _eliminate_tracked(tracked, var, integer, budget, eliminated)
        if len(tracked) == 1 and not any(tracked[0][0][:-1]):   # the contradiction row of _dedupe
            return None
    lo: Fraction | None = None
    hi: Fraction | None = None
    for row, _ in tracked:
        a, const = row[keep], row[-1]
        if a == 0:
            if const < 0:
                return None
        elif a > 0:
            lo = Fraction(-const, a) if lo is None else max(lo, Fraction(-const, a))
        else:
            hi = Fraction(const, -a) if hi is None else min(hi, Fraction(const, -a))
    if lo is not None and hi is not None and lo > hi:
        return None
    return lo, hi


def _substitute_first(rows: Sequence[Row], value: int) -> list[Row]:
    return [row[1:-1] + (row[-1] + row[0] * value,) for row in rows]


def _search(rows: list[Row], nvars: int, budget: Budget) -> tuple[int, ...] | None:
    """An integer point of ``{z : rows}`` over ``nvars`` variables, by branching on ``z[0]``."""
    budget.spend(len(rows) + 1)
    if nvars == 0:
        return () if all(r[-1] >= 0 for r in rows) else None
    if not rows:
        return (0,) * nvars
    shadow = _shadow(rows, 0, True, budget)
    if shadow is None:
        return None
    lo, hi = shadow
    if lo is None or hi is None:
        raise ValueError("integer_point needs a bounded polyhedron (add loop bounds)")
    for value in range(-((-lo.numerator) // lo.denominator), hi.numerator // hi.denominator + 1):
        rest = _search(_substitute_first(rows, value), nvars - 1, budget)
        if rest is not None:
            return (value,) + rest
    return None


@dataclass(frozen=True)
class LatticeForm:
    """The integer points of a polyhedron: ``x = origin + sum_k z_k basis[k]`` for the integer
    ``z`` with ``row . (z, 1) >= 0`` for every row of ``rows`` (no equalities left)."""

    origin: tuple[int, ...]
    basis: tuple[tuple[int, ...], ...]
    rows: tuple[Row, ...]

    def substitute(self, row: Sequence[int]) -> Row:
        """The affine function ``row . (x, 1)`` as a row over ``z``."""
        coeffs = tuple(sum(c * b for c, b in zip(row, vec)) for vec in self.basis)
        return coeffs + (sum(c * o for c, o in zip(row, self.origin)) + row[-1],)

    def point(self, z: Sequence[int]) -> tuple[int, ...]:
        return tuple(o + sum(zc * vec[k] for zc, vec in zip(z, self.basis)) for k, o in enumerate(self.origin))

    def integer_point(self, extra: Sequence[Row] = (), budget: Budget | None = None) -> tuple[int, ...] | None:
        """An integer point ``x`` that also satisfies the inequalities ``extra`` (rows over ``x``),
        or None when there is none (exact); raises ``WorkLimitReached`` past the budget."""
        rows = list(self.rows) + [_normalize(self.substitute(r), True) for r in extra]
        z = _search(_dedupe(rows) if rows else [], len(self.basis), budget if budget is not None else Budget())
        return None if z is None else self.point(z)


@dataclass(frozen=True)
class Polyhedron:
    """``{x in Q^nvars : eq . (x, 1) = 0 for eq in eqs, ineq . (x, 1) >= 0 for ineq in ineqs}``."""

    nvars: int
    eqs: tuple[Row, ...] = ()
    ineqs: tuple[Row, ...] = ()

    def with_rows(self, eqs: Sequence[Row] = (), ineqs: Sequence[Row] = ()) -> "Polyhedron":
        return Polyhedron(self.nvars, self.eqs + tuple(map(tuple, eqs)), self.ineqs + tuple(map(tuple, ineqs)))

    def inequalities(self) -> tuple[Row, ...]:
        """Every constraint as ``>= 0`` rows (an equality as two opposite rows), as in Lemma 7.1."""
        return self.ineqs + tuple(r for eq in self.eqs for r in (eq, tuple(-v for v in eq)))

    def contains(self, x: Sequence[int | Fraction]) -> bool:
        def value(row: Row) -> int | Fraction:
            return sum(c * v for c, v in zip(row, x)) + row[-1]
        return all(value(r) == 0 for r in self.eqs) and all(value(r) >= 0 for r in self.ineqs)

    def rational_bounds(self, objective: Sequence[int], budget: Budget | None = None
                        ) -> tuple[Fraction | None, Fraction | None] | None:
        """Min and max of ``objective . (x, 1)`` over the rational polyhedron (None entries when
        unbounded), or None when the polyhedron is empty."""
        *coeffs, const = objective
        rows = [tuple(r[:-1]) + (0, r[-1]) for r in self.inequalities()]
        link = tuple(-c for c in coeffs) + (1, -const)   # t - objective = 0
        rows += [link, tuple(-v for v in link)]
        return _shadow([_normalize(r, False) for r in rows], self.nvars, False,
                       budget if budget is not None else Budget())

    def lattice(self) -> LatticeForm | None:
        """The integer points with the equalities solved (``LatticeForm``), or None when the
        equalities have no integer solution."""
        solved = integer_solutions([r[:-1] for r in self.eqs], [-r[-1] for r in self.eqs], self.nvars)
        if solved is None:
            return None
        origin, basis = solved
        form = LatticeForm(origin, basis, ())
        rows = [_normalize(form.substitute(r), True) for r in self.ineqs]
        return LatticeForm(origin, basis, tuple(_dedupe(rows)) if rows else ())

    def integer_point(self, budget: Budget | None = None) -> tuple[int, ...] | None:
        """An integer point of the polyhedron, or None when it has none (exact); raises
        ``WorkLimitReached`` past the budget."""
        form = self.lattice()
        return None if form is None else form.integer_point(budget=budget)
