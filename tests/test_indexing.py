"""Index simplification (stax/indexing.py): floor division and modulo by a constant, against
evaluation at every point of random affine expressions, and the reshape pattern they must fold."""
from __future__ import annotations

import doctest
from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st

import stax.indexing
from stax.indexing import FloorDiv, Index, Mod, floordiv, mod

COEFFICIENTS = st.sampled_from([0, 1, 2, 3, 4, 6, 8, 12, 16, 64, -1, -4])


def test_doctests():
    assert doctest.testmod(stax.indexing).failed == 0


@settings(max_examples=300, deadline=None)
@given(ranges=st.lists(st.integers(1, 9), min_size=1, max_size=3), coefficients=st.lists(COEFFICIENTS, min_size=3,
       max_size=3), const=st.integers(-20, 40), k=st.sampled_from([2, 3, 4, 6, 8, 12, 16, 24, 32, 128]))
def test_floordiv_and_mod_equal_python_at_every_point(ranges, coefficients, const, k):
    names = [f"x{i}" for i in range(len(ranges))]
    bounds = dict(zip(names, ranges))
    expr = Index.build(dict(zip(names, coefficients)), const)
    quotient, remainder = floordiv(expr, k, bounds), mod(expr, k, bounds)
    if expr.bounds(bounds)[0] >= 0:  # the kernels print floor division as C's truncating / and %
        atoms = [a for result in (quotient, remainder) for a, _ in result.terms if not isinstance(a, str)]
        assert all(a.base.bounds(bounds)[0] >= 0 for a in atoms), (expr, k, quotient, remainder)
    for point in product(*(range(n) for n in ranges)):
        values = dict(zip(names, point))
        assert quotient.evaluate(values) == expr.evaluate(values) // k, (expr, k, quotient, values)
        assert remainder.evaluate(values) == expr.evaluate(values) % k, (expr, k, remainder, values)


def _normal_form(expr: Index) -> Index:
    """The expression rebuilt from its terms: sorted atoms, no zero coefficients, div/mod cancelled."""
    return Index.build(expr.as_dict(), expr.const)


@settings(max_examples=300, deadline=None)
@given(ranges=st.lists(st.integers(1, 9), min_size=2, max_size=2), a=st.lists(COEFFICIENTS, min_size=4, max_size=4),
       b=st.lists(COEFFICIENTS, min_size=4, max_size=4), k=st.sampled_from([0, 1, -1, 2, 3, 16]),
       divisor=st.sampled_from([2, 4, 8]))
def test_sums_and_multiples_of_indices_evaluate_as_integers_and_stay_in_normal_form(ranges, a, b, k, divisor):
    """``+`` and ``*`` (with their shortcuts for constants and for terms without a modulo) equal
    the integers' sum and product at every point and return the normal form ``Index.build``
    gives, on expressions with floor division and modulo atoms."""
    names = ["x0", "x1"]
    bounds = dict(zip(names, ranges))
    flat = Index.var("x0") * ranges[1] + Index.var("x1")
    atoms = [Index.var("x0"), Index.var("x1"), floordiv(flat, divisor, bounds), mod(flat, divisor, bounds)]

    def combine(coefficients: list[int], const: int) -> Index:
        out = Index.constant(const)
        for c, atom in zip(coefficients, atoms):
            out = out + atom * c
        return out

    x, y = combine(a, 3), combine(b, -2)
    for result in (x + y, x * k, y * k, x + Index.constant(5), Index.constant(5) + x):
        assert result == _normal_form(result), result
    for point in product(*(range(n) for n in ranges)):
        values = dict(zip(names, point))
        assert (x + y).evaluate(values) == x.evaluate(values) + y.evaluate(values)
        assert (x * k).evaluate(values) == k * x.evaluate(values)


def test_a_reshape_of_a_split_head_folds_back_to_affine():
    """(1024, 1024) read through a view of (8, 128, 1024): ``x1 + 131072*((1024*x0 + x1) // 131072)
    + 1024*(x0 % 128)`` is ``1024*x0 + x1`` (a transformer's head reshape; unfolded it kept a whole
    kernel out of vector form)."""
    x0, x1 = Index.var("x0"), Index.var("x1")
    ranges = {"x0": 1024, "x1": 1024}
    index = x1 + floordiv(x0 * 1024 + x1, 131072, ranges) * 131072 + mod(x0, 128, ranges) * 1024
    assert index == x0 * 1024 + x1
    assert floordiv(x0 * 1024 + x1, 131072, ranges) == Index(((FloorDiv(x0, 128), 1),), 0)
    assert mod(x0 * 1024 + x1, 131072, ranges) == mod(x0, 128, ranges) * 1024 + x1
    assert mod(x0 * 3 + x1, 8, ranges) == Index(((Mod(x0 * 3 + x1, 8), 1),), 0)  # no divisor of 8 splits it


def test_terms_the_divisor_divides_come_out_of_a_floor_division():
    """``(x0 + 6144*y0 + 768*y1) // 256 % 3`` (the q/k/v part of a fused in-projection, x0 < 768)
    is ``x0 // 256``: invariant in the reduction's y0 and y1."""
    x0, y0, y1 = Index.var("x0"), Index.var("y0"), Index.var("y1")
    ranges = {"x0": 768, "y0": 128, "y1": 8}
    quotient = floordiv(x0 + y0 * 6144 + y1 * 768, 256, ranges)
    assert quotient == y0 * 24 + y1 * 3 + floordiv(x0, 256, ranges)
    assert mod(quotient, 3, ranges) == floordiv(x0, 256, ranges)
    assert mod(x0 + y0 * 6144 + -1, 256, ranges) == mod(x0 + -1, 256, ranges)
