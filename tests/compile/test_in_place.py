"""In-place updates (``add_``, ``mul_``, ``copy_``) of inputs, visible to the caller after the call
as in the reference evaluator."""
from __future__ import annotations

from tests.helpers import sample


def test_inplace_updates_are_visible(isa, check):
    def fn(x, y, z, row):
        old = x * 1
        x.add_(y)
        y.mul_(2)
        z.copy_(x + old)
        x.add_(row)
        return old + x, y.sum(-1)
    x, y, z = (sample((5, 19), seed=s) for s in (38, 39, 40))
    row = sample((19,), seed=41)
    check(fn, x, y, z, row)


def test_inplace_update_of_transposed_input(isa, check):
    def fn(x, y):
        x.mul_(y)
        return x.sum(0)
    x = sample((12, 5), seed=42).T
    check(fn, x, sample((5, 12), seed=43))


def test_inplace_reads_transposed_old_value(check):
    """The new value of ``x`` reads the old one at other indices: no element may see a new value."""
    def fn(x):
        x.copy_((x * 1).t() + 1)
        x.add_(x.sum(0))
        return x * 1
    check(fn, sample((8, 8), seed=44))
