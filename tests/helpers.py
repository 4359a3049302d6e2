"""Shared helpers of the tests (fixtures are in conftest.py).

``run_check`` compiles a function, runs it and the numpy reference evaluator on separate copies
of the same inputs (same strides), and compares every output and every input the program updates
in place: dtype and shape exactly, values with a tolerance for floats.  ``sample`` and ``nonzero``
draw seeded inputs; ``RUNNABLE_ISAS`` are the vector levels this CPU runs.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

import stax
from stax.reference import evaluate
from stax.target import ISA_LEVELS, runs_here

#: the repository's root (the folder holding stax/, tests/ and docs/)
ROOT = Path(__file__).resolve().parents[1]

HAS_AVX512 = runs_here(ISA_LEVELS["avx512"])
RUNNABLE_ISAS = ["avx2", "none"] + (["avx512"] if HAS_AVX512 else [])


def sample(shape, dtype: str = "float32", low: float = -3, high: float = 3, seed: int = 0) -> np.ndarray:
    """Deterministic random values of ``dtype`` in ``[low, high]`` (bool: a fair coin)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(int(low), int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def nonzero(shape, dtype: str, seed: int) -> np.ndarray:
    """Values of both signs bounded away from zero (divisors)."""
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random(shape) < 0.5, -1, 1)
    if dtype.startswith("int"):
        return (sign * rng.integers(1, 6, shape)).astype(dtype)
    return (sign * rng.uniform(0.5, 3, shape)).astype(dtype)


def strided_copy(array: np.ndarray) -> np.ndarray:
    """A copy with the same element strides (a transposed input stays transposed, a flipped one
    flipped, a broadcast one broadcast)."""
    if array.flags.c_contiguous or array.size == 0:
        return array.copy()
    reach = [(n - 1) * (s // array.itemsize) for n, s in zip(array.shape, array.strides)]
    low, high = sum(r for r in reach if r < 0), sum(r for r in reach if r > 0)
    base = np.zeros(high - low + 1, dtype=array.dtype)
    view = np.lib.stride_tricks.as_strided(base[-low:], array.shape, array.strides)
    view[...] = array
    return view


def assert_same(actual: np.ndarray, expected: np.ndarray, what: str, rtol: float, atol: float) -> None:
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}, not a numpy array"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, reference {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, reference {expected.shape}"
    if actual.dtype == np.bool_:
        assert set(np.unique(actual.view(np.uint8))) <= {0, 1}, f"{what}: bool bytes other than 0 and 1"
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def run_check(fn, *arrays: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6, upcast: bool = True,
              **compile_kwargs) -> stax.CompiledFunction:
    """Compile ``fn`` for ``arrays``, run it, and compare with ``evaluate`` (float32 computed in
    float64 when ``upcast``); returns the compiled function for further assertions."""
    compiled = stax.compile(fn, *arrays, **compile_kwargs)
    ours = [strided_copy(a) for a in arrays]
    theirs = [strided_copy(a) for a in arrays]
    got = compiled(*ours)
    got = got if isinstance(got, tuple) else (got,)
    want = evaluate(compiled.graph, *theirs, upcast=upcast)
    assert len(got) == len(want), f"{len(got)} outputs, reference {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {i}", rtol, atol)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert_same(a, b, f"input {i} after the call", rtol, atol)
    return compiled


def kernel_forms(compiled: stax.CompiledFunction) -> list[str]:
    """The form of each block kernel of ``compiled`` (``vector``, ``tiled``, ``scalar``...)."""
    return [k.form for k in compiled.block_kernels]


def holds_vectors(isa: str, *extents: int) -> bool:
    """Whether every extent holds at least one vector at this level (W lanes: 8 at avx2, 16 at
    avx512): a register tile needs W rows and W columns, a split reduction W columns."""
    return isa != "none" and min(extents) >= ISA_LEVELS[isa].width


def run_cpp(source: str, isa: str, directory: Path) -> str:
    """Compile a C++ program that includes the kernels' header ``stax_vec.h`` with the kernels'
    flags at ``isa``, run it, and return what it prints."""
    from stax.runtime.build import HEADER_DIR, compile_flags
    (directory / "snippet.cpp").write_text(source)
    subprocess.run(["g++", *compile_flags(ISA_LEVELS[isa]), f"-I{HEADER_DIR}",
                    str(directory / "snippet.cpp"), "-o", str(directory / "snippet")], check=True, capture_output=True)
    return subprocess.run([str(directory / "snippet")], check=True, capture_output=True, text=True).stdout


def assert_matches_torch(program, rtol: float, atol: float) -> None:
    """A program imported from torch (``stax.torch.capture.TorchProgram``), compiled and run on
    its example, gives every output torch gave (``program.expected``)."""
    got = program.compile()(*program.arguments())
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(program.expected), program.name
    for have, want in zip(got, program.expected):
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=program.name)
