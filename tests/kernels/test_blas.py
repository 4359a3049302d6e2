"""stax.kernels.blas: STAX_BLAS is checked and names its choices, asking for MKL where it is not installed
says how to install it, and each provider's gemm, called by the matmuls' team entry point,
computes numpy's float64 product (MKL's only where the optional package is installed: .ci/run
installs it for a second pass of these tests)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from stax.kernels import blas
from stax.environment import blas_from_env
from stax.errors import StaxError
from stax.kernels.libraries import library
from stax.kernels.matmul import parallel_matmul
from stax.target import native_isa


def test_an_unknown_provider_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("STAX_BLAS", "atlas")
    with pytest.raises(StaxError, match="STAX_BLAS='atlas' is not a BLAS stax can call; use one of auto, mkl, openblas"):
        blas_from_env()
    monkeypatch.setenv("STAX_BLAS", " MKL ")
    assert blas_from_env() == "mkl"


def test_asking_for_mkl_without_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("STAX_BLAS", "mkl")
    monkeypatch.setattr(blas, "_mkl", lambda: None)
    blas.gemm.cache_clear()
    try:
        with pytest.raises(StaxError, match=r"pip install 'stax\[mkl\]'"):
            blas.gemm("float32")
        monkeypatch.setenv("STAX_BLAS", "auto")  # auto falls back to numpy's OpenBLAS
        found = blas.gemm("float32")
        assert found is None or found.provider == "openblas"
    finally:
        blas.gemm.cache_clear()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_each_providers_gemm_computes_numpys_product(dtype):
    letter = "s" if dtype == "float32" else "d"
    gemms = [g for g in (blas.openblas_gemm(letter), blas.mkl_gemm(letter)) if g is not None]
    if not gemms:
        pytest.skip("no CBLAS gemm is loaded (numpy's BLAS has none that threadpoolctl finds, MKL is not installed)")
    team = library("team_gemm", native_isa())
    rng = np.random.default_rng(5)
    real = ctypes.c_float if dtype == "float32" else ctypes.c_double
    for gemm in gemms:
        entry = getattr(team, f"stax_gemm_{'f32' if dtype == 'float32' else 'f64'}_{gemm.integer_width}")
        entry.restype = None
        for (m, k, n), (ta, tb), threads in [((37, 53, 29), (False, False), 1), ((64, 17, 130), (True, False), 2),
                                              ((5, 300, 8), (False, True), 2), ((128, 64, 3), (True, True), 1)]:
            a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
            stored_a, stored_b = (np.ascontiguousarray(a.T) if ta else a), (np.ascontiguousarray(b.T) if tb else b)
            out = np.full((m, n), np.nan, dtype)
            entry(ctypes.c_void_p(gemm.address), ctypes.c_void_p(stored_a.ctypes.data),
                  ctypes.c_void_p(stored_b.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_int64(1),
                  ctypes.c_int64(m), ctypes.c_int64(n), ctypes.c_int64(k), ctypes.c_int64(0), ctypes.c_int64(0),
                  ctypes.c_int(ta), ctypes.c_int(tb), ctypes.c_int(threads), real(0.0))
            np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{gemm.provider} {m}x{k}x{n} {ta, tb}")


@pytest.mark.parametrize("shapes", [((1, 0), (0, 1)), ((3, 0), (0, 4)), ((0, 5), (5, 2)), ((2, 3, 0), (2, 0, 6))])
def test_products_with_nothing_to_multiply_give_numpys_zeros(shapes):
    """A product over an empty inner dimension is zeros and an empty product has no elements,
    on whichever BLAS is installed: MKL refuses a leading dimension of 0 (it printed an error
    and left the output as it was, which the fuzzer found), so no gemm is called for them."""
    a, b = (np.ones(s, np.float32) for s in shapes)
    out = np.full(np.matmul(a, b).shape, np.nan, np.float32)
    parallel_matmul(a, b, out, threads=1)
    np.testing.assert_array_equal(out, np.matmul(a, b))
