"""The narrow GEMM (stax.kernels.narrow_gemm) against numpy's product in float64: both its forms (a few
rows times a long matrix; a weight gradient, the long matrix read transposed), accumulating or
not, batched, on one and two threads, at each vector width this CPU runs, with row, column and
depth tails."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stax.kernels import blas
from stax.kernels import matmul
from stax.kernels import narrow_gemm
from stax.kernels.matmul import parallel_matmul
from stax.target import ISA_LEVELS, native_isa, runs_here

WIDTHS = [name for name in ("avx2", "avx512") if runs_here(ISA_LEVELS[name])]


def _run(a, b, out, threads, weight_gradient, accumulate, isa):
    start = out.copy()
    narrow_gemm.narrow_matmul(a, b, out, threads, (False, weight_gradient), accumulate, ISA_LEVELS[isa])
    want = a.astype(np.float64) @ (b.T if weight_gradient else b).astype(np.float64) + (start if accumulate else 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("isa", WIDTHS)
@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 64), k=st.integers(1, 700), n=st.integers(256, 1200), batch=st.sampled_from([(), (3,)]),
       threads=st.sampled_from([1, 2]), accumulate=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_a_few_rows_times_a_long_matrix(isa, m, k, n, batch, threads, accumulate, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal(batch + (k, n), dtype=np.float32)
    _run(a, b, rng.standard_normal(batch + (m, n), dtype=np.float32), threads, False, accumulate, isa)


@pytest.mark.parametrize("isa", WIDTHS)
@settings(max_examples=20, deadline=None)
@given(vectors=st.integers(1, 4), k=st.one_of(st.integers(1, 48), st.integers(49, 400)),  # both of the kernel's forms
       n=st.integers(1, 3000), threads=st.sampled_from([1, 2]),
       accumulate=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_a_weight_gradient_reads_the_columns_transposed(isa, vectors, k, n, threads, accumulate, seed):
    rng = np.random.default_rng(seed)
    m = vectors * ISA_LEVELS[isa].width
    a = rng.standard_normal((m, n), dtype=np.float32)
    columns = rng.standard_normal((k, n), dtype=np.float32)
    _run(a, columns, rng.standard_normal((m, k), dtype=np.float32), threads, True, accumulate, isa)


def test_the_extern_takes_the_shapes_of_a_convolution_and_leaves_the_rest_to_the_blas():
    """A 3x3 convolution's GEMMs at 32 channels over 8 x 16 x 16 outputs go to the narrow kernel
    (forward and weight gradient) on a CPU with 16 float lanes; a square product, a float64 one, a
    transposed left operand and a classifier's product by its weight read transposed (a reduction
    shorter than the output's rows) do not; each result matches numpy's."""
    rng = np.random.default_rng(7)
    weight, columns = rng.standard_normal((32, 288), dtype=np.float32), rng.standard_normal((288, 2048), dtype=np.float32)
    grad = rng.standard_normal((32, 2048), dtype=np.float32)
    square = rng.standard_normal((512, 512), dtype=np.float32)
    features, classes = rng.standard_normal((32, 256), dtype=np.float32), rng.standard_normal((4000, 256), dtype=np.float32)
    cases = [(weight, columns, (False, False), True), (grad, columns, (False, True), True),
             (square, square, (False, False), False), (weight.astype(np.float64), columns.astype(np.float64),
                                                       (False, False), False),
             (columns, columns, (True, False), False), (features, classes, (False, True), False)]
    for a, b, transposed, narrow in cases:
        left, right = (x.T if t else x for x, t in zip((a, b), transposed))
        out = np.empty((left.shape[0], right.shape[1]), a.dtype)
        isa = native_isa()
        wide = isa.width >= narrow_gemm.MIN_LANES  # the kernel is taken at 16 lanes and more
        assert narrow_gemm.applies(a, b, out, transposed, isa) == (narrow and wide), (a.shape, b.shape, transposed)
        parallel_matmul(a, b, out, 2, transposed, isa=isa)
        np.testing.assert_allclose(out, left.astype(np.float64) @ right, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("provider", ["mkl", "openblas"])
def test_with_mkl_one_matrix_times_one_matrix_goes_to_the_library(monkeypatch, provider):
    """MKL multiplies a few rows by one matrix without packing it, so with MKL such a product takes
    the team gemm; a batch (a weight times each image) and a weight gradient keep the narrow
    kernel, and with OpenBLAS (which packs) all three take it."""
    isa = native_isa()
    if isa.width < narrow_gemm.MIN_LANES:
        pytest.skip(f"the narrow kernel needs vectors of {narrow_gemm.MIN_LANES} floats, which this CPU lacks")
    if matmul._team_gemm("float32", isa) is None:  # loaded before the provider is stubbed below
        pytest.skip("no CBLAS gemm is loaded")
    monkeypatch.setattr(matmul.blas, "gemm", lambda dtype: blas.Gemm(provider, 0, "i32"))
    matmul.plan_product.cache_clear()
    try:
        flat = matmul.plan_product((32, 256), (256, 1024), (32, 1024), "float32", True, 1, isa)
        batch = matmul.plan_product((32, 288), (2, 288, 1024), (2, 32, 1024), "float32", True, 1, isa)
        gradient = matmul.plan_product((32, 2048), (288, 2048), (32, 288), "float32", True, 1, isa, (False, True))
        assert flat.route is (matmul.Route.TEAM if provider == "mkl" else matmul.Route.NARROW)
        assert batch.route is matmul.Route.NARROW and gradient.route is matmul.Route.NARROW_GRADIENT
    finally:
        matmul.plan_product.cache_clear()
