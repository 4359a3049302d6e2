"""Polyhedra ``{x : E x + e = 0, B x + b >= 0}`` and Fourier-Motzkin elimination (seed 7.2, 7.7).

A row holds the coefficients and then the constant: ``(2, -1, 3)`` is ``2 x0 - x1 + 3``.

- ``rational_bounds``: the smallest and largest value of an affine function over the rational
  polyhedron, by eliminating every variable but a new one equal to the function (exact over Q).
- ``integer_point``: an integer point or None, exactly (the Omega test's idea, seed 7.2): the
  equalities are solved over the integers first (``lattice.integer_solutions``), then the
  remaining variables are fixed one at a time over the range that the integer-tightened
  Fourier-Motzkin shadow allows, pruning every branch whose shadow is empty.  Worst-case
  exponential, as the seed says; fast on dependence problems, where the shadows are tight.
  The polyhedron must be bounded.

    >>> square = Polyhedron(2, ineqs=((1, 0, 0), (-1, 0, 3), (0, 1, 0), (0, -1, 3)))   # 0 <= x, y <= 3
    >>> square.rational_bounds((1, 1, 0))
    (Fraction(0, 1), Fraction(6, 1))
    >>> Polyhedron(2, eqs=((2, -4, 1),), ineqs=square.ineqs).integer_point() is None   # 2x - 4y + 1 = 0
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd
from typing import Sequence

from .lattice import integer_solutions

Row = tuple[int, ...]


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


def _dedupe(rows: Sequence[Row]) -> list[Row]:
    """Keep the tightest constant per coefficient vector; one ``-1 >= 0`` row if a constant row fails."""
    best: dict[Row, int] = {}
    for row in rows:
        *coeffs, const = row
        key = tuple(coeffs)
        best[key] = min(best.get(key, const), const)
    zero = (0,) * (len(rows[0]) - 1) if rows else None
    if zero is not None and best.get(zero, 0) < 0:
        return [zero + (-1,)]
    return [k + (c,) for k, c in best.items() if any(k)]


def eliminate(rows: Sequence[Row], var: int, integer: bool = False) -> list[Row]:
    """Fourier-Motzkin: the inequalities on the other variables implied by ``rows`` (``var``'s
    column becomes zero).  With ``integer``, rows are tightened for integer points."""
    pos = [r for r in rows if r[var] > 0]
    neg = [r for r in rows if r[var] < 0]
    out = [r for r in rows if r[var] == 0]
    for p in pos:
        for q in neg:
            out.append(_normalize([-q[var] * a + p[var] * b for a, b in zip(p, q)], integer))
    return _dedupe([_normalize(r, integer) for r in out]) if out else []


def _shadow(rows: Sequence[Row], keep: int, integer: bool) -> tuple[Fraction | None, Fraction | None] | None:
    """Bounds of variable ``keep`` after eliminating every other variable; None when empty."""
    n = len(rows[0]) - 1 if rows else 0
    for var in range(n):
        if var != keep:
            rows = eliminate(rows, var, integer)
    lo: Fraction | None = None
    hi: Fraction | None = None
    for row in rows:
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


def _search(rows: list[Row], nvars: int) -> tuple[int, ...] | None:
    """An integer point of ``{z : rows}`` over ``nvars`` variables, by branching on ``z[0]``."""
    if nvars == 0:
        return () if all(r[-1] >= 0 for r in rows) else None
    if not rows:
        return (0,) * nvars
    shadow = _shadow(rows, 0, integer=True)
    if shadow is None:
        return None
    lo, hi = shadow
    if lo is None or hi is None:
        raise ValueError("integer_point needs a bounded polyhedron (add loop bounds)")
    for value in range(-((-lo.numerator) // lo.denominator), hi.numerator // hi.denominator + 1):
        rest = _search(_substitute_first(rows, value), nvars - 1)
        if rest is not None:
            return (value,) + rest
    return None


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

    def rational_bounds(self, objective: Sequence[int]) -> tuple[Fraction | None, Fraction | None] | None:
        """Min and max of ``objective . (x, 1)`` over the rational polyhedron (None entries when
        unbounded), or None when the polyhedron is empty."""
        *coeffs, const = objective
        rows = [tuple(r[:-1]) + (0, r[-1]) for r in self.inequalities()]
        link = tuple(-c for c in coeffs) + (1, -const)   # t - objective = 0
        rows += [link, tuple(-v for v in link)]
        if not rows:
            return None
        return _shadow([_normalize(r, False) for r in rows], self.nvars, integer=False)

    def integer_point(self) -> tuple[int, ...] | None:
        """An integer point of the polyhedron, or None when it has none (exact)."""
        solved = integer_solutions([r[:-1] for r in self.eqs], [-r[-1] for r in self.eqs], self.nvars)
        if solved is None:
            return None
        x0, basis = solved
        rows = []
        for row in self.ineqs:
            coeffs = tuple(sum(row[k] * b[k] for k in range(self.nvars)) for b in basis)
            rows.append(_normalize(coeffs + (sum(row[k] * x0[k] for k in range(self.nvars)) + row[-1],), True))
        z = _search(_dedupe(rows) if rows else [], len(basis))
        if z is None:
            return None
        return tuple(x0[k] + sum(zc * b[k] for zc, b in zip(z, basis)) for k in range(self.nvars))
