"""Errors at call time: integer division by zero raises ``KernelError`` and the function recovers;
inputs that do not match the compiled ones and in-place updates of read-only arrays raise."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.errors import CallError, KernelError

from tests.helpers import nonzero, sample


def test_integer_division_by_zero_raises_and_recovers(isa):
    f = stax.compile(lambda a, b: (a // b, a % b, (a // b).sum(0)), sample((4, 21), "int32", seed=45),
                     sample((4, 21), "int32", seed=46), isa=isa)
    a, b = sample((4, 21), "int32", -9, 9, seed=47), nonzero((4, 21), "int32", seed=48)
    bad = b.copy()
    bad[3, 20] = 0  # in the tail
    with pytest.raises(KernelError, match="division by zero"):
        f(a, bad)
    q, r, _ = f(a, b)  # the error flag was cleared
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    bad[3, 20], bad[0, 1] = 1, 0  # in a vector body
    with pytest.raises(KernelError):
        f(a, bad)


def test_call_mismatches_raise_call_error():
    x = sample((6, 8), seed=49)
    f = stax.compile(lambda a, b: a + b, x, x)
    with pytest.raises(CallError, match=r"argument b has strides \(1, 6\)"):
        f(x, np.asfortranarray(x))
    with pytest.raises(CallError, match="argument b has shape"):
        f(x, x[:, :4])
    with pytest.raises(CallError, match="argument a has dtype float64"):
        f(x.astype("float64"), x)
    with pytest.raises(CallError, match="argument b must be a numpy array"):
        f(x, [1.0])
    with pytest.raises(CallError, match=r"2 arrays \(a, b\)"):
        f(x)
    np.testing.assert_allclose(f(x, x), x + x)  # still usable


def test_inplace_on_read_only_array_raises():
    x = sample((3, 4), seed=50)
    f = stax.compile(lambda a: a.add_(1), x)
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(CallError, match="argument a is updated in place but is read-only"):
        f(ro)
