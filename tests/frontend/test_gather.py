"""gather, scatter, scatter_add, index_select and slice_scatter (``stax.frontend.ops.gather``): compiled (at ISA
levels avx2 and none where a test takes ``isa``) against the graph's numpy reference (``check``), and both against numpy
written here (take_along_axis, explicit loops), which shares nothing with the one-hot
composition; against torch where it is installed.  Out-of-range indices raise KernelError."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from tests.helpers import sample

import stax
from stax.errors import KernelError, ShapeError, UnsupportedError
from stax.reference import evaluate

DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def np_gather(x, dim, index):
    return np.take_along_axis(x[tuple(slice(0, n) if k != dim else slice(None) for k, n in enumerate(index.shape))],
                              index, dim)


def np_scatter(x, dim, index, src, add):
    out = x.copy()
    for pos in itertools.product(*map(range, index.shape)):
        target = list(pos)
        target[dim] = index[pos]
        value = src[pos] if isinstance(src, np.ndarray) else src
        out[tuple(target)] = (out[tuple(target)] | value if x.dtype == bool else out[tuple(target)] + value) \
            if add else value
    return out


def np_scatter_reduce(x, dim, index, src, reduce, include_self):
    """torch.scatter_reduce written as a loop over the index: each position's written values
    collected, then reduced (with ``x``'s own value if ``include_self``)."""
    written = {}
    for pos in itertools.product(*map(range, index.shape)):
        target = list(pos)
        target[dim] = index[pos]
        written.setdefault(tuple(target), []).append(src[pos])
    out = x.copy()
    for target, values in written.items():
        values = ([x[target]] if include_self else []) + values
        if reduce == "mean":
            total = np.sum(np.array(values, x.dtype), dtype=x.dtype)
            out[target] = total / len(values) if x.dtype.kind == "f" else total // len(values)
        else:
            out[target] = {"sum": np.any if x.dtype == bool else np.sum, "prod": np.all if x.dtype == bool else np.prod,
                           "amax": np.max, "amin": np.min}[reduce](np.array(values, x.dtype))
    return out


def outputs(fn, *arrays, **options):
    compiled = stax.compile(fn, *arrays, **options)
    got = compiled(*[a.copy() for a in arrays])
    return got if isinstance(got, tuple) else (got,), compiled


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_and_index_select(dtype, check):
    x = sample((4, 6, 5), dtype, seed=1)
    index = sample((3, 6, 4), "int64", 0, 4, seed=2)
    rows = sample((7,), "int32", 0, 3, seed=3)

    def fn(x, index, rows):
        return x.gather(2, index), x.gather(0, index[:, :2, :1].clamp(max=3)), x.index_select(0, rows), \
            x.index_select(-1, rows)
    got, _ = outputs(fn, x, index, rows)
    check(fn, x, index, rows)
    want = (np_gather(x, 2, index), np_gather(x, 0, np.minimum(index[:, :2, :1], 3)), x[rows], x[:, :, rows])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_externs_copy_inputs_of_other_strides(check):
    """An input laid out otherwise than row-major (flipped, a column slice, transposed) that an
    extern reads (rows by index, a product, a convolution) is copied into rows first: the extern
    took the flipped table's storage as rows, reading past it (fuzz seed 4406)."""
    base = sample((16, 6), seed=21)
    flipped, sliced, transposed = base[::-1], base[:, 1:5], sample((6, 16), seed=22).T
    rows = sample((9,), "int64", 0, 15, seed=23)
    weight = sample((6, 3), seed=24)
    image = sample((2, 3, 8, 8), seed=25)[:, :, ::-1]
    kernel = sample((4, 3, 3, 3), seed=26)

    def fn(f, s, t, rows, w, image, k):
        return (f.index_select(0, rows), s.index_select(0, rows), t.index_select(0, rows), f @ w, t @ w,
                stax.frontend.ops.nn.conv2d(image, k, padding=1))
    check(fn, flipped, sliced, transposed, rows, weight, image, kernel, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_and_scatter_add(dtype, check):
    x = sample((5, 7), dtype, seed=4)
    src = sample((5, 4), dtype, seed=5)
    index = sample((4, 3), "int64", 0, 6, seed=6)  # repeated positions: scatter keeps the last write

    def fn(x, index, src):
        return x.scatter(1, index, src), x.scatter_add(1, index, src), x.scatter(0, index.clamp(max=4), src), \
            x.scatter(1, index, value=1)
    got, _ = outputs(fn, x, index, src)
    check(fn, x, index, src)
    one = np.ones((), dtype)[()]
    want = (np_scatter(x, 1, index, src, False), np_scatter(x, 1, index, src, True),
            np_scatter(x, 0, np.minimum(index, 4), src, False), np_scatter(x, 1, index, one, False))
    for g, w in zip(got, want):  # scatter_add adds repeated positions' values in another order
        np.testing.assert_allclose(g, w, rtol=1e-6) if dtype.startswith("float") else np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_slice_scatter(isa, dtype, check):
    x = sample((6, 9), dtype, seed=7)

    def fn(x):
        return x.slice_scatter(x[:, 1:8:3], 1, 1, 8, 3), x.slice_scatter(x[2:4], 0, 2, 4), \
            x.slice_scatter(x[:, -2:], -1, -2)
    got, _ = outputs(fn, x, isa=isa)
    check(fn, x)
    for g, (dim, sl) in zip(got, [(1, slice(1, 8, 3)), (0, slice(2, 4)), (1, slice(-2, None))]):
        want = x.copy()
        index = (slice(None),) * dim + (sl,)
        want[index] = x[index]
        np.testing.assert_array_equal(g, want)


def test_zero_d_and_empty_inputs(check):
    x, i0 = np.array(2.5, np.float32), np.array(0, np.int64)
    empty = np.zeros((3, 0), np.int64)
    v = sample((3, 4), seed=8)

    def fn(x, i0, empty, v):
        return x.gather(0, i0), x.scatter(0, i0, 7.0), v.gather(1, empty), v.scatter_add(1, empty, v), \
            v.index_select(1, i0)
    got, _ = outputs(fn, x, i0, empty, v)
    check(fn, x, i0, empty, v)
    assert got[0] == 2.5 and got[1] == 7.0 and got[2].shape == (3, 0)
    np.testing.assert_array_equal(got[3], v)
    np.testing.assert_array_equal(got[4], v[:, :1])  # a 0-d index selects as a 1-d one, as torch


def test_negative_zero_and_nan_are_gathered_exactly():
    x = np.array([[-0.0, np.nan, np.inf, -1.0]], np.float32)
    index = np.array([[0, 1, 2, 3, 0]], np.int64)
    (got,), _ = outputs(lambda x, i: x.gather(1, i), x, index)
    np.testing.assert_array_equal(got, x[0, index[0]][None])
    assert np.signbit(got[0, 0])


@pytest.mark.parametrize("bad", [7, -1])
def test_out_of_range_index_raises(bad):
    x = sample((4, 7), seed=9)
    index = sample((4, 2), "int64", 0, 6, seed=10)
    functions = {"gather": lambda x, i: x.gather(1, i), "scatter": lambda x, i: x.scatter(1, i, 1.0),
                 "index_select": lambda x, i: x.index_select(1, i[:, 0])}
    for name, fn in functions.items():
        compiled = stax.compile(fn, x, index)
        wrong = index.copy()
        wrong[1, 0] = bad
        with pytest.raises(KernelError, match="index out of range"):
            compiled(x, wrong)
        with pytest.raises(KernelError, match="index out of range"):
            evaluate(compiled.graph, x, wrong)
        compiled(x, index)  # in range: no error


def test_bad_arguments_are_named():
    x = sample((3, 4))
    with pytest.raises(UnsupportedError, match="gather: the index must be a traced int64 tensor, got float32"):
        stax.trace(lambda x: x.gather(1, x), x)
    with pytest.raises(ShapeError, match="same number of dimensions"):
        stax.trace(lambda x, i: x.gather(1, i), x, np.zeros(3, np.int64))
    with pytest.raises(ShapeError, match="larger than input"):
        stax.trace(lambda x, i: x.gather(1, i), x, np.zeros((4, 1), np.int64))
    with pytest.raises(ShapeError, match="does not match the slice's shape"):
        stax.trace(lambda x: x.slice_scatter(x, 1, 0, 2), x)
    index = np.zeros((3, 4), np.int64)
    with pytest.raises(UnsupportedError, match="scatter_reduce: reduce='max' is not supported; use one of sum"):
        stax.trace(lambda x, i: x.scatter_reduce(1, i, x, "max"), x, index)
    with pytest.raises(UnsupportedError, match="scatter: reduce='sum' is not supported; use 'add' or 'multiply'"):
        stax.trace(lambda x, i: x.scatter(1, i, x, reduce="sum"), x, index)
    with pytest.raises(UnsupportedError, match="reduce='mean' of a bool tensor"):
        stax.trace(lambda x, i: x.scatter_reduce(1, i, x, "mean"), x > 0, index)


@pytest.mark.parametrize("fusion", ["greedy", "none", "cpsat", "mwc"])
def test_cross_entropy_fuses_under_every_strategy(isa, fusion, check):
    """log_softmax, its gather of the targets' columns and the gradient's scatter (a where): one
    program, every fusion strategy agrees with the reference."""
    logits = sample((8, 300), seed=11)
    targets = sample((8, 1), "int64", 0, 299, seed=12)

    def fn(logits, targets):
        logp = logits.log_softmax(-1)
        loss = -logp.gather(1, targets).mean()
        grad = (logp.exp() - logits.scatter(1, targets, 0.0).where(logits != logits, 1.0)) / 8
        return loss, grad
    params = {"time_limit": 2.0} if fusion in ("cpsat", "mwc") else {}
    (loss, _), _ = outputs(fn, logits, targets, fusion=fusion, fusion_params=params, isa=isa)
    check(fn, logits, targets, fusion=fusion, fusion_params=params)
    logp = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(8), targets[:, 0]].mean(), rtol=1e-5)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
def test_agrees_with_torch():
    torch = pytest.importorskip("torch")
    x = sample((5, 6), seed=13)
    index = sample((5, 3), "int64", 0, 5, seed=14)
    src = sample((5, 3), seed=15)

    def fn(x, index, src):
        return x.gather(1, index), x.scatter(1, index, src), x.scatter_add(0, index.clamp(max=4), src), \
            x.index_select(1, index[0]), x.slice_scatter(src[:, :2], 1, 1, 5, 2), \
            *(x.scatter_reduce(1, index, src, r, include_self=s) for r in stax.frontend.ops.gather.SCATTER_REDUCTIONS
              for s in (True, False)), x.scatter(0, index.clamp(max=4), src, reduce="multiply")
    got, _ = outputs(fn, x, index, src)
    want = fn(*map(torch.tensor, (x, index, src)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)
