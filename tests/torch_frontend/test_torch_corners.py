"""torch's semantics in the corners: each case is compiled and compared with the numpy reference
evaluator and, where torch is installed, with eager torch (skipped cleanly without it).

A case is a function of a library (``STAX`` or ``TORCH``: the functions that are not tensor
methods) and the inputs, so that the same text runs on both."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import stax
import stax.frontend.ops.nn
from tests.helpers import run_check

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

STAX = SimpleNamespace(pad=stax.frontend.ops.nn.pad, normalize=stax.frontend.ops.nn.normalize, var_mean=stax.var_mean,
                       std_mean=stax.std_mean, vector_norm=stax.vector_norm, cdist=stax.frontend.ops.nn.cdist)
TORCH = None if torch is None else SimpleNamespace(
    pad=F.pad, normalize=F.normalize, var_mean=torch.var_mean, std_mean=torch.std_mean,
    vector_norm=torch.linalg.vector_norm, cdist=torch.cdist)

RNG = np.random.default_rng(28)


def normal(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def integers(*shape: int, low: int = -9, high: int = 9, dtype: str = "int32") -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def with_nans(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[::7] = np.nan
    return x


def with_ties(x: np.ndarray) -> np.ndarray:
    return np.round(x * 2) / 2  # few distinct values: many rows have a tied extreme


def outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def compare(case, *arrays: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6, **options) -> None:
    compiled = run_check(lambda *t: case(STAX, *t), *arrays, rtol=rtol, atol=atol, **options)
    if torch is None:
        return
    got = outputs(compiled(*[a.copy() for a in arrays]))
    want = outputs(case(TORCH, *[torch.from_numpy(a.copy()) for a in arrays]))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"output {i} vs torch")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i} vs torch")


CASES = {
    "squeeze(()) squeezes no dim": (lambda T, x: (x.squeeze(()), x.squeeze(), x.squeeze((0, 2))), [normal(1, 3, 1)]),
    "flip(dims=)": (lambda T, x: (x.flip(dims=(0, 2)), x.flip(dims=[1]), x.flip(-1)), [normal(2, 3, 4)]),
    "softmax(dim, dtype=)": (lambda T, x: (x.softmax(1, dtype=torch.float64 if T is TORCH else "float64"),
                                           x.log_softmax(-1, dtype=torch.float64 if T is TORCH else "float64")),
                             [normal(4, 9)]),
    "max(dim) and min(dim) with ties and NaN": (
        lambda T, x: (*x.max(1), *x.min(0, keepdim=True), *x.max(-1, keepdim=True)), [with_nans(with_ties(normal(6, 11)))]),
    "argmax and argmin": (lambda T, x: (x.argmax(1), x.argmin(0), x.argmax(), x.argmin(keepdim=True),
                                        x.argmax(dim=-1, keepdim=True)), [with_nans(with_ties(normal(5, 13)))]),
    "argmax of integers and bool, max(dim) of a 0-d tensor": (
        lambda T, i, z: (i.argmax(0), (i > 0).max(1).indices, i.max(1).values, z.argmax(), z.max(0).indices),
        [integers(7, 5, low=-2, high=2), np.array(1.5, np.float32)]),
    "var(unbiased=), var(correction=), std": (
        lambda T, x: (x.var(1, unbiased=False), x.var(0, correction=3), x.std(), x.std(1, keepdim=True),
                      x.std(0, unbiased=False)), [normal(6, 7)]),
    "var_mean and std_mean": (lambda T, x: (*T.var_mean(x, 1), *T.std_mean(x, (0, 1), keepdim=True)), [normal(6, 7)]),
    "logsumexp with infinities": (lambda T, x: (x.logsumexp(1), x.logsumexp((0, 1), keepdim=True)),
                                  [np.array([[1, 2, 3], [-np.inf] * 3, [np.inf, 0, 1], [np.nan, 0, 1]], np.float32)]),
    "logsumexp of integers": (lambda T, i: i.logsumexp(0), [integers(4, 3)]),
    "var, mean, any, all, logsumexp over an empty dim": (
        lambda T, x: (x.var(0), x.mean(0), x.any(), (x > 0).all(0), (x > 0).any(1), x.logsumexp(0)),
        [np.zeros((0, 3), np.float32)]),
    "masked_fill with a mask wider than the tensor": (
        lambda T, x, m: (x.masked_fill(m, -1.0), x.masked_fill(m[0], 2.0)),
        [normal(3, 4), RNG.random((2, 3, 1)) > 0.5]),
    "integer pow": (lambda T, i, e: (i ** e, i ** 3, 3 ** e, i.pow(2)), [integers(4, 5), integers(4, 5, low=-3, high=6)]),
    "div(rounding_mode=) on integers and floats": (
        lambda T, i, j, x, y: (i.div(j, rounding_mode="trunc"), i.div(j, rounding_mode="floor"),
                               x.div(y, rounding_mode="trunc"), x.div(y, rounding_mode="floor"), i.div(-4, rounding_mode="trunc")),
        [integers(6, 5), integers(6, 5, low=1, high=7) * np.where(RNG.random((6, 5)) > 0.5, 1, -1).astype(np.int32),
         normal(6, 5) * 10, normal(6, 5)]),
    "& | ^ ~ on integers and bool": (
        lambda T, i, j, a, b: (i & j, i | j, i ^ j, ~i, i & 6, 5 | j, a ^ b, a & b, ~a, i.bitwise_xor(j)),
        [integers(4, 6, low=-50, high=50), integers(4, 6, low=-50, high=50, dtype="int64"),
         RNG.random((4, 6)) > 0.5, RNG.random((4, 6)) > 0.5]),
    "cumsum and unfold of 0-d tensors": (
        lambda T, x, i: (x.cumsum(0), i.cumsum(-1), x.unfold(0, 1, 1), x.unfold(0, 1, 2)),
        [np.array(2.5, np.float32), np.array(7, np.int32)]),
    "pad modes reflect, replicate and circular": (
        lambda T, x, y: (T.pad(x, (2, 1), mode="reflect"), T.pad(x, (1, 2, 0, 1), mode="replicate"),
                         T.pad(x, (3, 0, 1, 2), mode="circular"), T.pad(y, (1, 1, 2, 2), mode="reflect"),
                         T.pad(y, (0, 3, 1, 0), mode="replicate")),
        [normal(2, 3, 5), normal(1, 2, 4, 5)]),
    "norms": (lambda T, x: (x.norm(dim=1), x.norm(p=1, dim=0), x.norm(p=float("inf"), dim=1, keepdim=True),
                            x.norm(p=float("-inf")), x.norm(p=3, dim=1), x.norm(p=0.5, dim=0), x.norm(p=0), x.norm(),
                            T.vector_norm(x, 2, (0, 1)), T.normalize(x, dim=1), T.normalize(x, p=1, dim=0)),
              [normal(5, 6)]),
    "cdist at every p": (lambda T, a, b: tuple(T.cdist(a, b, p) for p in (0.0, 0.5, 1.0, 2.0, 3.0, float("inf"))),
                         [normal(2, 5, 4), normal(2, 3, 4)]),
    "integer matmul": (lambda T, a, b, v: (a @ b, v @ b, a @ a.t(), (a.reshape(2, 2, 3) @ b)),
                       [integers(4, 3), integers(3, 5), integers(3)]),
    "int64 matmul wraps": (lambda T, a, b: a @ b, [integers(2, 3, low=-2**40, high=2**40, dtype="int64"),
                                                   integers(3, 2, low=-2**40, high=2**40, dtype="int64")]),
}


@pytest.mark.filterwarnings("ignore:var...? degrees of freedom:UserWarning")  # torch's, over an empty dim
@pytest.mark.parametrize("name", sorted(CASES))
def test_corner_matches_numpy_and_torch(name):
    case, arrays = CASES[name]
    compare(case, *arrays)


def test_argmax_reductions_fuse_into_one_kernel():
    x = normal(64, 128)
    compiled = stax.compile(lambda t: t.argmax(1), x)
    assert len([k for k in compiled.kernels if not k.extern]) <= 2  # the positions' running count, and the rows
    reductions = [b for b in compiled.program.buffers if getattr(b, "reduction", None)]
    assert [b.reduction for b in reductions] == ["amax", "amin"]


def test_corner_errors_name_the_problem():
    x = np.ones((3, 0), np.float32)
    with pytest.raises(stax.ShapeError, match="argmax: cannot reduce over dimension 1 of size 0"):
        stax.trace(lambda t: t.argmax(1), x)
    with pytest.raises(stax.UnsupportedError, match="negative integer powers"):
        stax.trace(lambda t: t ** -2, np.ones(3, np.int32))
    with pytest.raises(stax.UnsupportedError, match="pow of two bool operands"):
        stax.trace(lambda t: t ** t, np.ones(3, bool))
    with pytest.raises(stax.UnsupportedError, match="rounding_mode='round'"):
        stax.trace(lambda t: t.div(2, rounding_mode="round"), np.ones(3, np.float32))
    with pytest.raises(stax.UnsupportedError, match="flip: give the dims positionally or as dims="):
        stax.trace(lambda t: t.flip(0, dims=(0,)), np.ones(3, np.float32))
    with pytest.raises(stax.UnsupportedError, match="vector_norm: expected a float tensor"):
        stax.trace(lambda t: t.norm(), np.ones(3, np.int32))
    with pytest.raises(stax.UnsupportedError, match="mode 'reflect' takes no value"):
        stax.trace(lambda t: stax.frontend.ops.nn.pad(t, (1, 1), mode="reflect", value=1.0), np.ones((2, 3), np.float32))
    with pytest.raises(stax.UnsupportedError, match="argmin\\(\\) does not support bool"):
        stax.trace(lambda t: t.argmin(), np.ones(3, bool))
    with pytest.raises(stax.ShapeError, match="k \\+ 1 or k \\+ 2 dims"):
        stax.trace(lambda t: stax.frontend.ops.nn.pad(t, (1, 1), mode="replicate"), np.ones((2, 3, 4, 5), np.float32))
    with pytest.raises(stax.ShapeError, match="circular padding \\(4, 0\\) .* at most 3"):
        stax.trace(lambda t: stax.frontend.ops.nn.pad(t, (4, 0), mode="circular"), np.ones((2, 3), np.float32))


def test_integer_division_by_zero_in_trunc_mode_raises():
    a, b = np.array([1, 2], np.int32), np.array([1, 0], np.int32)
    with pytest.raises(stax.KernelError):
        stax.compile(lambda x, y: x.div(y, rounding_mode="trunc"), a, b)(a, b)
    lowest = np.array([np.iinfo(np.int64).min, 7], np.int64)
    got = stax.compile(lambda x: x.div(-1, rounding_mode="trunc"), lowest)(lowest)
    np.testing.assert_array_equal(got, [np.iinfo(np.int64).min, -7])  # wraps (torch's eager division traps)
