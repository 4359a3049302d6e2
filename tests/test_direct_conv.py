"""The blocked direct convolution (stax.direct_conv) against numpy in float64 (every window of the
padded input times the weight, summed), at every ISA level this CPU runs, on one and two threads,
with channel, width and row tails; an input that ends at a page the process may not read."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from stax.direct_conv import direct_conv2d
from stax.errors import ShapeError
from stax.runtime import ISA_LEVELS, runs_here

LEVELS = [name for name in ("none", "avx2", "avx512") if runs_here(ISA_LEVELS[name])]


def _reference(padded: np.ndarray, weight: np.ndarray) -> np.ndarray:
    windows = sliding_window_view(padded.astype(np.float64), weight.shape[2:], axis=(2, 3))
    return np.einsum("ncyxij,ocij->noyx", windows, weight.astype(np.float64))


def _check(padded: np.ndarray, weight: np.ndarray, threads: int, isa: str) -> None:
    got, want = direct_conv2d(padded, weight, threads, ISA_LEVELS[isa]), _reference(padded, weight)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("isa", LEVELS)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 9), hp=st.integers(1, 20), wp=st.integers(1, 40),
       co=st.integers(1, 19), kh=st.integers(1, 4), kw=st.integers(1, 4), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**32 - 1))
def test_the_direct_convolution_is_every_window_times_the_weight(isa, n, c, hp, wp, co, kh, kw, threads, seed):
    rng = np.random.default_rng(seed)
    kh, kw = min(kh, hp), min(kw, wp)
    _check(rng.standard_normal((n, c, hp, wp), dtype=np.float32),
           rng.standard_normal((co, c, kh, kw), dtype=np.float32), threads, isa)


@pytest.mark.parametrize("isa", LEVELS)
def test_the_zoo_shapes(isa):
    """A ResNet block's 3x3 convolution at 32 channels and a CIFAR stem's at 3 (padded by one)."""
    rng = np.random.default_rng(5)
    for x, w in (((8, 32, 18, 18), (32, 32, 3, 3)), ((4, 3, 34, 34), (16, 3, 3, 3))):
        _check(rng.standard_normal(x, dtype=np.float32), rng.standard_normal(w, dtype=np.float32), 2, isa)


def test_an_input_at_the_end_of_readable_memory():
    """The last image's last panels read past its last row: they read a copy, never the page after
    the input (here one the process may not read, where a read would crash the test)."""
    page = mmap.PAGESIZE
    shape, weight = (2, 3, 13, 15), np.random.default_rng(6).standard_normal((5, 3, 3, 3), dtype=np.float32)
    size = int(np.prod(shape)) * 4
    pages = -(-size // page)
    memory = mmap.mmap(-1, (pages + 1) * page)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    assert libc.mprotect(ctypes.c_void_p(base + pages * page), page, 0) == 0  # PROT_NONE
    padded = np.frombuffer(memory, np.float32, int(np.prod(shape)), pages * page - size).reshape(shape)
    padded[...] = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    for isa in LEVELS:
        _check(padded, weight, 1, isa)
    del padded
    libc.mprotect(ctypes.c_void_p(base + pages * page), page, 3)  # readable and writable again, to unmap


def test_an_empty_batch_reads_nothing():
    """The kernel's entry with no image (as a compiled call makes it for an empty batch) returns
    without reading: its input here starts right after a page the process may not read."""
    from stax.direct_conv import _entry
    from stax.runtime import native_isa
    page = mmap.PAGESIZE
    memory = mmap.mmap(-1, 2 * page)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    assert libc.mprotect(ctypes.c_void_p(base), page, 0) == 0  # PROT_NONE before the input
    out = np.full(4, 7.0, np.float32)
    _entry(native_isa())(base + page, base + page, out.ctypes.data, 0, 3, 7, 7, 4, 3, 3, 1)
    assert (out == 7.0).all()
    libc.mprotect(ctypes.c_void_p(base), page, 3)


def test_operands_it_cannot_take_are_named():
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="float32"):
        direct_conv2d(x.astype(np.float64), w)
    with pytest.raises(ShapeError, match=r"channels\s+must match"):
        direct_conv2d(x, np.zeros((3, 4, 3, 3), np.float32))
    with pytest.raises(ShapeError, match="taps fit the padded image"):
        direct_conv2d(x, np.zeros((3, 2, 6, 3), np.float32))
    assert direct_conv2d(np.zeros((0, 2, 5, 5), np.float32), w).shape == (0, 3, 3, 3)
    assert not direct_conv2d(np.ones((1, 0, 5, 5), np.float32), np.ones((3, 0, 3, 3), np.float32)).any()


def test_a_forced_blocked_convolution_of_an_empty_batch_or_no_channels_runs_in_the_compiled_call():
    """The compiled call calls the kernel whatever the sizes: an empty batch gives an empty output
    (the kernel reads nothing), no input channels give zeros."""
    import stax
    from stax import nn
    from stax.conv_gemm import ConvForm, blocked_applies
    if not blocked_applies((1, 1), (1, 1), 1, "float32"):
        pytest.skip("the blocked form needs vector instructions, which this CPU lacks")
    for x_shape, w_shape in (((0, 3, 5, 5), (4, 3, 3, 3)), ((2, 0, 5, 5), (4, 0, 3, 3))):
        x, w = np.ones(x_shape, np.float32), np.ones(w_shape, np.float32)
        compiled = stax.compile(lambda a, b: nn.conv2d(a, b, padding=1, form=ConvForm.BLOCKED), x, w)
        assert "stax::direct_conv(" in compiled.source
        got = compiled(x, w)
        assert got.shape == (x_shape[0], 4, 5, 5) and not got.any()
