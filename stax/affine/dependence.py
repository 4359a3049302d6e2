"""Affine accesses in loop nests and the dependence tests of spec 7.2, split by level (Definition 7.6).

A ``DependenceProblem`` asks for the pairs ``(i, j)``: the source statement at iteration ``i``
and the target statement at iteration ``j`` touch the same element (``F_W i + f_W = F_R j + f_R``),
``i`` runs before ``j``.  Its pairs split by the carrying level ``p`` into polyhedra over
``(i, j)`` (Definition 7.6): ``i_1 = j_1, ..., i_{p-1} = j_{p-1}, i_p + 1 <= j_p`` for
``p = 1..common``, and level ``common + 1`` for the loop-independent pairs ``i = j`` on the common
loops, present when the source statement precedes the target in the program text.

Four tests answer, per level, "dependence possible?" and, where all pairs share one distance
``j - i`` on the common loops, that distance vector; each is conservative with respect to the next:

- ``gcd_test``: integer solvability of the equations alone (the generalized GCD test); the
  distance is known when the equations fix ``j - i``.
- ``banerjee_test``: each equation's real range over the loop bounds and the level's direction
  (``=`` outside, ``<`` at the level, ``*`` inside), pair of loops by pair of loops; general
  domains enter through their bounding box.
- ``exact_test``: an integer point of the level's polyhedron (``LatticeForm.integer_point``), and
  the distance when no pair's distance differs from that witness's (two more integer points per
  loop the equations leave free); within a work limit, past which a level is "dependent, distance
  unknown" (``Outcome.WORK_LIMIT``).
- ``enumeration_test``: every pair, by enumeration; the reference for small nests.

    >>> box = Domain.box((8, 8))
    >>> write = Access.of([[1, 0], [0, 1]], [0, 0])              # X[i][j] = ...
    >>> read = Access.of([[1, 0], [0, 1]], [-1, 1])              # ... X[i-1][j+1] + 1
    >>> result = exact_test(DependenceProblem(write, box, read, box))
    >>> result.distance, result.carried
    ((1, -1), (1,))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from itertools import combinations, product
from math import ceil, floor
from typing import Iterator, Sequence

from stax.ir.indexing import Index
from stax.affine.polyhedron import WORK_LIMIT, Budget, LatticeForm, Polyhedron, Row, WorkLimitReached

Matrix = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Domain:
    """An iteration domain ``{i in Z^d : A i + a >= 0}`` (spec 7.7); ``rows`` are ``(A_k, a_k)``."""

    dim: int
    rows: tuple[Row, ...]

    @staticmethod
    def box(ranges: Sequence[int]) -> "Domain":
        """``0 <= i_k < ranges[k]``, the rectangular nest of a stax loop."""
        d = len(ranges)
        rows = []
        for k, n in enumerate(ranges):
            unit = tuple(int(c == k) for c in range(d))
            rows += [unit + (0,), tuple(-u for u in unit) + (n - 1,)]
        return Domain(d, tuple(rows))

    def polyhedron(self) -> Polyhedron:
        return Polyhedron(self.dim, ineqs=self.rows)

    def contains(self, i: Sequence[int]) -> bool:
        return self.polyhedron().contains(i)

    def bounding_box(self) -> tuple[tuple[int, int], ...]:
        """Integer bounds of every loop variable (Fourier-Motzkin projection); raises when
        empty or unbounded."""
        out = []
        for k in range(self.dim):
            bounds = self.polyhedron().rational_bounds(tuple(int(c == k) for c in range(self.dim)) + (0,))
            if bounds is None or None in bounds:
                raise ValueError(f"domain is empty or unbounded in loop {k}")
            out.append((ceil(bounds[0]), floor(bounds[1])))
        return tuple(out)

    def points(self) -> Iterator[tuple[int, ...]]:
        """Every integer point, in lexicographic order (the execution order of the nest)."""
        ranges = [range(lo, hi + 1) for lo, hi in self.bounding_box()]
        return (p for p in product(*ranges) if self.contains(p))


@dataclass(frozen=True)
class Access:
    """The affine access ``i -> F i + f`` (spec 7.7)."""

    matrix: Matrix
    offset: tuple[int, ...]

    @staticmethod
    def of(matrix: Sequence[Sequence[int]], offset: Sequence[int]) -> "Access":
        return Access(tuple(tuple(int(v) for v in row) for row in matrix), tuple(int(v) for v in offset))

    @staticmethod
    def from_indices(indices: Sequence[Index], loop_vars: Sequence[str]) -> "Access":
        """One subscript per ``Index`` over ``loop_vars`` (outermost first); the indices must be
        affine in the loop variables (no floor division or modulo)."""
        for index in indices:
            bad = [v for v in index.variables() if not index.is_affine_in(v) or v not in loop_vars]
            if bad:
                raise ValueError(f"index {index} is not affine in the loops {list(loop_vars)} (variables {bad})")
        return Access.of([[index.coeff(v) for v in loop_vars] for index in indices], [ix.const for ix in indices])

    @property
    def loops(self) -> int:
        return len(self.matrix[0]) if self.matrix else 0

    def __call__(self, i: Sequence[int]) -> tuple[int, ...]:
        return tuple(sum(c * v for c, v in zip(row, i)) + f for row, f in zip(self.matrix, self.offset))


@dataclass(frozen=True)
class DependenceProblem:
    """Pairs ``(i, j)`` of source and target iterations touching one element (Definition 7.6).

    ``common`` is the number of shared outer loops (default: all loops of the shallower nest);
    ``loop_independent`` adds the pairs with ``i = j`` on the common loops (the source statement
    comes first in the program text)."""

    source: Access
    source_domain: Domain
    target: Access
    target_domain: Domain
    common: int | None = None
    loop_independent: bool = False

    def __post_init__(self) -> None:
        if self.source.loops != self.source_domain.dim or self.target.loops != self.target_domain.dim:
            raise ValueError("an access must have one column per loop of its domain")
        if len(self.source.offset) != len(self.target.offset):
            raise ValueError("source and target access arrays of different rank")

    @property
    def depth(self) -> int:
        shallow = min(self.source_domain.dim, self.target_domain.dim)
        return shallow if self.common is None else self.common

    @property
    def nvars(self) -> int:
        return self.source_domain.dim + self.target_domain.dim

    def levels(self) -> tuple[int, ...]:
        """``1..depth`` carried levels, then ``depth + 1`` (loop-independent) if present."""
        return tuple(range(1, self.depth + 1 + int(self.loop_independent)))

    def _pair_row(self, k: int, i_coeff: int, j_coeff: int, const: int) -> Row:
        """``i_coeff * i_k + j_coeff * j_k + const``."""
        row = [0] * (self.nvars + 1)
        row[k], row[self.source_domain.dim + k], row[-1] = i_coeff, j_coeff, const
        return tuple(row)

    def access_equations(self) -> tuple[Row, ...]:
        """``F_W i + f_W - F_R j - f_R = 0``, one row per subscript."""
        return tuple(ws + tuple(-v for v in rs) + (fw - fr,) for ws, rs, fw, fr in
                     zip(self.source.matrix, self.target.matrix, self.source.offset, self.target.offset))

    def level_rows(self, level: int) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
        """The equalities and inequalities that select level ``level`` (Definition 7.6)."""
        eqs = tuple(self._pair_row(k, 1, -1, 0) for k in range(min(level - 1, self.depth)))
        ineqs = (self._pair_row(level - 1, -1, 1, -1),) if level <= self.depth else ()
        return eqs, ineqs

    def polyhedron(self, level: int) -> Polyhedron:
        """``P^(level)`` of Definition 7.6, over ``(i, j)``."""
        ds = self.source_domain.dim
        zeros_t = (0,) * self.target_domain.dim
        domain = [r[:-1] + zeros_t + r[-1:] for r in self.source_domain.rows]
        domain += [(0,) * ds + r for r in self.target_domain.rows]
        eqs, ineqs = self.level_rows(level)
        return Polyhedron(self.nvars, self.access_equations() + eqs, tuple(domain) + ineqs)

    def distance_row(self, k: int) -> Row:
        """``j_k - i_k`` as a row over ``(i, j)``."""
        return self._pair_row(k, -1, 1, 0)

    def level_of(self, i: Sequence[int], j: Sequence[int]) -> int | None:
        """The level a pair belongs to, or None when ``j`` does not run after ``i``."""
        for k in range(self.depth):
            if i[k] != j[k]:
                return k + 1 if i[k] < j[k] else None
        return self.depth + 1 if self.loop_independent else None


class Outcome(Enum):
    """How a test's answer for a level was reached."""

    COMPLETE = "complete"       # the test ran to its end: its answer is what the test decides
    WORK_LIMIT = "work limit"   # the work limit was reached first: dependent, distance unknown


@dataclass(frozen=True)
class LevelResult:
    """One level's answer: ``possible``; ``distance`` when every pair has that ``j - i`` on the
    common loops; ``witness`` a pair ``(i, j)`` when the test found one; ``outcome`` whether the
    test finished (``Outcome.WORK_LIMIT``: ``possible`` only because the work ran out)."""

    level: int
    possible: bool
    distance: tuple[int, ...] | None = None
    witness: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    outcome: Outcome = Outcome.COMPLETE


@dataclass(frozen=True)
class DependenceResult:
    test: str
    levels: tuple[LevelResult, ...] = field(default_factory=tuple)

    @property
    def possible(self) -> bool:
        return any(r.possible for r in self.levels)

    @property
    def complete(self) -> bool:
        """Every level finished within the work limit."""
        return all(r.outcome is Outcome.COMPLETE for r in self.levels)

    @property
    def carried(self) -> tuple[int, ...]:
        """The levels at which a dependence may exist (``depth + 1`` is loop-independent)."""
        return tuple(r.level for r in self.levels if r.possible)

    @property
    def distance(self) -> tuple[int, ...] | None:
        """The distance vector when the dependence is uniform: one possible level, one distance."""
        possible = [r for r in self.levels if r.possible]
        return possible[0].distance if len(possible) == 1 else None


def _lattice_distance(problem: DependenceProblem, level: int) -> tuple[bool, tuple[int, ...] | None]:
    """Integer solvability of the level's equations and, when they fix ``j - i``, its value."""
    form = problem.polyhedron(level).lattice()
    if form is None:
        return False, None
    rows = [form.substitute(problem.distance_row(k)) for k in range(problem.depth)]
    if any(any(r[:-1]) for r in rows):
        return True, None
    return True, tuple(r[-1] for r in rows)


def _level_order_holds(distance: Sequence[int], level: int, depth: int) -> bool:
    """A uniform distance belongs to ``level`` iff its first nonzero entry is at ``level`` and positive."""
    first = next((k + 1 for k, v in enumerate(distance) if v != 0), depth + 1)
    return first == level and (level > depth or distance[level - 1] > 0)


def gcd_test(problem: DependenceProblem) -> DependenceResult:
    """Spec 7.2's GCD test: integer solutions of the equations, bounds ignored.  When the
    equations fix the distance, its level is checked too (exact for such uniform pairs)."""
    levels = []
    for level in problem.levels():
        solvable, distance = _lattice_distance(problem, level)
        if distance is not None and not _level_order_holds(distance, level, problem.depth):
            solvable, distance = False, None
        levels.append(LevelResult(level, solvable, distance if solvable else None))
    return DependenceResult("gcd", tuple(levels))


def _extremes_2d(a: int, b: int, rows: Sequence[tuple[int, int, int]]) -> tuple[Fraction, Fraction] | None:
    """Min and max of ``a x + b y`` over the bounded polygon ``{alpha x + beta y + gamma >= 0}``."""
    values = []
    for (a1, b1, c1), (a2, b2, c2) in combinations(rows, 2):
        det = a1 * b2 - a2 * b1
        if det == 0:
            continue
        x, y = Fraction(-c1 * b2 + c2 * b1, det), Fraction(-a1 * c2 + a2 * c1, det)
        if all(al * x + be * y + ga >= 0 for al, be, ga in rows):
            values.append(a * x + b * y)
    return (min(values), max(values)) if values else None


def _box_rows(x_box: tuple[int, int], y_box: tuple[int, int]) -> list[tuple[int, int, int]]:
    (xl, xh), (yl, yh) = x_box, y_box
    return [(1, 0, -xl), (-1, 0, xh), (0, 1, -yl), (0, -1, yh)]


def _direction_rows(direction: str) -> list[tuple[int, int, int]]:
    """``=``: i = j; ``<``: i + 1 <= j; ``*``: no constraint."""
    return {"=": [(1, -1, 0), (-1, 1, 0)], "<": [(-1, 1, -1)], "*": []}[direction]


def banerjee_test(problem: DependenceProblem) -> DependenceResult:
    """Spec 7.2's Banerjee test: per level and per equation, the real range of
    ``F_W i - F_R j`` over the loop bounds with the level's direction vector must contain
    ``f_R - f_W``.  Equations are tested one by one (conservative for several subscripts).
    A distance the equations fix is reported and checked against the level, as in ``gcd_test``."""
    s_box, t_box = problem.source_domain.bounding_box(), problem.target_domain.bounding_box()
    ds = problem.source_domain.dim
    levels = []
    for level in problem.levels():
        directions = ["=" if k < level - 1 else "<" if k == level - 1 else "*" for k in range(problem.depth)]
        possible = True
        for eq in problem.access_equations():
            lo = hi = Fraction(0)
            terms = [(eq[k], eq[ds + k], _box_rows(s_box[k], t_box[k]) + _direction_rows(directions[k]))
                     for k in range(problem.depth)]
            terms += [(eq[k], 0, _box_rows(s_box[k], s_box[k])) for k in range(problem.depth, ds)]
            terms += [(0, eq[ds + k], _box_rows(t_box[k], t_box[k]))
                      for k in range(problem.depth, problem.target_domain.dim)]
            for a, b, rows in terms:
                ext = _extremes_2d(a, b, rows)
                if ext is None:
                    possible = False
                    break
                lo, hi = lo + ext[0], hi + ext[1]
            if not possible or not lo <= -eq[-1] <= hi:
                possible = False
                break
        distance = _lattice_distance(problem, level)[1] if possible else None
        if distance is not None and not _level_order_holds(distance, level, problem.depth):
            possible, distance = False, None
        levels.append(LevelResult(level, possible, distance))
    return DependenceResult("banerjee", tuple(levels))


def _uniform_distance(problem: DependenceProblem, form: LatticeForm, witness: Sequence[int],
                      budget: Budget) -> tuple[int, ...] | None:
    """The distance every pair of ``form`` shares, or None: component by component, the witness's
    value unless the lattice leaves it free and a pair below or above it exists (two integer points)."""
    distance = []
    for k in range(problem.depth):
        row = problem.distance_row(k)
        value = sum(c * v for c, v in zip(row, witness)) + row[-1]
        if any(form.substitute(row)[:-1]):
            below = tuple(-c for c in row[:-1]) + (value - 1 - row[-1],)    # j_k - i_k <= value - 1
            above = row[:-1] + (row[-1] - value - 1,)                       # j_k - i_k >= value + 1
            if form.integer_point([below], budget) is not None or form.integer_point([above], budget) is not None:
                return None
        distance.append(value)
    return tuple(distance)


def exact_test(problem: DependenceProblem, work_limit: int = WORK_LIMIT) -> DependenceResult:
    """The exact integer test (Omega-style, ``LatticeForm.integer_point``) per level, with a witness
    pair and, when every pair shares it, the distance (decided by integer points too, so exact).
    The levels share one budget of ``work_limit`` units; from the level that exhausts it on, each
    level is reported dependent with no distance and ``Outcome.WORK_LIMIT`` (conservative)."""
    ds = problem.source_domain.dim
    budget = Budget(work_limit)
    levels = []
    for level in problem.levels():
        form = problem.polyhedron(level).lattice()
        point = None
        try:   # a search spends before anything else: it raises at once when an earlier level spent the budget
            point = None if form is None else form.integer_point(budget=budget)
            if point is None:
                levels.append(LevelResult(level, False))
                continue
            distance = _uniform_distance(problem, form, point, budget)
            levels.append(LevelResult(level, True, distance, (point[:ds], point[ds:])))
        except WorkLimitReached:
            witness = None if point is None else (point[:ds], point[ds:])
            levels.append(LevelResult(level, True, None, witness, Outcome.WORK_LIMIT))
    return DependenceResult("exact", tuple(levels))


def dependence_pairs(problem: DependenceProblem) -> dict[int, list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Every dependent pair ``(i, j)`` by level, by enumerating both domains (small nests only)."""
    by_access: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for j in problem.target_domain.points():
        by_access.setdefault(problem.target(j), []).append(j)
    out: dict[int, list] = {level: [] for level in problem.levels()}
    for i in problem.source_domain.points():
        for j in by_access.get(problem.source(i), ()):
            level = problem.level_of(i, j)
            if level is not None:
                out[level].append((i, j))
    return out


def enumeration_test(problem: DependenceProblem) -> DependenceResult:
    """The reference: ``dependence_pairs``, with the distance when every pair of a level shares it."""
    levels = []
    for level, pairs in dependence_pairs(problem).items():
        distances = {tuple(j[k] - i[k] for k in range(problem.depth)) for i, j in pairs}
        levels.append(LevelResult(level, bool(pairs), distances.pop() if len(distances) == 1 else None,
                                  pairs[0] if pairs else None))
    return DependenceResult("enumeration", tuple(levels))
