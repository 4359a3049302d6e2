"""Building kernels: the kernel cache (keyed by the Python, shared by concurrent builds, its directory
named when it cannot be made), ISA levels (avx512 always built, a level the CPU lacks refused at
the call, an unknown one named) and a bad thread count in the environment."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import stax
from stax.compiler import Options, compile_graph
from stax.errors import BuildError, CallError, StaxError
from stax.reference import evaluate
from stax.runtime import build as runtime
from stax.runtime.build import compile_flags
from stax.target import ISA_LEVELS

from tests.helpers import HAS_AVX512, kernel_forms, sample
from tests.compile.test_strategies_and_threads import softmax_and_friends


def test_a_cached_library_is_found_without_asking_sysconfig_and_a_new_python_misses(monkeypatch):
    """A cache hit keys the Python by its version and installation, never by the headers'
    directory, which only a build asks sysconfig for; another Python's version misses."""
    fn, x = (lambda a: a * 3 - 1), sample((5, 9), seed=70)
    stax.compile(fn, x)

    def no_sysconfig():
        raise AssertionError("a cache hit asked sysconfig for the Python headers")

    monkeypatch.setattr(runtime, "_python_include", no_sysconfig)
    np.testing.assert_allclose(stax.compile(fn, x)(x), x * 3 - 1, rtol=1e-6)
    monkeypatch.setattr(runtime.sys, "version", "3.99.0 (another build)")
    with pytest.raises(AssertionError, match="asked sysconfig"):
        stax.compile(fn, x)


def test_avx512_builds():
    """The AVX-512 level compiles, and runs where the CPU has it; elsewhere a call says so."""
    x, w = sample((37, 45), seed=53), sample((37, 45), seed=54)
    compiled = compile_graph(stax.trace(softmax_and_friends, x, w), Options(fusion="greedy", isa="avx512"))
    assert "vector" in kernel_forms(compiled)
    assert "-DSTAX_W=16" in compile_flags(ISA_LEVELS["avx512"])
    if HAS_AVX512:
        for a, b in zip(compiled(x, w), evaluate(compiled.graph, x, w, upcast=True)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    else:  # a call would end the process on an illegal instruction: it is refused
        with pytest.raises(CallError, match="compiled for avx512, which this CPU does not have .* isa='avx2'"):
            compiled(x, w)


def test_a_level_the_cpu_lacks_is_refused_at_the_call(cpu_without_avx512):
    """Kernels built for avx512 on a CPU without it are built and readable; their call raises a
    CallError that names the level to use, instead of ending the process on an illegal instruction."""
    x = sample((37, 45), seed=55)
    compiled = stax.compile(lambda a: a.exp() / a.exp().sum(-1, keepdim=True), x, isa="avx512")
    assert compiled.isa.name == "avx512" and "stax::v_exp" in compiled.kernels[0].source
    with pytest.raises(CallError, match="compiled for avx512, which this CPU does not have .* isa='avx2'"):
        compiled(x)


def test_unknown_isa_level_raises(monkeypatch):
    monkeypatch.setenv("STAX_ISA", "sse9")
    with pytest.raises(StaxError, match="STAX_ISA='sse9' is not a level"):
        stax.compile(lambda a: a + 1, sample((3,)))


def test_a_cache_directory_that_cannot_be_made_is_named(monkeypatch, tmp_path):
    (tmp_path / "a file").write_text("")
    for where, reason in ((tmp_path / "a file", "File exists"), (tmp_path / "a file" / "below", "Not a directory")):
        monkeypatch.setenv("STAX_CACHE_DIR", str(where))
        with pytest.raises(BuildError, match=f"the kernel cache {re.escape(str(where))} cannot be made \\({reason}\\)"):
            stax.compile(lambda a: a + 1, sample((3,)))


@pytest.mark.parametrize("threads", ["0", "-2", "two", "1.5", ""])
def test_a_bad_thread_count_in_the_environment_is_named(monkeypatch, threads):
    monkeypatch.setenv("STAX_THREADS", threads)
    with pytest.raises(StaxError, match=f"STAX_THREADS={threads!r} is not a number of threads"):
        stax.compile(lambda a: a + 1, sample((3,)))
    monkeypatch.setenv("STAX_THREADS", " 1 ")
    assert "#pragma omp parallel" not in stax.compile(lambda a: a + 1, sample((1 << 17,))).kernel_source


_BUILD_SCRIPT = """
import numpy as np, stax
x = np.arange(96, dtype=np.float32).reshape(8, 12)
f = stax.compile(lambda a: (a * 3 + 1).sum(-1), x)
print(f.library_path)
assert np.allclose(f(x), (x * 3 + 1).sum(-1))
"""


def test_concurrent_builds_share_the_cache(tmp_path):
    """Two processes that build the same kernels into an empty cache both succeed and agree."""
    env = {**os.environ, "STAX_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert results[0][0] == results[1][0]
    assert not list(tmp_path.rglob("*.tmp"))
