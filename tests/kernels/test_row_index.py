"""Rows of a table by address (stax.kernels.row_index): the take_rows and add_rows kernels against numpy
at every ISA level, and the lookups and gradients that use them (index_select along the first dim
of a table of 16 rows or more, ``x[i]``, an embedding and its gradient) against the reference of
the traced program and, where torch is installed, against torch."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.frontend.ops import gather
from stax.errors import KernelError, ShapeError
from stax.kernels.row_index import add_rows, take_rows
from stax.target import ISA_LEVELS, runs_here

LEVELS = [name for name in ("none", "avx2", "avx512") if runs_here(ISA_LEVELS[name])]
RNG = np.random.default_rng(41)


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("threads", [1, 2])
def test_take_rows_copies_each_indexed_row_and_zeros_for_an_index_out_of_range(isa, dtype, threads):
    table = (RNG.standard_normal((37, 5)) * 10).astype(dtype)
    index = np.array([3, 36, 0, 3, -1, 37, 12, 12, 5], np.int64)
    out = np.full((9, 5), 7, dtype)
    take_rows(table, index, out=out, threads=threads, isa=ISA_LEVELS[isa])
    valid = (index >= 0) & (index < 37)
    np.testing.assert_array_equal(out[valid], table[index[valid]])
    assert not out[~valid].any()


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_add_rows_sums_the_rows_of_each_index_in_order(isa, dtype, threads):
    values = RNG.standard_normal((50, 19)).astype(dtype)
    index = RNG.integers(-2, 33, 50)
    out = np.full((31, 19), 7, dtype)
    add_rows(values, index, rows=31, out=out, threads=threads, isa=ISA_LEVELS[isa])
    want = np.zeros((31, 19), dtype)
    for i, r in enumerate(index):  # in index order: the sums are the same float for float
        if 0 <= r < 31:
            want[r] += values[i]
    np.testing.assert_array_equal(out, want)


def test_empty_indices_and_bad_operands():
    out = np.full((4, 3), 7.0, np.float32)
    add_rows(np.zeros((0, 3), np.float32), np.zeros(0, np.int64), rows=4, out=out, threads=2)
    assert not out.any()
    take_rows(np.ones((4, 3), np.float32), np.zeros(0, np.int64), out=np.zeros((0, 3), np.float32), threads=1)
    with pytest.raises(ShapeError, match="int64 index"):
        take_rows(np.ones((4, 3), np.float32), np.zeros(2, np.int32), out=np.zeros((2, 3), np.float32), threads=1)
    with pytest.raises(ShapeError, match="float32 or float64 values"):
        add_rows(np.ones((2, 3), np.int64), np.zeros(2, np.int64), rows=4, out=np.zeros((4, 3), np.int64), threads=1)
    with pytest.raises(ShapeError, match="output has shape"):
        take_rows(np.ones((4, 3), np.float32), np.zeros(2, np.int64), out=np.zeros((3, 3), np.float32), threads=1)


TABLE = RNG.standard_normal((40, 3, 4), dtype=np.float32)
INDEX = np.array([0, 39, 7, 7, 21, 3], np.int64)


@pytest.mark.parametrize("fusion", ["greedy", "none", "cpsat"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_large_tables_lookup_and_gradient_go_by_address(check, fusion, threads):
    def program(table, index):
        rows = gather.index_select(table, 0, index)
        return rows.tanh(), gather.add_rows(table * 0.5, index, rows.exp())
    compiled = check(program, TABLE, INDEX, rtol=1e-5, atol=1e-6, fusion=fusion, threads=threads)
    ops = {k.extern["op"] for k in compiled.kernels if k.extern}
    assert ops == {"take_rows", "add_rows"}
    assert compiled.source.count("stax::row_index(") == 2  # the compiled call calls both


ROWS = gather.ROWS_BY_ADDRESS - 1


def test_a_small_table_keeps_the_comparisons_that_fuse():
    small = TABLE[:ROWS]
    compiled = stax.compile(lambda t, i: gather.index_select(t, 0, i) * 2, small, INDEX % ROWS)
    assert not any(k.extern for k in compiled.kernels)
    np.testing.assert_array_equal(compiled(small, INDEX % ROWS), small[INDEX % ROWS] * 2)


@pytest.mark.parametrize("bad", [40, -1])
def test_an_index_out_of_range_raises_as_torch_does(bad):
    compiled = stax.compile(lambda t, i: gather.index_select(t, 0, i), TABLE, INDEX)
    index = INDEX.copy()
    index[2] = bad
    with pytest.raises(KernelError, match="index out of range"):
        compiled(TABLE, index)


def test_embedding_and_its_gradient_agree_with_torch():
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_training_step
    torch.manual_seed(2)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pad = torch.nn.Embedding(1000, 16), torch.nn.Embedding(50, 8, padding_idx=0)

        def forward(self, ids):
            return self.emb(ids).sum(-1) + self.pad(ids % 50).mean(-1) + self.emb.weight[ids[:, 0] - 1000].sum()
    ids = torch.randint(0, 1000, (8, 12))
    ids[0, :3] = 0  # the padding row, whose gradient is zero
    program = import_training_step(Net(), lambda o, t: ((o - t) ** 2).mean(), [ids], [torch.randn(8, 12)])
    compiled = program.compile()
    assert {"take_rows", "add_rows"} <= {k.extern["op"] for k in compiled.kernels if k.extern}
    for have, want in zip(compiled(*program.arguments()), program.expected):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("zero, added", [(0.0, False), (-0.0, True)])
def test_the_gradient_of_a_zero_table_is_the_sums_themselves(zero, added):
    """A +0.0 table (an embedding's gradient) takes the sums as they are, whose rows start at +0.0:
    no pass adds it, and every sign of zero is the add's; a -0.0 table keeps the add (where nothing
    is added it becomes +0.0, as stax.frontend.ops.gather's scatter_add documents)."""
    from stax.frontend.tracing import trace
    values = RNG.standard_normal((6, 12), dtype=np.float32)

    def program(v, i):
        return gather.add_rows(v._tracer.constant(zero, "float32", (40, 3, 4)), i, v.reshape(6, 3, 4))
    graph = trace(program, values, INDEX)
    ops = [graph.nodes[n].op for n in graph.nodes if graph.nodes[n].op in ("add", "add_rows")]
    assert ops == (["add_rows", "add"] if added else ["add_rows"])
    values[0] = -0.0
    got = stax.compile(program, values, INDEX)(values, INDEX)
    want = np.full((40, 3, 4), zero, np.float32)
    np.add.at(want, INDEX, values.reshape(6, 3, 4))
    if not added:
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
