"""Integer solutions of a system of linear equations ``E x = r`` (the exact GCD test of spec 7.2).

Column operations with a unimodular ``U`` bring ``E`` to a lower column-echelon form
``H = E U`` (a Hermite-style form); ``E x = r`` has an integer solution iff ``H y = r`` has one,
found by forward substitution with a divisibility check at every pivot.  Every integer solution
is then ``x = x0 + N z`` for an integer vector ``z``, where the columns of ``N`` are the last
columns of ``U`` (a lattice basis of the kernel), LLL-reduced (Lenstra, Lenstra and Lovasz): short,
nearly orthogonal vectors, so that a box in ``x`` stays a round polytope in ``z`` (the column
operations alone can leave entries in the thousands and a polytope too thin to search).

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


def lll_reduce(basis: Sequence[Sequence[int]]) -> list[list[int]]:
    """An LLL-reduced basis (``delta = 3/4``) of the lattice that the independent ``basis`` spans.
    Integral LLL (Cohen, A Course in Computational Algebraic Number Theory, algorithm 2.6.7): the
    Gram-Schmidt data kept as integers ``d`` and ``lam`` (exact divisions), no fractions."""
    n = len(basis)
    b = [None] + [list(v) for v in basis]            # 1-based, as in the book
    d = [1] + [0] * n
    lam = [[0] * (n + 1) for _ in range(n + 1)]

    def dot(u: list[int], v: list[int]) -> int:
        return sum(x * y for x, y in zip(u, v))

    def reduce(k: int, m: int) -> None:               # size-reduce b_k by b_m
        if 2 * abs(lam[k][m]) > d[m]:
            q = (2 * lam[k][m] + d[m]) // (2 * d[m])
            b[k] = [x - q * y for x, y in zip(b[k], b[m])]
            lam[k][m] -= q * d[m]
            for i in range(1, m):
                lam[k][i] -= q * lam[m][i]

    def swap(k: int, kmax: int) -> None:
        b[k], b[k - 1] = b[k - 1], b[k]
        for j in range(1, k - 1):
            lam[k][j], lam[k - 1][j] = lam[k - 1][j], lam[k][j]
        mu = lam[k][k - 1]
        big = (d[k - 2] * d[k] + mu * mu) // d[k - 1]
        for i in range(k + 1, kmax + 1):
            t = lam[i][k]
            lam[i][k] = (d[k] * lam[i][k - 1] - mu * t) // d[k - 1]
            lam[i][k - 1] = (big * t + mu * lam[i][k]) // d[k]
        d[k - 1] = big

    if n:
        d[1] = dot(b[1], b[1])
    k, kmax = 2, 1
    while k <= n:
        if k > kmax:                                   # incremental Gram-Schmidt
            kmax = k
            for j in range(1, k + 1):
                u = dot(b[k], b[j])
                for i in range(1, j):
                    u = (d[i] * u - lam[k][i] * lam[j][i]) // d[i - 1]
                if j < k:
                    lam[k][j] = u
                else:
                    d[k] = u
        reduce(k, k - 1)
        if 4 * d[k] * d[k - 2] < 3 * d[k - 1] ** 2 - 4 * lam[k][k - 1] ** 2:   # Lovasz condition fails
            swap(k, kmax)
            k = max(2, k - 1)
        else:
            for m in range(k - 2, 0, -1):
                reduce(k, m)
            k += 1
    return b[1:]


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
    basis = lll_reduce([[u[r][c] for r in range(nvars)] for c in range(rank, nvars)])
    return x0, tuple(map(tuple, basis))
