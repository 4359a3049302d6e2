"""``Tensor.diagonal`` and ``diagonal_scatter`` against numpy's ``diagonal`` (and a scatter by its
flat positions): every offset inside and outside the matrix, every pair of dims, empty and
one-element dims, each dtype; the compiled program against the reference evaluator too."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from stax.errors import ShapeError
from stax.reference import evaluate


def numpy_diagonal_scatter(x: np.ndarray, src: np.ndarray, offset: int, dim1: int, dim2: int) -> np.ndarray:
    """``x`` with its diagonal set to ``src``, through the diagonal's flat positions in ``x``."""
    out = x.copy()
    out.reshape(-1)[np.diagonal(np.arange(x.size).reshape(x.shape), offset, dim1, dim2)] = src
    return out


def diagonal_program(offset: int, dim1: int, dim2: int):
    def program(x, src):
        return x.diagonal(offset, dim1, dim2) * 2, x.diagonal_scatter(src, offset, dim1, dim2)
    return program


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=2, max_size=4), data=st.data())
def test_diagonals_and_their_scatters_equal_numpy(shape, data):
    ndim = len(shape)
    dim1, dim2 = data.draw(st.sampled_from(list(itertools.permutations(range(-ndim, ndim), 2))
                                           ).filter(lambda p: p[0] % ndim != p[1] % ndim))
    offset = data.draw(st.integers(-6, 6))
    dtype = data.draw(st.sampled_from(["float32", "float64", "int32", "int64"]))
    rng = np.random.default_rng(len(shape) * 13 + offset + 6)
    x = rng.integers(-9, 9, shape).astype(dtype)
    want = np.diagonal(x, offset, dim1, dim2)
    src = rng.integers(-9, 9, want.shape).astype(dtype)
    compiled = stax.compile(diagonal_program(offset, dim1, dim2), x, src)
    got = compiled(x, src)
    reference = evaluate(compiled.graph, x, src)
    for have, expected, evaluated in zip(got, (want * 2, numpy_diagonal_scatter(x, src, offset, dim1, dim2)),
                                         reference):
        assert have.dtype == expected.dtype and np.array_equal(have, expected)
        assert np.array_equal(evaluated, expected)


def test_a_diagonal_of_a_transposed_input_reads_its_elements():
    x = np.arange(30, dtype=np.float32).reshape(5, 6).T  # (6, 5), strides of a transpose
    got = stax.compile(lambda a: a.diagonal(-1) + 0, x)(x)
    np.testing.assert_array_equal(got, np.diagonal(x, -1))


@pytest.mark.parametrize("shape, dims, message", [((4,), (0, 1), "at least 2 dims"),
                                                  ((3, 3), (1, -1), "name the same dim")])
def test_bad_diagonals_name_what_is_wrong(shape, dims, message):
    x = np.zeros(shape, np.float32)
    with pytest.raises(ShapeError, match=message):
        stax.trace(lambda a: a.diagonal(0, *dims), x)
    with pytest.raises(ShapeError, match="does not match the diagonal's shape"):
        stax.trace(lambda a, s: a.diagonal_scatter(s), np.zeros((3, 4), np.float32), np.zeros(4, np.float32))
