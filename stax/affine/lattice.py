"""Integer solutions of a system of linear equations ``E x = r`` (the exact GCD test of seed 7.2).

Column operations with a unimodular ``U`` bring ``E`` to a lower column-echelon form
``H = E U`` (a Hermite-style form); ``E x = r`` has an integer solution iff ``H y = r`` has one,
found by forward substitution with a divisibility check at every pivot.  Every integer solution
is then ``x = x0 + N z`` for an integer vector ``z``, where the columns of ``N`` are the last
columns of ``U`` (a lattice basis of the kernel).

    >>> integer_solutions([[2, -2]], [1], 2) is None          # 2 i - 2 j = 1
    True
    >>> integer_solutions([[1, -1]], [1], 2)                  # i - j = 1: (0, -1) + z (1, 1)
    ((0, -1), ((1, 1),))
"""
from __future__ import annotations

from typing import Sequence

Vector = tuple[int, ...]


def _column_axpy(mats: Sequence[list[list[int]]], dst: int, src: int, factor: int) -> None:
    """Column ``dst -= factor * column src`` in every matrix."""
    for mat in mats:
        for row in mat:
            row[dst] -= factor * row[src]


def _column_swap(mats: Sequence[list[list[int]]], a: int, b: int) -> None:
    for mat in mats:
        for row in mat:
            row[a], row[b] = row[b], row[a]


def _column_negate(mats: Sequence[list[list[int]]], a: int) -> None:
    for mat in mats:
        for row in mat:
            row[a] = -row[a]


def integer_solutions(rows: Sequence[Sequence[int]], rhs: Sequence[int], nvars: int
                      ) -> tuple[Vector, tuple[Vector, ...]] | None:
    """``(x0, basis)`` with every integer solution of ``rows x = rhs`` equal to ``x0 + N z``
    (``N``'s columns are ``basis``), or None when there is no integer solution."""
    h = [[int(v) for v in row] for row in rows]
    u = [[int(r == c) for c in range(nvars)] for r in range(nvars)]
    mats = (h, u)
    rank = 0
    pivot_of_row: list[int | None] = []
    for i in range(len(h)):
        for c in range(rank + 1, nvars):
            while h[i][c] != 0:
                _column_axpy(mats, rank, c, h[i][rank] // h[i][c])
                _column_swap(mats, rank, c)
        if rank < nvars and h[i][rank] != 0:
            if h[i][rank] < 0:
                _column_negate(mats, rank)
            pivot_of_row.append(rank)
            rank += 1
        else:
            pivot_of_row.append(None)
    y = [0] * nvars
    for i, pivot in enumerate(pivot_of_row):
        width = pivot if pivot is not None else rank
        rest = int(rhs[i]) - sum(h[i][c] * y[c] for c in range(width))
        if pivot is None:
            if rest != 0:
                return None
        elif rest % h[i][pivot]:
            return None
        else:
            y[pivot] = rest // h[i][pivot]
    x0 = tuple(sum(u[r][c] * y[c] for c in range(rank)) for r in range(nvars))
    basis = tuple(tuple(u[r][c] for r in range(nvars)) for c in range(rank, nvars))
    return x0, basis
