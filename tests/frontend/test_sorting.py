"""Sorting by counting (stax.frontend.ops.sorting): sort, argsort and topk against an order written in the
test (Python's ``sorted`` with torch's keys: NaN greatest, ties by position), for every dtype,
NaN, signed zeros, 0-d and empty inputs, under three fusions; a law (hypothesis); and, where
torch is installed, modules that sort and take the top k, forward and training step, against
torch."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import stax
from stax.errors import ShapeError, UnsupportedError
from stax.frontend.ops.sorting import MAX_SELECTED, MAX_SORTED

from tests.helpers import assert_matches_torch

RNG = np.random.default_rng(8)


def _order(row: np.ndarray, descending: bool) -> list[int]:
    """Positions of ``row`` in torch's stable order: NaN greatest, ties by position."""
    def key(i: int):
        value = float(row[i])
        nan = math.isnan(value)
        return ((0 if nan else 1, 0.0 if nan else -value, i) if descending else (1 if nan else 0, 0.0 if nan else value, i))
    return sorted(range(len(row)), key=key)


def _expected(x: np.ndarray, dim: int, descending: bool, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    moved = np.moveaxis(x, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    index = np.array([_order(r, descending)[:k] for r in rows], np.int64).reshape(*moved.shape[:-1], -1)
    values = np.take_along_axis(moved, index, -1)
    return np.moveaxis(values, -1, dim), np.moveaxis(index, -1, dim)


def _data(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(-4, 5, shape).astype(dtype)  # many ties
    x = RNG.integers(-3, 4, shape).astype(dtype)
    x.flat[::5] = np.nan
    x.flat[1::7] = -0.0
    x.flat[2::11] = np.inf
    return x


def _assert_same(got, want) -> None:
    for have, ref in zip(got, want):
        assert have.dtype == ref.dtype and have.shape == ref.shape
        np.testing.assert_array_equal(have, ref)
        if have.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(have), np.signbit(ref))  # -0.0 stays -0.0


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_sort_and_argsort_give_torchs_stable_order(dtype):
    x = _data(dtype, (3, 9, 4))
    cases = [(dim, descending) for dim in (1, -1) for descending in (False, True)]
    fn = stax.compile(lambda t: tuple(r for dim, down in cases for r in (*t.sort(dim, down), t.argsort(dim, down))), x)
    got = fn(x)
    for k, (dim, descending) in enumerate(cases):
        values, indices = _expected(x, dim, descending)
        _assert_same(got[3 * k:3 * k + 3], (values, indices, indices))


#: (k, dim) of a (5, 12) input: selected one by one (1 of 5, 3 of 12: at most a quarter of the row),
#: counted (5 and 12 of 12), and none
TOPK = [(3, 1), (1, 0), (5, 1), (12, 1), (0, 1)]


def _topk_outputs(t, largest: bool) -> tuple:
    return tuple(r for k, dim in TOPK for r in t.topk(k, dim, largest))


def _topk_expected(x: np.ndarray, largest: bool) -> list:
    return [r for k, dim in TOPK for r in _expected(x, dim, largest, k)]


def _topk_input(dtype: str) -> np.ndarray:
    x = _data(dtype, (5, 12))
    x[3] = np.nan if dtype == "float32" else 2  # a row of NaN (or of ties) only
    return x


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_topk_gives_the_k_first_in_order_selected_or_counted(largest, dtype):
    x = _topk_input(dtype)
    _assert_same(stax.compile(lambda t: _topk_outputs(t, largest), x)(x), _topk_expected(x, largest))


@pytest.mark.parametrize("fusion", ["none", "cpsat"])
def test_topk_under_other_fusions(fusion):
    x = _topk_input("float32")
    _assert_same(stax.compile(lambda t: _topk_outputs(t, True), x, fusion=fusion)(x), _topk_expected(x, True))


def test_0_d_and_empty_inputs_and_bad_arguments():
    scalar = np.array(2.5, np.float32)
    for call in (lambda t: tuple(t.sort()), lambda t: tuple(t.topk(1)), lambda t: tuple(t.topk(0))):
        _assert_same(stax.compile(call, scalar)(scalar), (scalar, np.array(0)))
    empty = np.zeros((2, 0), np.float32)
    _assert_same(stax.compile(lambda t: tuple(t.topk(0)), empty)(empty), (empty, np.zeros((2, 0), np.int64)))
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ShapeError, match=r"k \(4\) is out of range for dim 1 of size 3"):
        stax.trace(lambda t: t.topk(4)[0], x)
    long = np.zeros(MAX_SORTED + 1, np.float32)
    with pytest.raises(UnsupportedError, match=f"up to rows of {MAX_SORTED}"):
        stax.trace(lambda t: t.sort()[0], long)
    assert stax.trace(lambda t: t.topk(MAX_SELECTED)[0], long).outputs  # selected one by one


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float64, st.sampled_from([1, 7, 33]),  # three lengths: three kernel builds
                  elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_sorted_values_are_the_input_at_its_indices_in_order(x):
    values, indices = stax.compile(lambda t: tuple(t.sort()), x)(x)
    assert sorted(indices.tolist()) == list(range(len(x)))  # a permutation
    np.testing.assert_array_equal(values, x[indices])
    numbers = values[~np.isnan(values)]  # (np.diff of equal infinities is NaN: compare neighbours)
    assert (numbers[:-1] <= numbers[1:]).all() and np.isnan(values[len(numbers):]).all()  # ordered, NaN last


def test_modules_that_sort_and_take_the_top_k_match_torch():
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_module, import_training_step

    class Router(torch.nn.Module):
        """A mixture of experts' top-2 gate, and a sorted-value head."""

        def __init__(self) -> None:
            super().__init__()
            self.gate, self.score = torch.nn.Linear(8, 6), torch.nn.Linear(8, 5)

        def forward(self, x):
            top, chosen = self.gate(x).softmax(-1).topk(2, -1)
            ranked = self.score(x).sort(-1, descending=True).values
            return top * chosen.float() + ranked[:, :2] + self.score(x).argsort(-1).float()[:, -2:]
    torch.manual_seed(2)
    router, x = Router(), torch.randn(7, 8)
    assert_matches_torch(import_module(router, x), rtol=1e-5, atol=1e-6)
    assert_matches_torch(import_training_step(router, lambda out: (out ** 2).mean(), [x]), rtol=1e-5, atol=1e-6)
