"""The kernel forms a layout chooses (vector, outer-vector, register tiles, strips, interleaved):
which form each program gets, and its results against the reference."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from stax.frontend.ops import nn
from stax.frontend.ops.conv_forms import ConvForm
from stax.codegen.tuning import Tuning
from stax.target import ISA_LEVELS

from tests.helpers import RUNNABLE_ISAS, holds_vectors, kernel_forms, run_check, sample

DEFAULT = Tuning()


def _transposed_form(isa: str, shape) -> str:
    """The form of a block reading a transposed operand of ``shape``'s last two extents."""
    return "scalar" if isa == "none" else "tiled-vector" if holds_vectors(isa, *shape[-2:]) else "tiled"


def test_kernel_forms(check):
    x, y = sample((40, 24), seed=51), sample((24, 40), seed=52)
    assert kernel_forms(check(lambda a: a * 2 + 1, x, isa="avx2")) == ["vector"]
    assert kernel_forms(check(lambda a: a.sum(-1), x, isa="avx2")) == ["vector"]
    assert kernel_forms(check(lambda a: a.sum(0), x, isa="avx2")) == ["outer-vector"]
    assert kernel_forms(check(lambda a, b: a + b.t(), x, y, isa="avx2")) == ["tiled-vector"]
    assert kernel_forms(check(lambda a, m: a * m.t(), x, sample((24, 40), "bool", seed=53), isa="avx2")) == ["tiled"]
    assert kernel_forms(check(lambda a: a * 2 + 1, x, isa="none")) == ["scalar"]
    assert kernel_forms(check(lambda a: a.sum(0), x, isa="none")) == ["scalar"]


def test_a_row_and_a_column_reduction_of_one_tensor_keep_apart(check):
    """A layer norm's backward sums each row of a tensor and its weight gradient each column: in
    one loop nest one of them reads along the vector loop with a stride, and the block ran scalar.
    The fusion problem forbids the pair (``read_orders_differ``), and both run vectorized.  Rows
    shorter than 16 vectorize across outputs instead, and there the pair may still fuse."""
    def rows_and_columns(a):
        return a.sum(-1), (a * 2).sum(0)

    def reasons(compiled):
        return {p.reason.split(":")[0] for p in compiled.fusion_problem.forbidden}
    wide = check(rows_and_columns, sample((256, 256), seed=57), rtol=1e-4, atol=1e-3, isa="avx2")
    assert "read_orders_differ" in reasons(wide) and "scalar" not in kernel_forms(wide), kernel_forms(wide)
    narrow = check(rows_and_columns, sample((256, 8), seed=58), rtol=1e-4, atol=1e-4, isa="avx2")
    assert "read_orders_differ" not in reasons(narrow)


def test_a_column_reduction_and_a_pointwise_node_over_its_rows_keep_apart(check):
    """A column sum and a pointwise node of the same tensor (a layer norm's weight gradient and
    its input gradient): in the reduction's loop nest the pointwise node walks the rows along the
    inner loop and the sum walks the columns, and their block ran scalar.  The pair is forbidden
    (``read_orders_differ``) and both run vectorized."""
    compiled = check(lambda a: (a.sum(0), a * 3), sample((256, 256), seed=59), rtol=1e-4, atol=1e-3, isa="avx2")
    assert any(p.reason.startswith("read_orders_differ") for p in compiled.fusion_problem.forbidden)
    assert "scalar" not in kernel_forms(compiled), kernel_forms(compiled)


def test_vectors_read_the_heads_of_attention_through_their_divisions(isa, check):
    """Attention's heads put back into rows: the output's last variable ``v`` reads its head as
    ``v // 64`` and its element as ``v % 64``.  A vector of W lanes that starts at a multiple of
    W never crosses a head, so it loads W consecutive elements (``indexing.lane_step``); before,
    such a block ran in scalar tiles.  Concatenated heads (a QKV gradient) add a guard on
    ``v // 256``, the same for every lane, or on ``v`` itself, tested lane by lane."""
    q, k = sample((4, 32, 64), seed=61), sample((2, 32, 64), seed=62)
    vector = ["scalar"] if isa == "none" else ["vector"]
    heads = check(lambda q: q.permute(1, 0, 2).reshape(32, 256) * 2, q)
    assert kernel_forms(heads) == vector
    assert bool(re.search(r"stax::vload\(in_ptr0 \+ [^;]*% 64", heads.source)) == (isa != "none")
    both = check(lambda q, k: stax.frontend.ops.nn.cat([q.permute(1, 0, 2).reshape(32, 256),
                                           k.permute(1, 0, 2).reshape(32, 128)], 1), q, k)
    assert kernel_forms(both) == vector


def test_register_tiles_take_the_outer_variable_the_transposed_reads_walk(isa, check):
    """A permutation that also moves a dim shorter than a vector (a QKV gradient's ``(L, B, 3,
    E)`` from ``(3, B, E, L)``): the transposed read is contiguous along ``L``, two loops above
    the last one, and the dim before the last has 2 points.  The outer loops are reordered so
    that ``L`` comes before the last one, and W x W register tiles take them (was scalar tiles)."""
    k = sample((2, 4, 64, 48), seed=63)
    compiled = check(lambda k: k.permute(3, 1, 0, 2) * 2, k)
    assert kernel_forms(compiled) == [{"none": "scalar", "avx2": "tiled-vector", "avx512": "tiled-vector"}[isa]]


def test_a_residual_sum_of_a_transposed_tensor_is_stored_for_its_row_reductions(isa, check):
    """``y = x + t.t() * 2``, read by two row reductions (an MLP-Mixer's token mixing added back,
    then normalized): inlined, every reduction walked ``t`` across its rows and ran scalar.  It
    is stored once (``Lowering._reads_crossed_layouts``), in register tiles, not in the
    reductions' loop nest (``needs_tiles``), and the reductions read its rows as vectors."""
    def fn(x, t):
        y = x + t.transpose(-1, -2) * 2
        return y.sum(-1), y.amax(-1)
    compiled = check(fn, sample((64, 32), seed=68), sample((32, 64), seed=69), rtol=1e-5, atol=1e-5)
    assert any(p.reason.startswith("needs_tiles") for p in compiled.fusion_problem.forbidden)
    assert sorted(kernel_forms(compiled)) == (["scalar", "scalar"] if isa == "none" else ["tiled-vector", "vector"])


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_permutations_with_short_dims_match_numpy(data):
    """Random permutations of tensors mixing dims of 2 or 3 points with dims that hold vectors,
    times two, at every vector level this CPU runs: whatever loop order, tile or vector form
    the kernel takes (``Tiles.loop_order`` reorders the outer loops), numpy's result."""
    shape = tuple(data.draw(st.lists(st.sampled_from([2, 3, 16, 24]), min_size=3, max_size=4), label="shape"))
    order = tuple(data.draw(st.permutations(range(len(shape))), label="order"))
    x = sample(shape, seed=64)
    for isa in RUNNABLE_ISAS:
        run_check(lambda t: t.permute(order) * 2, x, isa=isa, threads=data.draw(st.sampled_from([1, 2]), label="threads"))


@pytest.mark.parametrize("stride, q, dtype", [(2, 21, "float32"), (3, 20, "float64"), (2, 8, "float32")])
def test_interleaved_form_runs_the_phases_of_a_strided_input_gradient(isa, check, stride, q, dtype):
    """A stride-s convolution's input gradient reads its last variable v as v // s and v % s:
    the interleaved form computes each phase v % s and interleaves the phases in registers
    (whole vectors of q = v // s, then scalar points of each phase; 8 q's are scalar points
    only at both widths, 21 and 20 leave a tail at both)."""
    def fn(g, w, x):
        gx = nn.conv2d_input_grad(g, w, x.shape, stride, 1, form=ConvForm.DIRECT)
        return gx.where(x > 0, 0.0) * 2
    x = sample((2, 3, 5, stride * q), dtype, seed=54)
    w = sample((4, 3, 3, 3), dtype, seed=55)
    g = sample((2, 4, (5 + 2 - 3) // stride + 1, (stride * q + 2 - 3) // stride + 1), dtype, seed=56)
    forms = kernel_forms(check(fn, g, w, x, rtol=1e-5, atol=1e-5))
    assert ("interleaved" in forms) == (isa != "none"), forms


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", [(2, 8, 8), (3, 19, 21), (1, 70, 133)])
def test_transposed_reads_in_register_tiles(isa, dtype, shape, check):
    """W x W tiles with the transposed operand transposed in registers, in blocks, and scalar
    nests for the rows and columns past the last whole tile (none when the sizes divide)."""
    x, y = sample(shape, dtype, seed=60), sample((shape[0], shape[2], shape[1]), dtype, seed=61)
    compiled = check(lambda a, b: a * 2 + b.transpose(1, 2) - b.transpose(1, 2) * a, x, y)
    assert kernel_forms(compiled) == [_transposed_form(isa, shape)]
    if holds_vectors(isa, *shape[1:]):
        source = compiled.block_kernels[0].source
        assert "stax::transpose(" in source
        tails = any(n % ISA_LEVELS[isa].width for n in shape[1:])  # rows or columns past the last whole tile
        assert bool(re.search(r"int64_t x\d = [1-9]", source)) == tails


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", [(2, 8, 8), (3, 19, 21), (1, 70, 133), (2, 150, 72)])
def test_transposed_reads_in_strips(isa, dtype, shape, check):
    """Over a large transposed input the register tiles run in strips of ``Tuning.strip_rows`` rows, the
    strip's transposed reads into the per-thread buffer first, then its rows streamed, with
    non-temporal stores and a fence; with tails, batches, several strips and both thread counts
    (here at small sizes: strips of 16 rows whatever the input's size and the strips' number,
    every output streamed)."""
    small = Tuning(stream_min_bytes=1, strip_rows=16, strips_per_thread=0)
    x, y = sample(shape, dtype, seed=62), sample((shape[0], shape[2], shape[1]), dtype, seed=63)
    for threads in (1, 2):
        compiled = check(lambda a, b: a * 2 + b.transpose(1, 2) - b.transpose(1, 2) * a, x, y, threads=threads,
                         tuning=small)
        assert kernel_forms(compiled) == [_transposed_form(isa, shape)]
        if holds_vectors(isa, *shape[1:]):
            source = compiled.block_kernels[0].source
            assert "stax::thread_scratch(" in source
            assert "stax::vstore_stream(out_ptr0" in source and source.rstrip().count("stax::store_fence();") == 1


def test_a_transposed_input_of_stream_size_runs_in_strips(isa):
    """At Tuning.stream_min_bytes (2048 x 2048 float32) the strips are the default, and agree with numpy;
    an input as large in too few strips for the threads (64 rows), or with rows too long for
    the strip buffers, keeps the blocks."""
    rng = np.random.default_rng(64)
    x, y = (rng.random((2048, 2048), dtype=np.float32) for _ in range(2))
    compiled = stax.compile(lambda a, b: a + b.t(), x, y, threads=2, isa=isa)
    np.testing.assert_array_equal(compiled(x, y), x + y.T)
    few_rows = [rng.random(shape, dtype=np.float32) for shape in ((64, 65536), (65536, 64))]
    few = stax.compile(lambda a, b: a + b.t(), *few_rows, threads=2, isa=isa)
    long_rows = [rng.random(shape, dtype=np.float32) for shape in ((512, 32768), (32768, 512))]
    long = stax.compile(lambda a, b: a + b.t(), *long_rows, threads=2, isa=isa)
    np.testing.assert_array_equal(few(*few_rows), few_rows[0] + few_rows[1].T)
    if isa != "none":
        source = compiled.block_kernels[0].source
        assert "stax::thread_scratch(" in source
        assert "stax::vstore_stream(out_ptr0" in source and "stax::store_fence();" in source
        assert "thread_scratch" not in few.block_kernels[0].source + long.block_kernels[0].source


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_register_tiles_start_on_the_transposed_operands_lines(isa, dtype):
    """A transposed operand whose rows are whole cache lines, long enough for Tuning.outer_head_min,
    starting at each element of a line in turn: the tiles start where its rows start a line,
    after scalar head rows (``stax::line_head``), and end in scalar tail rows and columns; every
    start agrees with numpy."""
    itemsize = np.dtype(dtype).itemsize
    per_line = 64 // itemsize
    rows, cols = DEFAULT.outer_head_min + 16, 21
    storage = np.empty(rows * cols + 2 * per_line, dtype)
    first = (-storage.ctypes.data % 64) // itemsize
    transposed = [storage[first + k:first + k + rows * cols].reshape(cols, rows) for k in range(per_line)]
    x = sample((rows, cols), dtype, seed=120)
    compiled = stax.compile(lambda a, b: a * 2 + b.t(), x, transposed[0], isa=isa)
    if isa != "none":
        assert kernel_forms(compiled) == ["tiled-vector"]
        assert "stax::line_head(" in compiled.block_kernels[0].source
    for k, y in enumerate(transposed):
        y[...] = sample((cols, rows), dtype, seed=121 + k)
        np.testing.assert_array_equal(compiled(x, y), x * 2 + y.T, err_msg=f"start {k} elements past a line")
