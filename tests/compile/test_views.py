"""Views and layouts compiled end to end against the numpy reference evaluator: transposes, slices,
expands, permutes and reshapes, strided, flipped and broadcast inputs, tails of every size, dims of
size 0 and 1, outputs that alias inputs, and float division by zero."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.frontend.ops import nn
from stax.errors import ShapeError

from tests.helpers import sample


def test_views(isa, check):
    def fn(x, z):
        return (x.t() + 1, x.transpose(0, 1).reshape(-1), x.t().reshape(5, 12) * 2, x[::2, 1::3], x[1], x[..., -1],
                x.unsqueeze(0).expand(3, 6, 10) + z, z.permute(1, 0, 2) * 2, z.permute(2, 0, 1).reshape(10, 18),
                x.reshape(2, 3, 10).sum(1), x[:, None, :].expand(6, 4, 10).sum(-1), x.unsqueeze(-1).squeeze(-1) - 1,
                z[:, 1:5:2].sum(0), x.t()[2:9:3, ::2] * z[1, :3, 1:2])
    x, z = sample((6, 10), seed=25), sample((3, 6, 10), seed=26)
    check(fn, x, z)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strided_reads_in_vector_loops(isa, dtype, check):
    """Reads every 2nd, 3rd and 4th element (``stax::vload_strided``; every 5th stays scalar),
    in bodies and tails, in a row sum, and padded (a guarded strided read, tested lane by lane);
    the generated code uses the strided vector loads at vector ISA levels."""
    def fn(x, y):
        padded = nn.pad(y, (1, 1))
        return (x[:, :82:2] + x[:, 1::2], x[:, ::3] * 2, x[:, 1::4].sum(-1), x[:, ::5] - 1,
                padded[:, ::2][:, :20] + y[:, :20])
    x, y = sample((5, 83), dtype, seed=80), sample((5, 41), dtype, seed=81)
    compiled = check(fn, x, y)
    if isa != "none":
        source = compiled.kernel_source
        assert all(f"stax::vload_strided<{s}>" in source for s in (2, 3, 4)), source
        assert "vload_strided<5>" not in source and "vload_guarded<2>" in source, source


def test_non_contiguous_inputs(isa, check):
    """Inputs passed with their own strides: a transposed array and a strided slice."""
    def fn(a, b):
        return a * 2 + 1, a.sum(-1), a.sum(0), a + b, (a * b).amax(-1)
    base = sample((23, 9), seed=27)
    a = base.T
    b = sample((9, 46), seed=28)[:, ::2]
    compiled = check(fn, a, b)
    assert compiled.program.inputs[0].strides == (1, 9)
    assert compiled.program.inputs[1].strides == (46, 2)


def test_flipped_offset_and_broadcast_inputs(isa, check):
    """Negative strides, a slice that starts inside the buffer, and a stride-0 (broadcast) input."""
    def fn(f, o, b, y):
        return f * 2, f.sum(-1), f.sum(0), o + 1, o.reshape(-1) * 3, b + y, (b * y).sum(0)
    f = sample((5, 37), seed=60)[::-1, ::-1]
    o = sample((5, 40), seed=61)[1:, 3:]
    b = np.broadcast_to(sample((37,), seed=62), (4, 37))
    compiled = check(fn, f, o, b, sample((4, 37), seed=63))
    assert compiled.program.inputs[0].strides == (-37, -1)
    assert compiled.program.inputs[2].strides == (0, 1)


TAIL_SIZES = (1, 7, 17, 33, 127)


def test_tails(isa, check):
    """Sizes that are not multiples of the vector width (16 or 8): vector body plus a guarded last
    vector or (fewer than Tuning.vector_tail_min points) a scalar tail, in rows, columns and flat
    loops; one program per ISA level, one input per size."""
    def fn(*xs):
        return tuple(y for x in xs for y in (x * 2 + 1, x.exp(), x.sum(-1), x.sum(0), x.amax(-1),
                                             x / x.sum(-1, keepdim=True)))
    compiled = check(fn, *(sample((3, n), seed=n) for n in TAIL_SIZES))
    assert {i.shape[-1] for i in compiled.program.inputs} == set(TAIL_SIZES)


def test_size_zero_and_one_dims(isa, check):
    def fn(x, e, one, col):
        return (e + 1, e.sum(0), e.sum(1), e.prod(0), e.sum(), e.mean(0),
                one * 3, one.sum(), one.amax(0), col.sum(0), col + x[:1], x.sum(1, keepdim=True) + col)
    x, e = sample((9, 5), seed=29), sample((0, 5), seed=30)
    one, col = sample((1, 1), seed=31), sample((9, 1), seed=32)
    check(fn, x, e, one, col)


def test_amax_over_empty_dim_raises():
    with pytest.raises(ShapeError, match="size 0"):
        stax.compile(lambda e: e.amax(0), sample((0, 5)))


def _normalizations(x, w, z):
    col = x / x.sum(0)  # column sums: outer-vector, then a pointwise kernel
    centered = x - x.mean(-1, keepdim=True)
    layernorm = centered * ((centered ** 2).mean(-1, keepdim=True) + 1e-5).rsqrt() * w
    e = (x - x.amax(0)).exp()
    return (col, layernorm, e / e.sum(0), z - z.sum(1, keepdim=True), z.sum(1) + z.amax(1),
            z / z.sum((0, 2), keepdim=True), x.t() / x.t().sum(-1, keepdim=True), x.sum(-1).sum().amax(),
            x.sum() + x, sum(((x * i).sin() for i in range(30)), x))


@pytest.mark.parametrize("fusion", ["greedy", "none"])
def test_reductions_feeding_pointwise(isa, fusion, check):
    """Normalizations over rows, columns, middle and several dims, fused or not; a long inlined
    chain (materialized past ``max_inline_ops``)."""
    x, w, z = sample((37, 45), seed=64), sample((45,), seed=65), sample((5, 37, 9), seed=66)
    check(_normalizations, x, w, z, fusion=fusion, atol=1e-4)  # x.sum() cancels: float32 error ~1e-5


def test_outputs_that_alias_inputs_or_each_other(isa, check):
    """Returning an input, a view of it, an updated input, and one value twice gives fresh arrays."""
    def fn(x, y):
        y.add_(1)
        return x, x.t(), x[1:], y, x * 2, x * 2
    x = sample((4, 9), seed=67)
    outs = stax.compile(fn, x, x, isa=isa)(x, x.copy())
    assert not any(np.shares_memory(o, x) for o in outs)
    check(fn, x, sample((4, 9), seed=68))


def test_float_division_by_zero_and_pow_edge_cases(isa, check):
    """Float // and % by zero give inf/NaN as torch; x ** 0 is 1; 0 ** -1 is inf."""
    def fn(x, z, a):
        return x // z, x % z, x / z, x ** 0, a ** 0, x.abs() ** -0.5, (x * 0) ** -1, a.maximum(-2 ** 63)
    x, z = sample((3, 17), seed=69), np.zeros((3, 17), np.float32)
    check(fn, x, z, sample((3, 17), "int64", -9, 9, seed=70))
