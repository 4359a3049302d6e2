"""Legality of loop transformations and tiling (spec 7.7: Theorem 7.2, Definition 7.7, Theorem 7.3,
Irigoin-Triolet's condition).

Distances are ``j - i`` (Definition 7.6), lexicographically positive for carried dependences and
zero for loop-independent ones.  Matrices are sequences of integer rows.

    >>> delta = [(1, -1)]                                   # X[i][j] = X[i-1][j+1] + 1
    >>> transformation_legal(interchange(2, 0, 1), delta), transformation_legal(skew(2, 1, 0), delta)
    (False, True)
    >>> apply(skew(2, 1, 0), delta[0]), rectangular_tiling_legal(delta)
    ((1, 0), False)
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from stax.affine.dependence import DependenceProblem
from stax.affine.polyhedron import WORK_LIMIT, Budget, WorkLimitReached

Matrix = Sequence[Sequence[int]]


def lex_sign(v: Sequence[int]) -> int:
    """1, 0 or -1: the sign of the first nonzero entry."""
    return next((1 if x > 0 else -1 for x in v if x != 0), 0)


def carrying_level(distance: Sequence[int]) -> int | None:
    """The loop (1-based) that carries a dependence: its first nonzero entry (Definition 7.6)."""
    return next((k + 1 for k, x in enumerate(distance) if x != 0), None)


def apply(theta: Matrix, v: Sequence[int]) -> tuple[int, ...]:
    return tuple(sum(a * b for a, b in zip(row, v)) for row in theta)


def determinant(theta: Matrix) -> Fraction:
    """Exact determinant by Gaussian elimination over the rationals."""
    m = [[Fraction(x) for x in row] for row in theta]
    n, det = len(m), Fraction(1)
    for c in range(n):
        pivot = next((r for r in range(c, n) if m[r][c] != 0), None)
        if pivot is None:
            return Fraction(0)
        if pivot != c:
            m[c], m[pivot], det = m[pivot], m[c], -det
        det *= m[c][c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return det


def is_unimodular(theta: Matrix) -> bool:
    """Square, integer, determinant +-1 (Theorem 7.2's hypothesis)."""
    n = len(theta)
    return (all(len(row) == n and all(float(x).is_integer() for x in row) for row in theta)
            and abs(determinant(theta)) == 1)


def _identity(d: int) -> list[list[int]]:
    return [[int(r == c) for c in range(d)] for r in range(d)]


def interchange(d: int, p: int, q: int) -> list[list[int]]:
    """The permutation matrix that swaps loops ``p`` and ``q`` (0-based)."""
    m = _identity(d)
    m[p], m[q] = m[q], m[p]
    return m


def skew(d: int, target: int, source: int, factor: int = 1) -> list[list[int]]:
    """``i'_target = i_target + factor * i_source`` (a unit triangular matrix)."""
    m = _identity(d)
    m[target][source] += factor
    return m


def reversal(d: int, k: int) -> list[list[int]]:
    """``i'_k = -i_k``."""
    m = _identity(d)
    m[k][k] = -1
    return m


def _check_unimodular(theta: Matrix) -> None:
    if not is_unimodular(theta):
        raise ValueError(f"Theorem 7.2 needs a unimodular matrix (integer, determinant +-1): {list(map(list, theta))}")


def transformation_legal(theta: Matrix, distances: Sequence[Sequence[int]]) -> bool:
    """Theorem 7.2 for uniform dependences: ``Theta delta`` is lexicographically positive for every
    carried distance (loop-independent distances, zero, stay zero)."""
    _check_unimodular(theta)
    return all(lex_sign(apply(theta, d)) > 0 for d in distances if any(d))


def transformation_preserves(theta: Matrix, problem: DependenceProblem, work_limit: int = WORK_LIMIT) -> bool:
    """Theorem 7.2 over dependence polyhedra (any affine dependence, uniform or not): no pair
    ``(i, j)`` of a carried level has ``Theta (j - i)`` lexicographically negative or zero.
    Decided exactly, one integer-feasibility problem per level and row of ``Theta``, within
    ``work_limit`` units for all of them; past it, False (not shown to preserve the order)."""
    _check_unimodular(theta)
    if len(theta) != problem.depth:
        raise ValueError(f"Theta is {len(theta)}x{len(theta)} but the nests share {problem.depth} loops")
    delta = [problem.distance_row(k) for k in range(problem.depth)]
    rows = [tuple(sum(c * r[m] for c, r in zip(row, delta)) for m in range(problem.nvars + 1)) for row in theta]
    budget = Budget(work_limit)
    for level in range(1, problem.depth + 1):
        poly = problem.polyhedron(level)
        for q, row in enumerate(rows):
            negative = tuple(-v for v in row[:-1]) + (-1,)     # (Theta delta)_q <= -1
            try:
                if poly.with_rows(eqs=rows[:q], ineqs=[negative]).integer_point(budget) is not None:
                    return False
            except WorkLimitReached:
                return False
    return True


def fully_permutable(distances: Sequence[Sequence[int]], band: tuple[int, int] | None = None) -> bool:
    """Definition 7.7: every distance is componentwise nonnegative on the band of loops
    ``band = (first, stop)`` (0-based, default all).  Dependences already carried by a loop
    outside and before the band impose nothing on it."""
    first, stop = band if band is not None else (0, len(distances[0]) if distances else 0)
    for d in distances:
        level = carrying_level(d)
        if level is not None and level - 1 < first:
            continue
        if any(x < 0 for x in d[first:stop]):
            return False
    return True


def rectangular_tiling_legal(distances: Sequence[Sequence[int]], band: tuple[int, int] | None = None) -> bool:
    """Theorem 7.3: rectangular tiling with any tile sizes is legal on a fully permutable band."""
    return fully_permutable(distances, band)


def parallelepiped_tiling_legal(h: Matrix, distances: Sequence[Sequence[int]]) -> bool:
    """Irigoin and Triolet: tiling by the hyperplane families with normals ``h`` (rows) is legal
    when ``H delta >= 0`` componentwise for every distance; ``H = I`` is Theorem 7.3."""
    return all(all(x >= 0 for x in apply(h, d)) for d in distances)
