"""Shared helpers of the compiler tests.

``check`` (a fixture) compiles a function, runs it and the numpy reference evaluator on separate
copies of the same inputs (same strides), and compares every output and every input the program
updates in place: dtype and shape exactly, values with a tolerance for floats.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import numpy as np
import pytest

import stax
from stax.reference import evaluate


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


def run_cpp(source: str, isa: str, directory: Path) -> str:
    """Compile a C++ program that includes the kernels' header ``stax_vec.h`` with the kernels'
    flags at ``isa``, run it, and return what it prints."""
    from stax.runtime.build import HEADER_DIR, compile_flags
    from stax.target import ISA_LEVELS
    (directory / "snippet.cpp").write_text(source)
    subprocess.run(["g++", *compile_flags(ISA_LEVELS[isa]), f"-I{HEADER_DIR}",
                    str(directory / "snippet.cpp"), "-o", str(directory / "snippet")], check=True, capture_output=True)
    return subprocess.run([str(directory / "snippet")], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def check(request):
    """``run_check``, compiling for the test's ``isa`` fixture when it takes one."""
    if "isa" in request.fixturenames:
        return functools.partial(run_check, isa=request.getfixturevalue("isa"))
    return run_check


@pytest.fixture
def cpu_without_avx512(monkeypatch):
    """This CPU as stax sees it, without its AVX-512 flags: the refusal of a level the CPU lacks
    is tested on every machine, not only on those that lack it."""
    from stax import target
    flags = target._cpu_flags()
    monkeypatch.setattr(target, "_cpu_flags", lambda: frozenset(f for f in flags if not f.startswith("avx512")))


@pytest.fixture
def no_straggler_rule():
    """The kernels' pool without its straggler rule (stax_parallel.cpp), on again after the test:
    every region with a team uses the pool, so a test that counts pooled regions does not depend
    on how loaded the machine is.  Yields the runtime's library (its test hooks)."""
    from stax.runtime import build as runtime
    hooks = runtime.load_runtime()
    hooks.stax_parallel_test_straggler_rule(0)
    yield hooks
    hooks.stax_parallel_test_straggler_rule(1)


def assert_matches_torch(program, rtol: float, atol: float) -> None:
    """A program imported from torch (``stax.torch.capture.TorchProgram``), compiled and run on
    its example, gives every output torch gave (``program.expected``)."""
    got = program.compile()(*program.arguments())
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(program.expected), program.name
    for have, want in zip(got, program.expected):
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=program.name)
