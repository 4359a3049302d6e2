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
    for point in product(*(range(n) for n in ranges)):
        values = dict(zip(names, point))
        assert quotient.evaluate(values) == expr.evaluate(values) // k, (expr, k, quotient, values)
        assert remainder.evaluate(values) == expr.evaluate(values) % k, (expr, k, remainder, values)


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
