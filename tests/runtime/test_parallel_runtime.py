"""The kernels' OpenMP runtime (stax_parallel.cpp): every construct the kernels use runs on
Stax's thread pool, never on libgomp, and computes what numpy computes with teams of one, two
and three threads (three on this two-CPU machine: waits sleep instead of spinning), from two
Python threads at once, and in a forked child."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stax
from stax.runtime import build as runtime
from stax.measure.demo import example_7_2
from stax.reference import evaluate

pytestmark = pytest.mark.usefixtures("no_straggler_rule")  # the tests count pooled regions
RNG = np.random.default_rng(0)
#: name -> (program, input, the OpenMP constructs its kernels must contain, as regular expressions)
PROGRAMS = {
    "blocked scan (omp for, omp single)": (lambda t: (t * 2).cumsum(0) + 1, RNG.random(200_003),
                                          [r"omp for schedule\(dynamic, 1\)", "omp single"]),
    "split reduction (omp for, omp single)": (lambda t: t.sum(0) * 2,
                                                               RNG.random((65536, 16)).astype(np.float32),
                                                               [r"omp for schedule\(dynamic, 1\)", "omp single"]),
    "example 7.2 under the spec's rule (omp for with its barrier)": (example_7_2,
                                                                    RNG.random((512, 512)).astype(np.float32),
                                                                    [r"omp for schedule\(dynamic, \d+\)\n", "nowait"]),
}
CASES = [pytest.param(name, threads, id=f"{name.split(' (')[0]}-{threads}") for name in PROGRAMS for threads in (1, 2, 3)]


def compiled_program(name: str, threads: int) -> tuple[stax.CompiledFunction, np.ndarray]:
    fn, x, constructs = PROGRAMS[name]
    compiled = stax.compile(fn, x, threads=threads, **({"rule": "cpu"} if fn is example_7_2 else {}))
    if threads > 1:
        missing = [c for c in constructs if not re.search(c, compiled.kernel_source)]
        assert not missing, f"{name}: the kernels lost {missing}; choose a program that has them"
    return compiled, x


def expected(compiled: stax.CompiledFunction, x: np.ndarray) -> list[np.ndarray]:
    return evaluate(compiled.graph, x.copy())


def assert_matches(got, want) -> None:
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("name, threads", CASES)
def test_constructs_compute_numpys_results_on_teams_of_one_two_and_three(name, threads):
    compiled, x = compiled_program(name, threads)
    before = runtime.parallel_stats()
    for _ in range(3):  # the second and third calls find the pool's threads started
        assert_matches(compiled(x.copy()), expected(compiled, x))
    after = runtime.parallel_stats()
    if threads > 1:
        assert after["pooled"] >= before["pooled"] + 3 and after["threads"] >= threads - 1


def test_kernels_take_no_openmp_entry_point_from_libgomp():
    """Every OpenMP call GCC emits for the kernels is one the pool implements: a library that
    still named a GOMP_ or omp_ symbol would bind it to libgomp, whose team is not the pool's."""
    for name in PROGRAMS:
        compiled, _ = compiled_program(name, threads=2)
        undefined = subprocess.run(["nm", "-D", "--undefined-only", compiled.library_path], check=True,
                                   capture_output=True, text=True).stdout.split()
        assert "__wrap_GOMP_parallel" in undefined, name
        assert not [s for s in undefined if s.startswith(("GOMP_", "omp_"))], (name, undefined)


def test_a_region_that_finds_the_pool_taken_runs_on_its_caller_alone():
    """While one Python thread's long kernel holds the pool, another thread's regions run on
    their calling thread alone, and both compute numpy's results."""
    big_fn, x, _ = PROGRAMS["split reduction (omp for, omp single)"]
    big_x = np.tile(x, (8, 1)).astype(np.float64)  # float64: float32 sums of 500k rows round apart
    big = stax.compile(big_fn, big_x, threads=2)
    small, small_x = compiled_program("blocked scan (omp for, omp single)", threads=2)
    big_want, small_want = expected(big, big_x), expected(small, small_x)
    stop, big_results = threading.Event(), []

    def hold_the_pool():
        while not stop.is_set():
            big_results.append(big(big_x))

    before = runtime.parallel_stats()
    holder = threading.Thread(target=hold_the_pool)
    holder.start()
    try:
        deadline = time.monotonic() + 30
        while runtime.parallel_stats()["alone"] == before["alone"] and time.monotonic() < deadline:
            assert_matches(small(small_x), small_want)
    finally:
        stop.set()
        holder.join()
    assert runtime.parallel_stats()["alone"] > before["alone"], "no region ran while the pool was taken"
    for got in big_results:
        assert_matches(got, big_want)


_FORK = """
import os, sys, time
import numpy as np, stax
x = np.random.default_rng(0).random(200_003)
compiled = stax.compile(lambda t: (t * 2).cumsum(0) + 1, x, threads=2)
want = np.cumsum(x * 2) + 1
assert np.allclose(compiled(x), want)  # the parent's pool has its threads
pid = os.fork()
if pid == 0:
    ok = False
    try:
        ok = all(np.allclose(compiled(x), want) for _ in range(3))
    finally:
        os._exit(0 if ok else 1)
deadline = time.monotonic() + 60
while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
    time.sleep(0.05)
if done == (0, 0):
    os.kill(pid, 9)
    print("hung")
else:
    print("computed" if os.waitstatus_to_exitcode(done[1]) == 0 else "wrong")
"""


def test_a_forked_child_runs_parallel_kernels():
    """The child of a fork (multiprocessing's default on Linux) has none of the pool's threads:
    its regions start new ones instead of waiting for threads that do not exist.  The fork
    happens in a process of its own: forking the test process would leave its pages
    copy-on-write, and later tests that count page faults would count those."""
    out = subprocess.run([sys.executable, "-c", _FORK], check=True, capture_output=True, text=True).stdout.split()
    assert out != ["hung"], "the forked child hung in a parallel region"
    assert out == ["computed"], "the forked child computed a wrong result"


_PASSIVE = """
import numpy as np, stax
from stax.runtime import build as runtime
x = np.random.default_rng(0).random(200_003)
compiled = stax.compile(lambda t: (t * 2).cumsum(0) + 1, x, threads=2)
runtime.load_runtime().stax_parallel_test_straggler_rule(0)  # every region on the pool
before = runtime.parallel_stats()
for _ in range(20):
    assert np.allclose(compiled(x), np.cumsum(x * 2) + 1)
after = runtime.parallel_stats()
print(after["pooled"] - before["pooled"], after["sleeps"] - before["sleeps"])
"""


@pytest.mark.parametrize("policy", ["passive", "PASSIVE"])
def test_a_passive_wait_policy_sleeps_instead_of_spinning(policy):
    """Under OMP_WAIT_POLICY=passive (OpenMP's variable, any case) a pool thread waiting for the
    next region sleeps at once: about one sleep a region, where spinning would bridge the gap
    between back-to-back calls."""
    env = {**os.environ, "OMP_WAIT_POLICY": policy}
    out = subprocess.run([sys.executable, "-c", _PASSIVE], env=env, check=True, capture_output=True, text=True)
    pooled, sleeps = map(int, out.stdout.split())
    assert pooled >= 20 and sleeps >= pooled // 2, (pooled, sleeps)
