"""Index simplification (stax/ir/indexing.py): floor division and modulo by a constant, against
evaluation at every point of random affine expressions, and the reshape pattern they must fold."""
from __future__ import annotations

import doctest
from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

import stax
import stax.ir.indexing
from stax.ir.indexing import FloorDiv, Index, Mod, contiguous_strides, floordiv, linear_index, mod
from stax.ir.loops import ComputedBuffer, Load, Op, loads
from stax.lowering import lower, simplify_loops

COEFFICIENTS = st.sampled_from([0, 1, 2, 3, 4, 6, 8, 12, 16, 64, -1, -4])


def test_doctests():
    assert doctest.testmod(stax.ir.indexing).failed == 0


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


@settings(max_examples=300, deadline=None)
@given(ranges=st.lists(st.integers(1, 6), min_size=1, max_size=2), data=st.data())
def test_substitution_equals_evaluating_the_values_and_keeps_the_normal_form(ranges, data):
    """``Index.subs`` (with its shortcut for affine indices and values) at every point of the new
    variables equals the old index at the substituted values, and is in normal form."""
    new = [f"y{i}" for i in range(len(ranges))]
    bounds = dict(zip(new, ranges))

    def affine(names):
        return Index.build(dict(zip(names, data.draw(st.lists(COEFFICIENTS, min_size=len(names),
                                                               max_size=len(names))))), data.draw(st.integers(-3, 9)))

    def value():
        expr = affine(new)
        shape = data.draw(st.sampled_from(["affine", "div", "mod"]))
        return expr if shape == "affine" else floordiv(expr, 4, bounds) if shape == "div" else mod(expr, 3, bounds)
    old = affine(["x0", "x1", "z"])  # z is not substituted
    if data.draw(st.booleans()):
        old = old + floordiv(affine(["x0"]), 2, {"x0": 100}) * 3
    mapping = {"x0": value(), "x1": value()}
    result = old.subs(mapping, bounds)
    assert result == _normal_form(result)
    for point in product(*(range(n) for n in ranges)):
        values = dict(zip(new, point), z=5)
        substituted = {"x0": mapping["x0"].evaluate(values), "x1": mapping["x1"].evaluate(values), "z": 5}
        assert result.evaluate(values) == old.evaluate(substituted), (old, mapping, result, values)


@settings(max_examples=200, deadline=None)
@given(ranges=st.lists(st.integers(1, 5), min_size=2, max_size=2), data=st.data())
def test_linear_index_is_the_sum_of_its_terms_in_normal_form(ranges, data):
    """``linear_index`` (summed at once when every index is affine) equals ``sum(index * stride)``
    at every point, in normal form, with floor-division and modulo indices among them or not."""
    bounds = {"x0": ranges[0], "x1": ranges[1]}
    indices = []
    for _ in range(data.draw(st.integers(1, 3))):
        expr = Index.build({"x0": data.draw(COEFFICIENTS), "x1": data.draw(COEFFICIENTS)}, data.draw(st.integers(-3, 3)))
        indices.append(expr if data.draw(st.booleans()) else mod(expr, 4, bounds))
    strides = data.draw(st.lists(st.integers(-3, 64), min_size=len(indices), max_size=len(indices)))
    result = linear_index(indices, strides)
    assert result == _normal_form(result)
    for point in product(*(range(n) for n in ranges)):
        values = dict(zip(bounds, point))
        assert result.evaluate(values) == sum(i.evaluate(values) * k for i, k in zip(indices, strides))


def _accesses(buf, outer_names, inner_names):
    """What a loop nest does: each stored address, with the sorted addresses its loads read at
    every reduction point (guards as conditions met or not)."""
    ranges = dict(zip(outer_names + inner_names, buf.ranges + buf.reduction_ranges))
    done = {}
    for outer in product(*(range(ranges[v]) for v in outer_names)):
        reads = []
        for inner in product(*(range(ranges[v]) for v in inner_names)):
            values = dict(zip(outer_names + inner_names, outer + inner))
            reads.append(tuple((ld.index.evaluate(values), *(0 <= e.evaluate(values) < n for e, n in ld.guard))
                               for ld in loads(buf.body)))
        done[buf.store_index.evaluate(dict(zip(outer_names, outer)))] = sorted(reads)
    return done


@settings(max_examples=300, deadline=None)
@given(ranges=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       reduction_ranges=st.lists(st.integers(1, 3), max_size=2), data=st.data())
def test_loop_simplification_keeps_what_every_iteration_stores_and_reads(ranges, reduction_ranges, data):
    """``simplify_loops`` (merged contiguous loops, dropped size-1 loops, one empty loop for an
    empty nest): the same stores, each with the same loads, for loads that are contiguous over
    any order of the variables, offset, scaled, through a floor division or modulo (of all their
    variables or of some), or guarded."""
    outer = [f"x{i}" for i in range(len(ranges))]
    inner = [f"r{i}" for i in range(len(reduction_ranges))]
    sizes = dict(zip(outer + inner, ranges + reduction_ranges))

    def index(names):
        order = data.draw(st.permutations(names))
        stride, coeffs = data.draw(st.sampled_from([1, 2, 3])), {}
        for name in reversed(order):
            coeffs[name] = stride
            stride *= max(sizes[name], 1)
        expr = Index.build(coeffs, data.draw(st.integers(0, 5)))
        shape = data.draw(st.sampled_from(["affine", "div", "mod", "mixed"]))
        if shape == "mixed":  # the first variables' terms kept, the others' through a modulo
            kept = data.draw(st.integers(0, len(order)))
            rest = Index.build({v: c for v, c in coeffs.items() if v not in order[:kept]})
            return Index.build({v: coeffs[v] for v in order[:kept]}, expr.const) + mod(rest, 5, sizes) * 7
        return expr if shape == "affine" else floordiv(expr, 2, sizes) if shape == "div" else mod(expr, 3, sizes)
    load_vars = outer + inner
    body_loads = [Load(f"in{k}", index(load_vars), "float32") for k in range(data.draw(st.integers(1, 3)))]
    if data.draw(st.booleans()):
        body_loads.append(Load("padded", index(load_vars), "float32", ((index(load_vars) + (-2), 5),)))
    store = Index.build({v: c for v, c in zip(outer, contiguous_strides(ranges))})
    buf = ComputedBuffer("buf0", tuple(ranges), "float32", tuple(ranges), Op("add", tuple(body_loads), "float32"),
                         tuple(reduction_ranges), "sum" if inner else None, store)
    before = _accesses(buf, outer, inner)
    simplify_loops(buf)
    assert _accesses(buf, buf.pointwise_vars, buf.reduction_vars) == before
    assert all(n != 1 for n in buf.ranges + buf.reduction_ranges)


def test_contiguous_loops_of_any_depth_merge_into_affine_indices():
    """A 4-d contiguous program's loops merge (into rows and columns at most), its indices plain
    sums of the merged variables (substituting the merge's floor divisions and modulos left
    three-level nests like ``128*((x // 128) % 4) + x % 128 + 512*(x // 512)``, which dependence
    checks took for other points than ``x``: the transformer's softmax kernels did not fuse)."""
    x = np.ones((2, 8, 4, 16), np.float32)
    program = lower(stax.trace(lambda a: (a * 2).exp() / (a * 2).exp().sum(-1, keepdim=True), x))
    indices = [ix for buf in program.buffers for ld in buf.reads() for ix in (ld.index, buf.store_index)]
    assert indices and all(isinstance(atom, str) for ix in indices for atom, _ in ix.terms), indices
    assert all(len(buf.ranges) <= 2 for buf in program.buffers)


def _lane_expressions(depth: int):
    """Index expressions in ``v`` and ``u`` with nested floor divisions and modulos (built as
    written, unsimplified, the way a chain of reshapes leaves them)."""
    leaf = st.sampled_from([Index.var("v"), Index.var("u"), Index.var("v") * 2 + Index.var("u") * 64])
    if depth == 0:
        return leaf
    inner = _lane_expressions(depth - 1)
    divisors = st.sampled_from([2, 4, 8, 16, 32, 64, 256, 3, 12])
    atom = st.builds(lambda base, d, div: Index((((FloorDiv if div else Mod)(base, d), 1),)),
                     inner, divisors, st.booleans())
    return st.one_of(leaf, st.builds(lambda a, b, c, k: a * c + b + k, atom, st.one_of(leaf, atom),
                                     COEFFICIENTS, st.integers(0, 40)))


@settings(max_examples=400, deadline=None)
@given(expr=_lane_expressions(3), width=st.sampled_from([4, 8, 16]), start=st.integers(0, 40), u=st.integers(0, 70))
def test_lane_step_holds_at_every_lane_of_an_aligned_vector(expr, width, start, u):
    """``lane_step``'s claim, checked by evaluation: from any first lane that is a multiple of the
    width, and any value of the other variable, every lane is the first plus step times the lane."""
    step = stax.ir.indexing.lane_step(expr, "v", width)
    if step is None:
        return
    v0 = start * width
    first = expr.evaluate({"v": v0, "u": u})
    assert all(expr.evaluate({"v": v0 + lane, "u": u}) == first + step * lane for lane in range(width)), (expr, step)


def test_lane_step_of_a_multi_head_reshape():
    """The heads of attention read ``v`` as ``v // 64`` and ``v % 64``: one step along 16 lanes
    (no vector crosses a head), none along 16 lanes of ``v % 8``; affine indices step by their
    coefficient."""
    v, ranges = Index.var("v"), {"v": 768}
    heads = mod(mod(v, 256, ranges), 64, ranges) + floordiv(mod(v, 256, ranges), 64, ranges) * 4096
    assert stax.ir.indexing.lane_step(heads, "v", 16) == 1
    assert stax.ir.indexing.lane_step(heads * 3 + floordiv(v, 256, ranges) * 7, "v", 16) == 3
    assert stax.ir.indexing.lane_step(mod(v, 8, ranges), "v", 16) is None
    assert stax.ir.indexing.lane_step(v * 5 + 2, "v", 16) == 5
