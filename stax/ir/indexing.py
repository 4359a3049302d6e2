"""Affine index expressions over loop variables, with floor division and modulo atoms.

An index is ``const + sum(coeff * atom)`` where an atom is a loop variable or ``FloorDiv`` /
``Mod`` of an index by a positive constant (reshapes produce them).  Simplification uses the
variables' ranges (``0 <= v < range``): ``(128*x0 + x1) // 128 -> x0`` when ``x1 < 128``, and
``128*(c // 128) + c % 128 -> c`` (TorchInductor's index simplification, spec 6.8).

``normalize_dependency`` is the normalization of spec example 7.1: the read of a 64x128
buffer ``128*i0 + i1`` becomes ``c0`` over 8192.

    >>> x0, x1 = Index.var("x0"), Index.var("x1")
    >>> ranges = {"x0": 64, "x1": 128}
    >>> str(floordiv(x0 * 128 + x1, 128, ranges)), str(mod(x0 * 128 + x1, 128, ranges))
    ('x0', 'x1')
    >>> normalize_dependency(x0 * 128 + x1, ["x0", "x1"], ranges)
    (Index(terms=(('c0', 1),), const=0), {'c0': 8192})
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Mapping, Sequence, Union


@dataclass(frozen=True, order=True)
class FloorDiv:
    base: "Index"
    divisor: int

    def __str__(self) -> str:
        return f"(({self.base}) / {self.divisor})"


@dataclass(frozen=True, order=True)
class Mod:
    base: "Index"
    modulus: int

    def __str__(self) -> str:
        return f"(({self.base}) % {self.modulus})"


Atom = Union[str, FloorDiv, Mod]


def _atom_key(atom: Atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, str(atom))


@dataclass(frozen=True)
class Index:
    """``const + sum(coeff * atom)``; terms sorted by atom, no zero coefficients."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    @staticmethod
    def var(name: str) -> "Index":
        return Index(((name, 1),), 0)

    @staticmethod
    def constant(value: int) -> "Index":
        return Index((), int(value))

    @staticmethod
    def build(coeffs: Mapping[Atom, int], const: int = 0) -> "Index":
        items = [(a, c) for a, c in coeffs.items() if c != 0]
        if all(isinstance(a, str) for a, _ in items):  # variables only: sorted by name, nothing to cancel
            return Index(tuple(sorted(items)), int(const))
        return _cancel_div_mod(Index(tuple(sorted(items, key=lambda t: _atom_key(t[0]))), int(const)))

    def as_dict(self) -> dict[Atom, int]:
        return dict(self.terms)

    def __add__(self, other: "Index | int") -> "Index":
        if isinstance(other, int):
            return Index(self.terms, self.const + other)
        if not other.terms or not self.terms:  # a constant added: the terms stay as they are
            return Index(self.terms or other.terms, self.const + other.const)
        coeffs = self.as_dict()
        for atom, c in other.terms:
            coeffs[atom] = coeffs.get(atom, 0) + c
        return Index.build(coeffs, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, k: int) -> "Index":
        if k == 0 or _has_mod(self.terms):
            return Index.build({a: c * k for a, c in self.terms}, self.const * k)
        return Index(tuple((a, c * k) for a, c in self.terms), self.const * k)  # same order, nothing to cancel

    __rmul__ = __mul__

    def coeff(self, var: str) -> int:
        """Coefficient of ``var`` as a direct term (0 if absent)."""
        return self.as_dict().get(var, 0)

    def variables(self) -> set[str]:
        """Every variable the expression depends on, inside atoms too."""
        out: set[str] = set()
        for atom, _ in self.terms:
            out |= {atom} if isinstance(atom, str) else atom.base.variables()
        return out

    def is_affine_in(self, var: str) -> bool:
        """True when ``var`` appears only as a direct term (not inside a floor division or modulo)."""
        return all(isinstance(a, str) or var not in a.base.variables() for a, _ in self.terms)

    def subs(self, mapping: Mapping[str, "Index"], ranges: Mapping[str, int]) -> "Index":
        """Substitute variables by indices and simplify with ``ranges`` (of the new variables);
        summed at once when the index and its values are affine (``_affine_sum``)."""
        if all(isinstance(atom, str) for atom, _ in self.terms):
            values = [(mapping.get(atom, Index.var(atom)), c) for atom, c in self.terms]
            affine = _affine_sum([(Index.constant(self.const), 1), *values])
            if affine is not None:
                return affine
        out = Index.constant(self.const)
        for atom, c in self.terms:
            if isinstance(atom, str):
                term = mapping.get(atom, Index.var(atom))
            elif isinstance(atom, FloorDiv):
                term = floordiv(atom.base.subs(mapping, ranges), atom.divisor, ranges)
            else:
                term = mod(atom.base.subs(mapping, ranges), atom.modulus, ranges)
            out = out + term * c
        return out

    def bounds(self, ranges: Mapping[str, int]) -> tuple[int, int]:
        """Smallest and largest value over the variables' ranges (interval arithmetic)."""
        lo = hi = self.const
        for atom, c in self.terms:
            a_lo, a_hi = _atom_bounds(atom, ranges)
            lo += min(c * a_lo, c * a_hi)
            hi += max(c * a_lo, c * a_hi)
        return lo, hi

    def evaluate(self, values: Mapping[str, int]) -> int:
        total = self.const
        for atom, c in self.terms:
            if isinstance(atom, str):
                v = values[atom]
            elif isinstance(atom, FloorDiv):
                v = atom.base.evaluate(values) // atom.divisor
            else:
                v = atom.base.evaluate(values) % atom.modulus
            total += c * v
        return total

    def __str__(self) -> str:
        parts = []
        for atom, c in self.terms:
            parts.append(str(atom) if c == 1 else f"{c}*{atom}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def lane_step(index: Index, var: str, width: int) -> int | None:
    """The step between neighbouring lanes of a vector of ``width`` lanes along ``var`` whose
    first lane is a multiple of ``width``: ``index(v0 + l) == index(v0) + step * l`` for every
    lane ``l < width`` and any values of the other variables (an affine index: its coefficient of
    ``var``), or None when no step does.  A floor division or modulo by ``d`` of a term stepping
    by ``s`` keeps one step when ``s * width`` divides both ``d`` and the term's first lane, so
    that no lane crosses a multiple of ``d``: the heads of a multi-head reshape read as
    ``v // 64`` and ``v % 64``.

        >>> v = Index.var("v")
        >>> lane_step(mod(v, 64, {"v": 256}) + floordiv(v, 64, {"v": 256}) * 4096, "v", 16)
        1
        >>> lane_step(mod(v, 8, {"v": 256}), "v", 16) is None
        True
    """
    form = _lane_form(index, var, width)
    return None if form is None else form[0]


def _lane_form(index: Index, var: str, width: int) -> tuple[int, int] | None:
    """``(step, g)``: the lanes' step, and a ``g`` dividing the first lane's value (0: it is 0)."""
    step, align = 0, index.const
    for atom, c in index.terms:
        if isinstance(atom, str):
            s, g = (1, width) if atom == var else (0, 1)
        else:
            base = _lane_form(atom.base, var, width)
            if base is None:
                return None
            s, g = base
            d = atom.divisor if isinstance(atom, FloorDiv) else atom.modulus
            if s and (s < 0 or d % (s * width) or g % (s * width)):
                return None  # a lane may cross a multiple of d
            s, g = (0, 1) if isinstance(atom, FloorDiv) else (s, gcd(g, d))
        step, align = step + c * s, gcd(align, c * g)
    return step, align


def _atom_bounds(atom: Atom, ranges: Mapping[str, int]) -> tuple[int, int]:
    if isinstance(atom, str):
        return 0, max(ranges[atom] - 1, 0)
    lo, hi = atom.base.bounds(ranges)
    if isinstance(atom, FloorDiv):
        return lo // atom.divisor, hi // atom.divisor
    if lo >= 0 and hi < atom.modulus:
        return lo, hi
    return 0, atom.modulus - 1


def _split(expr: Index, k: int) -> tuple[Index, Index]:
    """``expr = k*quotient + rest`` where rest keeps the terms whose coefficients k does not divide."""
    q, r = {}, {}
    for atom, c in expr.terms:
        if c % k == 0:
            q[atom] = c // k
        else:
            r[atom] = c
    return Index.build(q, expr.const // k), Index.build(r, expr.const % k)


def _split_below(expr: Index, k: int, ranges: Mapping[str, int]) -> tuple[int, Index, Index] | None:
    """``expr = d*quotient + rest`` with ``0 <= rest < d`` for the largest divisor ``d > 1`` of
    ``k`` that allows it (``d`` is ``k`` or shared by a coefficient and ``k``), or None."""
    for d in sorted({k} | {gcd(c, k) for _, c in expr.terms}, reverse=True):
        if d > 1:
            quotient, rest = _split(expr, d)
            lo, hi = rest.bounds(ranges)
            if 0 <= lo and hi < d:
                return d, quotient, rest
    return None


def floordiv(expr: Index, k: int, ranges: Mapping[str, int]) -> Index:
    """``expr // k``, exact: with ``expr = d*q + r`` (``0 <= r < d``, ``d`` divides ``k``) it is
    ``q // (k / d)``: ``(1024*x0 + x1) // 131072 -> x0 // 128`` when ``x1 < 1024``; otherwise the
    terms that ``k`` divides come out when the rest is never negative (the kernels print floor
    division as C's truncating ``/``): ``(x0 + 768*y0) // 256 -> 3*y0 + x0 // 256``."""
    if k == 1:
        return expr
    split = _split_below(expr, k, ranges)
    if split is not None:
        d, quotient, _ = split
        return quotient if d == k else floordiv(quotient, k // d, ranges)
    multiple, rest = _split(expr, k)
    if multiple != Index.constant(0) and rest.bounds(ranges)[0] >= 0:  # C's / truncates: keep bases >= 0
        return multiple + floordiv(rest, k, ranges)
    return Index(((FloorDiv(expr, k), 1),), 0)


def mod(expr: Index, k: int, ranges: Mapping[str, int]) -> Index:
    """``expr % k``, exact: with ``expr = d*q + r`` as in ``floordiv`` it is ``d*(q % (k / d)) + r``;
    otherwise the terms that ``k`` divides drop out when the rest is never negative."""
    if k == 1:
        return Index.constant(0)
    split = _split_below(expr, k, ranges)
    if split is not None:
        d, quotient, rest = split
        return rest if d == k else mod(quotient, k // d, ranges) * d + rest
    multiple, rest = _split(expr, k)
    if multiple != Index.constant(0) and rest.bounds(ranges)[0] >= 0:  # C's % truncates: keep bases >= 0
        return mod(rest, k, ranges)
    return Index(((Mod(expr, k), 1),), 0)


def _has_mod(terms: tuple[tuple[Atom, int], ...]) -> bool:
    return any(isinstance(atom, Mod) for atom, _ in terms)


def _cancel_div_mod(expr: Index) -> Index:
    """``k*m*(e // k) + m*(e % k) -> m*e`` (the pattern a reshape of a contiguous buffer leaves)."""
    if not _has_mod(expr.terms):
        return expr
    coeffs = expr.as_dict()
    for atom, c in list(coeffs.items()):
        if isinstance(atom, Mod) and atom in coeffs:
            div = FloorDiv(atom.base, atom.modulus)
            if coeffs.get(div) == c * atom.modulus:
                del coeffs[atom], coeffs[div]
                rebuilt = Index.build(coeffs, expr.const) + atom.base * c
                return rebuilt
    return expr


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def _affine_sum(scaled: Sequence[tuple[Index, int]]) -> Index | None:
    """``sum(index * k)`` in one build when every index is affine (nothing to simplify), else None."""
    coeffs: dict[Atom, int] = {}
    const = 0
    for index, k in scaled:
        const += index.const * k
        for atom, c in index.terms:
            if not isinstance(atom, str):
                return None
            coeffs[atom] = coeffs.get(atom, 0) + c * k
    return Index.build(coeffs, const)


def linear_index(indices: Sequence[Index], strides: Sequence[int]) -> Index:
    """``sum(index * stride)``; summed at once when every index is affine (``_affine_sum``)."""
    affine = _affine_sum(list(zip(indices, strides)))
    if affine is not None:
        return affine
    out = Index.constant(0)
    for idx, stride in zip(indices, strides):
        out = out + idx * stride
    return out


def normalize_dependency(index: Index, order: Sequence[str], ranges: Mapping[str, int]) -> tuple[Index, dict[str, int]]:
    """Spec example 7.1's normalization of a MemoryDep: drop variables the index does not use,
    merge adjacent variables that address memory contiguously (outer coeff = inner coeff * inner
    range), and rename the survivors ``c0, c1, ...`` from outermost to innermost."""
    used = [v for v in order if v in index.variables() and ranges[v] > 1]
    groups: list[list[str]] = []
    for v in used:
        if groups and index.is_affine_in(v) and index.is_affine_in(groups[-1][-1]) \
                and index.coeff(groups[-1][-1]) == index.coeff(v) * ranges[v] and index.coeff(v) != 0:
            groups[-1].append(v)
        else:
            groups.append([v])
    rename: dict[str, Index] = {v: Index.constant(0) for v in order if v not in used}
    merged_terms: dict[Atom, int] = {}
    new_ranges: dict[str, int] = {}
    for i, group in enumerate(groups):
        name = f"c{i}"
        new_ranges[name] = 1
        for v in group:
            new_ranges[name] *= ranges[v]
        if len(group) == 1:
            rename[group[0]] = Index.var(name)
        else:
            merged_terms[name] = index.coeff(group[-1])
    merged_vars = {v for g in groups if len(g) > 1 for v in g}
    rest = Index.build({a: c for a, c in index.terms if a not in merged_vars}, index.const)
    return rest.subs(rename, new_ranges) + Index.build(merged_terms), new_ranges
