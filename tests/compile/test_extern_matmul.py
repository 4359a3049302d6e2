"""Matmuls as extern calls (BLAS) inside compiled programs: 2-D and batched, with producers and
consumers around them, and their operands read in place through views."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import stax
from stax.environment import isa_from_env

from tests.helpers import sample


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul(isa, dtype, check):
    """2-D and batched matmul (extern calls) with pointwise producers and consumers around them."""
    def fn(a, b, bias, batch, t):
        return ((a @ b + bias).relu(), batch @ b, (a * 2).matmul(t.t()), (batch.exp() @ b).sum(-1))
    a, b = sample((7, 5), dtype, seed=33), sample((5, 3), dtype, seed=34)
    bias, batch = sample((3,), dtype, seed=35), sample((4, 7, 5), dtype, seed=36)
    t = sample((3, 5), dtype, seed=37)
    check(fn, a, b, bias, batch, t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_on_the_openmp_team_equals_numpy(dtype, monkeypatch):
    """stax.kernels.matmul.parallel_matmul calls the BLAS gemm from every thread of an OpenMP loop (rows of
    one matrix, or of its columns when it is wider than tall, or the batch), also with operands
    stored transposed; shapes it does not cover (a broadcast batch, small products) are np.matmul's."""
    from stax.kernels import matmul

    rng = np.random.default_rng(40)
    cases = [((300, 70), (70, 90)), ((3, 50, 64), (64, 40)), ((5, 64, 33), (5, 33, 48)), ((1, 130, 64), (1, 64, 7)),
             ((2, 3, 40, 20), (2, 3, 20, 30)), ((4, 40, 20), (1, 20, 30)), ((6, 5), (5, 4)),
             ((30, 64), (64, 300)), ((1, 20, 64), (1, 64, 130))]
    for (shape_a, shape_b), transposed in itertools.product(cases, [(False, False), (True, False), (False, True),
                                                                     (True, True)]):
        a, b = rng.standard_normal(shape_a).astype(dtype), rng.standard_normal(shape_b).astype(dtype)
        stored = [np.ascontiguousarray(x.swapaxes(-1, -2)) if t else x for x, t in zip((a, b), transposed)]
        out = np.full(np.matmul(a, b).shape, np.nan, dtype)
        matmul.parallel_matmul(*stored, out=out, threads=2, transposed=transposed)
        np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{shape_a} @ {shape_b}, transposed {transposed}")
    if matmul._team_gemm(dtype, isa_from_env()) is None:  # the level parallel_matmul builds for
        pytest.skip("numpy's BLAS has no CBLAS gemm that threadpoolctl finds; np.matmul is used")
    monkeypatch.setattr(matmul.np, "matmul", None)  # the team path must not fall back
    for (m, n), transposed in itertools.product([(256, 80), (40, 300)], [(False, False), (True, True)]):
        a, b = rng.standard_normal((m, 96)).astype(dtype), rng.standard_normal((96, n)).astype(dtype)
        stored = [np.ascontiguousarray(x.T) if t else x for x, t in zip((a, b), transposed)]
        out = np.full((m, n), np.nan, dtype)
        matmul.parallel_matmul(*stored, out=out, threads=2, transposed=transposed)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4, err_msg=f"{m}x{n} {transposed}")


def test_a_transpose_that_several_products_take_on_the_right_is_stored_once(check):
    """``x_t @ w.t()`` at every step of a recurrence: BLAS runs a few rows times an operand stored
    transposed well below its rate (experiments.bench.gemm_layouts), so ``w.t()`` is stored once
    and every product reads it as it is; one product keeps reading ``w`` in place, transposed."""
    xs, w = sample((4, 8, 16), seed=41), sample((24, 16), seed=42)
    shared = check(lambda xs, w: sum((xs[t] @ w.t()).tanh() for t in range(4)), xs, w)
    assert shared.wrapper_source.count("parallel_matmul(") == 4
    assert "transposed=" not in shared.wrapper_source
    single = check(lambda xs, w: (xs[0] @ w.t()).tanh(), xs, w)
    assert single.wrapper_source.count("transposed=(False, True)") == 1


def test_extern_matmuls_run_blas_on_one_thread_and_restore_it():
    """Helper BLAS threads left spinning after a matmul would take the next kernel's cores: the
    wrapper runs with one BLAS thread, set once for the whole call whatever its externs, and the
    caller's setting comes back after the call, also when calls nest."""
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from stax.kernels.blas_threads import one_blas_thread

    def blas_threads() -> set[int]:  # a sequential MKL (stax.kernels.blas's, when installed) has no threads to set
        return {lib["num_threads"] for lib in ThreadpoolController().info()
                if lib["user_api"] == "blas" and lib.get("threading_layer") != "sequential"}

    a, b = sample((64, 32), seed=38), sample((32, 16), seed=39)
    compiled = stax.compile(lambda x, y: (x @ y).relu() @ y.t(), a, b)
    assert compiled.wrapper_source.count("parallel_matmul(") == 2
    assert compiled.wrapper_source.count("with one_blas_thread():") == 1
    with threadpool_limits(limits=2, user_api="blas"):
        if not blas_threads():
            pytest.skip("numpy has no BLAS library that threadpoolctl can see")
        with one_blas_thread():
            assert blas_threads() == {1}
            with one_blas_thread():
                assert blas_threads() == {1}
            assert blas_threads() == {1}
        assert blas_threads() == {2}
        np.testing.assert_allclose(compiled(a, b), np.maximum(a @ b, 0) @ b.T, rtol=1e-5, atol=1e-5)
        assert blas_threads() == {2}


def test_a_transposed_matmul_operand_is_read_in_place(check):
    """``x @ w.t()`` and ``g.t() @ x`` hand BLAS the stored matrices with a transpose flag: no
    kernel copies ``w.t()`` or ``g.t()``, and a column sum of ``g`` fused beside it stays a
    plain reduction."""
    def fn(x, w, g):
        return x @ w.t(), g.t() @ x, g.sum(0)
    x, w, g = sample((64, 48), seed=41), sample((32, 48), seed=42), sample((64, 40), seed=43)
    compiled = check(fn, x, w, g, rtol=1e-5, atol=1e-5)
    externs = [k.extern for k in compiled.block_kernels if k.extern]
    assert sorted(e["attrs"].get("transposed") for e in externs) == [(False, True), (True, False)], externs
    assert len(compiled.block_kernels) == 3, [k.nodes for k in compiled.block_kernels]


def test_a_reshaped_matmul_operand_is_stored_before_its_other_readers(check):
    """A weight gradient's operand ``x = f(a, b).permute(1, 0, 2).reshape(64, 64)``, whose
    bias gradient ``x.sum(0)`` reads it too: the permute is stored once, at its own shape (BLAS
    reads it reshaped in place), before the sum is lowered, so that the sum loads the stored
    rows instead of computing ``f`` again through the permute (``b``'s transposed read)."""
    def fn(a, b, w):
        x = (a * 2 + b.transpose(-1, -2)).permute(1, 0, 2).reshape(64, 64)
        return x.sum(0), x.t() @ w
    a, b, w = sample((2, 64, 32), seed=65), sample((2, 32, 64), seed=66), sample((64, 16), seed=67)
    compiled = check(fn, a, b, w, rtol=1e-5, atol=1e-5)
    program = stax.lowering.lower(compiled.graph)
    total = next(buf for buf in program.buffers if getattr(buf, "reduction", None) == "sum")
    (read,) = {ld.buffer for ld in stax.ir.loops.loads(total.body)}
    assert next(buf for buf in program.buffers if buf.name == read).shape == (64, 2, 32), total.body


def test_matmul_operands_read_through_two_views_and_computed_transposes(check):
    """A recurrent cell's pattern: ``h @ w.t()`` forward and ``g @ w.t().t()`` backward read ``w``
    in place (with and without the transpose flag; no kernel copies it), and ``(a * b).t() @ h``,
    the weight gradient of a computed gate, stores ``a * b`` in its own layout (a vector kernel
    fused with its sibling ``a - b`` and the bias gradient's column sum), which BLAS reads
    transposed, instead of a transposed store that only fuses as a scalar loop."""
    def fn(w, h, g, a, b):
        wt = w.t()
        return h @ wt, g @ wt.t(), (a * b).t() @ h, (a - b).t() @ h, (a * b).sum(0)
    w, h, g = sample((96, 64), seed=44), sample((32, 64), seed=45), sample((32, 96), seed=46)
    a, b = sample((32, 96), seed=47), sample((32, 96), seed=48)
    compiled = check(fn, w, h, g, a, b, rtol=1e-5, atol=1e-5)
    externs = [k.extern for k in compiled.block_kernels if k.extern]
    assert sorted(e["attrs"].get("transposed", (False, False)) for e in externs) == \
        [(False, False), (False, True), (True, False), (True, False)], externs
    assert all("arg0" not in k.params for k in compiled.kernels if not k.extern)  # w is never copied
    generated = [k for k in compiled.block_kernels if not k.extern]
    assert {k.form for k in generated} <= {"vector", "outer-vector"}, [(k.nodes, k.form) for k in generated]
