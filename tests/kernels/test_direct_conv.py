"""The blocked direct convolution (stax.kernels.direct_conv) and its weight gradient against numpy in
float64 (every window of the padded input times the weight, or the output gradient, summed), at
every ISA level this CPU runs, on one and two threads, with channel, width and row tails; an input
that ends at a page the process may not read."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from stax.kernels.direct_conv import direct_conv, direct_conv2d, direct_conv2d_weight_grad
from stax.errors import ShapeError
from stax.target import ISA_LEVELS, runs_here

LEVELS = [name for name in ("none", "avx2", "avx512") if runs_here(ISA_LEVELS[name])]


def _reference(padded: np.ndarray, weight: np.ndarray) -> np.ndarray:
    windows = sliding_window_view(padded.astype(np.float64), weight.shape[2:], axis=(2, 3))
    return np.einsum("ncyxij,ocij->noyx", windows, weight.astype(np.float64))


def _check(padded: np.ndarray, weight: np.ndarray, threads: int, isa: str) -> None:
    got, want = direct_conv2d(padded, weight, threads, ISA_LEVELS[isa]), _reference(padded, weight)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


#: the sizes both kernels' property tests draw, but for the batch and the output channels
SIZES = dict(c=st.integers(1, 9), hp=st.integers(1, 20), wp=st.integers(1, 40), kh=st.integers(1, 4),
             kw=st.integers(1, 4), threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**32 - 1))


def _input(rng: np.random.Generator, n: int, c: int, hp: int, wp: int, kh: int, kw: int):
    """A padded input and the kernel's size, cut to fit it."""
    return rng.standard_normal((n, c, hp, wp), dtype=np.float32), min(kh, hp), min(kw, wp)


@pytest.mark.parametrize("isa", LEVELS)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), co=st.integers(1, 19), **SIZES)
def test_the_direct_convolution_is_every_window_times_the_weight(isa, n, c, hp, wp, co, kh, kw, threads, seed):
    rng = np.random.default_rng(seed)
    padded, kh, kw = _input(rng, n, c, hp, wp, kh, kw)
    _check(padded, rng.standard_normal((co, c, kh, kw), dtype=np.float32), threads, isa)


@pytest.mark.parametrize("isa", LEVELS)
def test_the_zoo_shapes(isa):
    """A ResNet block's 3x3 convolution at 32 channels and a CIFAR stem's at 3 (padded by one)."""
    rng = np.random.default_rng(5)
    for x, w in (((8, 32, 18, 18), (32, 32, 3, 3)), ((4, 3, 34, 34), (16, 3, 3, 3))):
        _check(rng.standard_normal(x, dtype=np.float32), rng.standard_normal(w, dtype=np.float32), 2, isa)


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("vectors, extra", [(1, 0), (2, 0), (3, 0), (1, 3), (2, 5)])
def test_rows_of_whole_vectors_and_rows_with_a_tail(isa, vectors, extra):
    """Output rows of one, two and three whole vectors (tiles of two vectors along a row or across
    two rows, an odd number of vectors in all: the last tile has one), and rows with a tail (tiles
    along the padded width); output channels past a tile's rows; odd output heights."""
    width = ISA_LEVELS[isa].width
    rng = np.random.default_rng(vectors * 10 + extra)
    for n, c, oh, co, k in ((2, 3, 5, 13, 3), (1, 5, 3, 9, 1), (3, 2, 1, 17, 2)):
        ow = vectors * width + extra
        padded = rng.standard_normal((n, c, oh + k - 1, ow + k - 1), dtype=np.float32)
        for threads in (1, 2):
            _check(padded, rng.standard_normal((co, c, k, k), dtype=np.float32), threads, isa)


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("extra", [0, 3])
@pytest.mark.parametrize("scaled, shifted, relu", [(True, True, True), (True, False, False), (False, True, False),
                                                   (False, False, True)])
def test_the_epilogue_scales_shifts_and_clamps_each_output_channel(isa, extra, scaled, shifted, relu):
    """The tile store's epilogue, relu(conv * scale + shift) per output channel, on rows of whole
    vectors and rows with a tail; a NaN scale gives NaNs through the ReLU, as torch's relu does."""
    rng = np.random.default_rng(extra)
    co, width = 13, 2 * ISA_LEVELS[isa].width + extra
    padded = rng.standard_normal((2, 3, 7, width + 2), dtype=np.float32)
    weight = rng.standard_normal((co, 3, 3, 3), dtype=np.float32)
    scale, shift = rng.standard_normal(co, dtype=np.float32), rng.standard_normal(co, dtype=np.float32)
    scale[4] = np.nan
    want = _reference(padded, weight)
    if scaled:
        want = want * scale[:, None, None]
    if shifted:
        want = want + shift[:, None, None]
    if relu:
        want = np.where(np.isnan(want), want, np.maximum(want, 0))
    for threads in (1, 2):
        got = direct_conv2d(padded, weight, threads, ISA_LEVELS[isa], scale=scale if scaled else None,
                            shift=shift if shifted else None, relu=relu)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        assert np.isnan(got[:, 4]).all() == scaled


def _check_weight_grad(padded: np.ndarray, grad: np.ndarray, threads: int, isa: str) -> None:
    got = direct_conv2d_weight_grad(padded, grad, threads, ISA_LEVELS[isa])
    kernel = tuple(padded.shape[d] - grad.shape[d] + 1 for d in (2, 3))
    windows = sliding_window_view(padded.astype(np.float64), kernel, axis=(2, 3))
    want = np.einsum("noyx,ncyxij->ocij", grad.astype(np.float64), windows)
    assert got.shape == want.shape == (grad.shape[1], padded.shape[1], *kernel) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.parametrize("isa", LEVELS)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 3), co=st.integers(1, 40), **SIZES)
def test_the_weight_gradient_is_the_output_gradient_times_every_window(isa, n, c, hp, wp, co, kh, kw, threads, seed):
    """Output channels at, below and above one and two vectors, taps not a multiple of a tile's
    rows, and an empty batch (whose gradient is zeros)."""
    rng = np.random.default_rng(seed)
    padded, kh, kw = _input(rng, n, c, hp, wp, kh, kw)
    _check_weight_grad(padded, rng.standard_normal((n, co, hp - kh + 1, wp - kw + 1), dtype=np.float32), threads, isa)


@pytest.mark.parametrize("isa", LEVELS)
def test_the_weight_gradient_of_the_zoo_shapes(isa):
    """A ResNet block's 3x3 convolution at 32 channels, a CIFAR stem's at 3, and 64 channels whose
    gradient rows are 4 KiB apart (32 x 32 outputs)."""
    rng = np.random.default_rng(8)
    for x, g in (((8, 32, 18, 18), (8, 32, 16, 16)), ((4, 3, 34, 34), (4, 16, 32, 32)),
                 ((2, 64, 34, 34), (2, 64, 32, 32))):
        _check_weight_grad(rng.standard_normal(x, dtype=np.float32), rng.standard_normal(g, dtype=np.float32), 2, isa)


@pytest.mark.parametrize("width", [15, 18])
def test_an_input_at_the_end_of_readable_memory(width):
    """The last image's last panels along the padded width read past its last row: they read a
    copy, never the page after the input (here one the process may not read, where a read would
    crash the test); rows of whole vectors (16 outputs) read no further than the image.  The
    weight gradient reads no further than the last image's last element."""
    page = mmap.PAGESIZE
    shape, weight = (2, 3, 13, width), np.random.default_rng(6).standard_normal((5, 3, 3, 3), dtype=np.float32)
    size = int(np.prod(shape)) * 4
    pages = -(-size // page)
    memory = mmap.mmap(-1, (pages + 1) * page)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    assert libc.mprotect(ctypes.c_void_p(base + pages * page), page, 0) == 0  # PROT_NONE
    padded = np.frombuffer(memory, np.float32, int(np.prod(shape)), pages * page - size).reshape(shape)
    padded[...] = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    grad = np.random.default_rng(8).standard_normal((2, 5, 11, width - 2), dtype=np.float32)
    for isa in LEVELS:
        _check(padded, weight, 1, isa)
        _check_weight_grad(padded, grad, 1, isa)
    del padded
    libc.mprotect(ctypes.c_void_p(base + pages * page), page, 3)  # readable and writable again, to unmap


def test_an_empty_batch_reads_nothing():
    """The kernels' entries with no image (as a compiled call makes them for an empty batch) read
    nothing (their operands here start right after a page the process may not read): the
    convolution writes nothing, the weight gradient zeros."""
    from stax.kernels.direct_conv import _entry
    from stax.target import native_isa
    page = mmap.PAGESIZE
    memory = mmap.mmap(-1, 2 * page)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    assert libc.mprotect(ctypes.c_void_p(base), page, 0) == 0  # PROT_NONE before the input
    out = np.full(4, 7.0, np.float32)
    _entry(native_isa(), False)(base + page, base + page, out.ctypes.data, None, None, 0, 3, 7, 7, 4, 3, 3, 0, 1)
    assert (out == 7.0).all()
    weight_grad = np.full((4, 3, 3, 3), 7.0, np.float32)
    _entry(native_isa(), True)(base + page, base + page, weight_grad.ctypes.data, 0, 3, 7, 7, 4, 3, 3, 1)
    assert (weight_grad == 0.0).all()
    libc.mprotect(ctypes.c_void_p(base), page, 3)


def test_operands_it_cannot_take_are_named():
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="float32"):
        direct_conv2d(x.astype(np.float64), w)
    with pytest.raises(ShapeError, match=r"channels\s+must match"):
        direct_conv2d(x, np.zeros((3, 4, 3, 3), np.float32))
    with pytest.raises(ShapeError, match="taps fit the padded image"):
        direct_conv2d(x, np.zeros((3, 2, 6, 3), np.float32))
    with pytest.raises(ShapeError, match="epilogue's shift must be a contiguous float32 vector of the 3 output"):
        direct_conv2d(x, w, shift=np.zeros(4, np.float32))
    with pytest.raises(ShapeError, match="0 per-channel operands for an epilogue with scale=True"):
        direct_conv(x, w, out=np.zeros((1, 3, 3, 3), np.float32), threads=1, scale=True)
    assert direct_conv2d(np.zeros((0, 2, 5, 5), np.float32), w).shape == (0, 3, 3, 3)
    assert not direct_conv2d(np.ones((1, 0, 5, 5), np.float32), np.ones((3, 0, 3, 3), np.float32)).any()
    with pytest.raises(ShapeError, match="not the output of a stride-1 convolution"):
        direct_conv2d_weight_grad(x, np.zeros((2, 3, 3, 3), np.float32))  # two images' gradient, one image
    with pytest.raises(ShapeError, match="not the output of a stride-1 convolution"):
        direct_conv2d_weight_grad(x, np.zeros((1, 3, 6, 3), np.float32))
    with pytest.raises(ShapeError, match="float32"):
        direct_conv2d_weight_grad(x, np.zeros((1, 3, 3, 3), np.float64))


def test_a_forced_blocked_convolution_and_weight_gradient_of_an_empty_batch_or_no_channels_run_in_the_compiled_call():
    """The compiled call calls the kernels whatever the sizes: an empty batch gives an empty output
    and a zero weight gradient (the kernels read nothing), no input channels give zeros."""
    import stax
    from stax.frontend.ops import nn
    from stax.environment import isa_from_env
    from stax.frontend.ops.conv_forms import ConvForm, blocked_applies
    if not blocked_applies((1, 1), (1, 1), 1, "float32", isa_from_env()):
        pytest.skip("the blocked form needs vector instructions, which this CPU lacks")
    for x_shape, w_shape in (((0, 3, 5, 5), (4, 3, 3, 3)), ((2, 0, 5, 5), (4, 0, 3, 3))):
        x, w = np.ones(x_shape, np.float32), np.ones(w_shape, np.float32)
        compiled = stax.compile(lambda a, b: nn.conv2d(a, b, padding=1, form=ConvForm.BLOCKED), x, w)
        assert "stax::direct_conv(" in compiled.source
        got = compiled(x, w)
        assert got.shape == (x_shape[0], 4, 5, 5) and not got.any()
        g = np.ones((x_shape[0], 4, 5, 5), np.float32)
        compiled = stax.compile(lambda a, b: nn.conv2d_weight_grad(b, a, w_shape, padding=1, form=ConvForm.BLOCKED), x, g)
        assert "stax::direct_conv_weight_grad(" in compiled.source
        got = compiled(x, g)
        assert got.shape == w_shape and not got.any()
