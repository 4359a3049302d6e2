"""Crash safety: a compile killed mid-build never leaves a library that a later process loads half
written, a header that does not precompile leaves a note and no crash, and a sweep killed at
several random moments resumes with every cell exactly once.
(Concurrent builds into one cache are in tests/compile/test_builds.py; one kill of a sweep in
tests/experiments/sweep/test_sweep.py.)"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.sweep.cells import plan
from experiments.sweep.config import load_config
from experiments.sweep.results import load_results
from stax.runtime import build as runtime
from stax.target import ISA_LEVELS
from tests.experiments.sweep.test_sweep import sweep, write_config

_COMPILE = """
import numpy as np, stax
x = np.arange(6 * 37, dtype=np.float32).reshape(6, 37)
f = stax.compile(lambda a: ((a * 3 + 1).tanh().sum(-1), a.t() * 2), x)
s, t = f(x)
assert np.allclose(s, np.tanh(x * 3 + 1).sum(-1), rtol=1e-5) and np.array_equal(t, x.T * 2)
print(f.library_path)
"""


def _start(script: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "STAX_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_when(process: subprocess.Popen, cache: Path, pattern: str, timeout: float = 60) -> bool:
    """SIGKILL the process and its g++ children as soon as a file matching ``pattern`` appears."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if list(cache.rglob(pattern)):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return True
        time.sleep(0.005)
    process.wait()
    return False


def test_a_header_that_does_not_precompile_leaves_a_note(tmp_path, monkeypatch):
    """g++ removes the output of a failed build itself; the cache writes why it failed, and the
    kernels are then built from the header's text."""
    monkeypatch.setenv("STAX_CACHE_DIR", str(tmp_path))
    flags = runtime._gcc_flags
    monkeypatch.setattr(runtime, "_gcc_flags", lambda isa: [*flags(isa), "-include", str(tmp_path / "missing.h")])
    directory = runtime.precompiled_headers(ISA_LEVELS["none"], "stax_vec.h")
    assert not (directory / "stax_vec.h.gch").exists() and not list(directory.glob("*.tmp"))
    assert "missing.h" in (directory / "stax_vec.h.failed").read_text()


@pytest.mark.parametrize("pattern", ["*.gch.tmp", "*.so.tmp"], ids=["precompiled-header", "kernels"])
def test_compile_killed_mid_build_then_a_fresh_process_compiles(tmp_path, pattern):
    assert _kill_when(_start(_COMPILE, tmp_path), tmp_path, pattern), f"no {pattern} file appeared"
    for library in tmp_path.rglob("*.so"):  # whatever was renamed into place is complete
        assert subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"]).returncode == 0
    fresh = _start(_COMPILE, tmp_path)
    out, err = fresh.communicate(timeout=180)
    assert fresh.returncode == 0, err
    library = Path(out.strip())
    assert library.exists() and library.parent.parent == tmp_path


def _cells(out: Path) -> int:
    return len(list((out / "cells").glob("*.json")))


def test_sweep_killed_at_random_moments_resumes_with_every_cell_once(tmp_path):
    config = write_config(tmp_path, seeds=3, sizes="[8, 10]")
    total = len(plan(load_config(config), "v"))
    out = tmp_path / "out"
    rng = random.Random(5)
    kills_mid_sweep = 0
    for _ in range(3):
        process = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(config), "--out", str(out),
                                    "--workers", "2"], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # at least one new cell, then a random moment (a first cell compiles its kernels: with an
        # empty kernel cache on a busy machine that took longer than a minute)
        before, deadline = _cells(out), time.time() + 300
        while _cells(out) == before and time.time() < deadline and process.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            kills_mid_sweep += 1
        process.wait()
        for cell in (out / "cells").glob("*.json"):  # every recorded cell is whole JSON
            json.loads(cell.read_text())
    assert kills_mid_sweep >= 1, "no kill landed while the sweep was running"
    summary = sweep(config, out, workers=2)
    assert summary.cells == total and 0 < summary.skipped <= total
    table = load_results(out)
    assert len(table) == total and table["cell"].is_unique and (table["status"] == "ok").all()
    assert _cells(out) == total
