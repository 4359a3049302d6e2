"""The kernels' runtime never waits for a pool thread that is not running (stax_parallel.cpp):
a region whose pool thread is held completes on its caller, and regions of random loops,
barriers and `omp single` run each chunk exactly once and keep their barriers, whenever the pool
threads join (a counting build: every iteration counts its visits and checks that the steps
before its last barrier are complete)."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

import stax
from stax.runtime import build as runtime
from stax.target import ISA_LEVELS
from stax.reference import evaluate

LOOP, LOOP_NOWAIT, SINGLE, BARRIER = range(4)

COUNTING = r"""
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
// steps[s] = {kind, iterations, chunk, first step not yet behind a barrier}: every iteration counts
// its visit and checks that each step before its last barrier has finished all its iterations.
static void visit(const int64_t* steps, int64_t s, int64_t i, std::atomic<int32_t>* counts, const int64_t* offsets,
                  std::atomic<int64_t>* finished, std::atomic<int64_t>* violations, int64_t pause_every) {
  for (int64_t t = 0; t < steps[4 * s + 3]; ++t)
    if (finished[t].load() != steps[4 * t + 1]) violations->fetch_add(1);
  if (pause_every > 0 && (i + s) % pause_every == 0)  // a thread that loses its core in a chunk
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  counts[offsets[s] + i].fetch_add(1);
  finished[s].fetch_add(1);
}

extern "C" void run_steps(const int64_t* steps, int64_t n_steps, std::atomic<int32_t>* counts, const int64_t* offsets,
                          std::atomic<int64_t>* finished, std::atomic<int64_t>* violations, int threads,
                          int64_t pause_every) {
  #pragma omp parallel num_threads(threads)
  {
    for (int64_t s = 0; s < n_steps; ++s) {
      const int64_t kind = steps[4 * s], n = steps[4 * s + 1], chunk = steps[4 * s + 2];
      if (kind == 0) {
        #pragma omp for schedule(dynamic, chunk)
        for (int64_t i = 0; i < n; ++i) visit(steps, s, i, counts, offsets, finished, violations, pause_every);
      } else if (kind == 1) {
        #pragma omp for schedule(dynamic, chunk) nowait
        for (int64_t i = 0; i < n; ++i) visit(steps, s, i, counts, offsets, finished, violations, pause_every);
      } else if (kind == 2) {
        #pragma omp single
        visit(steps, s, 0, counts, offsets, finished, violations, pause_every);
      } else {
        #pragma omp barrier
      }
    }
  }
}

// A region that is one loop (GCC combines the two into GOMP_parallel_loop_*).
extern "C" void run_combined(std::atomic<int32_t>* counts, int64_t n, int64_t chunk, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(dynamic, chunk)
  for (int64_t i = 0; i < n; ++i) counts[i].fetch_add(1);
}

// A static schedule asks for its team: every thread it planned for must run its share.
extern "C" void run_static(std::atomic<int32_t>* counts, int64_t n, int threads) {
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) counts[i].fetch_add(1);
}
"""


@pytest.fixture(scope="module")
def counting():
    lib = runtime.load(runtime.build(COUNTING, ISA_LEVELS["none"]))
    lib.run_steps.restype = lib.run_static.restype = lib.run_combined.restype = None
    pointer, int64 = ctypes.c_void_p, ctypes.c_int64
    lib.run_steps.argtypes = [pointer, int64, pointer, pointer, pointer, pointer, ctypes.c_int, int64]
    lib.run_static.argtypes = [pointer, int64, ctypes.c_int]
    lib.run_combined.argtypes = [pointer, int64, int64, ctypes.c_int]
    return lib


@pytest.fixture()
def hooks(no_straggler_rule):
    """The runtime's test hooks, released after the test whatever happens; the straggler rule is
    off unless the test turns it on (the tests count pooled regions and chunks taken back)."""
    lib = no_straggler_rule
    yield lib
    lib.stax_parallel_test_hold(0)
    lib.stax_parallel_test_delay(ctypes.c_int64(0))
    lib.stax_parallel_test_stall(ctypes.c_int64(0))


def random_steps(rng: np.random.Generator, most_steps: int) -> np.ndarray:
    """A random region: loops (with or without their barrier), singles and explicit barriers, each
    with the first step that a barrier has not yet closed behind it."""
    rows, first_open = [], 0
    for s in range(int(rng.integers(1, most_steps + 1))):
        kind = int(rng.choice([LOOP, LOOP_NOWAIT, SINGLE, BARRIER], p=[0.4, 0.3, 0.15, 0.15]))
        n = int(rng.integers(0, 300)) if kind in (LOOP, LOOP_NOWAIT) else int(kind == SINGLE)
        rows.append([kind, n, int(rng.integers(1, 40)), first_open])
        if kind in (LOOP, SINGLE, BARRIER):
            first_open = s + 1
    return np.array(rows, dtype=np.int64)


def run_counted(lib, steps: np.ndarray, threads: int, pause_every: int = 0) -> tuple[np.ndarray, int]:
    offsets = np.concatenate([[0], np.cumsum(steps[:, 1])]).astype(np.int64)
    counts = np.zeros(max(int(offsets[-1]), 1), np.int32)
    finished = np.zeros(len(steps), np.int64)
    violations = np.zeros(1, np.int64)
    lib.run_steps(steps.ctypes.data, len(steps), counts.ctypes.data, offsets.ctypes.data,
                  finished.ctypes.data, violations.ctypes.data, threads, pause_every)
    return counts[:offsets[-1]], int(violations[0])


@pytest.mark.parametrize("most_steps", [12, 300])
@pytest.mark.parametrize("delay_us", [0, 300])
@pytest.mark.parametrize("threads", [2, 3])
def test_random_regions_run_each_chunk_once_and_keep_their_barriers(counting, hooks, threads, delay_us, most_steps):
    """Pool threads that join at random moments (delayed up to ``delay_us``) or at once, chunks
    that sometimes pause mid-way: every iteration runs exactly once and no iteration after a
    barrier starts before the steps ahead of that barrier are complete.  Regions of up to 300
    steps let a late thread start more steps behind the caller than the runtime has claim words."""
    hooks.stax_parallel_test_delay(ctypes.c_int64(delay_us))
    rng = np.random.default_rng(threads * 1000 + delay_us + most_steps)
    for _ in range(40 if most_steps < 100 else 10):
        steps = random_steps(rng, most_steps)
        counts, violations = run_counted(counting, steps, threads, pause_every=int(rng.choice([0, 7, 50])))
        assert violations == 0, steps
        assert (counts == 1).all(), (steps, np.flatnonzero(counts != 1)[:10])


def test_a_held_pool_thread_leaves_the_region_to_its_caller_and_never_touches_it_after(counting, hooks):
    """With the pool thread held before it can join, regions complete on their caller; released
    after the caller returned, it finds the regions over and returns without running them (the
    counts, zeroed after the return, stay zero)."""
    steps = np.array([[LOOP, 200, 5, 0], [SINGLE, 1, 1, 1], [LOOP_NOWAIT, 100, 3, 2]], np.int64)
    run_counted(counting, steps, threads=2)  # the pool thread exists
    hooks.stax_parallel_test_hold(1)
    before = runtime.parallel_stats()
    offsets = np.array([0, 200, 201, 301], np.int64)
    counts = np.zeros(301, np.int32)
    finished, violations = np.zeros(3, np.int64), np.zeros(1, np.int64)
    for _ in range(3):
        counts[:] = 0
        finished[:] = 0
        counting.run_steps(steps.ctypes.data, 3, counts.ctypes.data, offsets.ctypes.data,
                           finished.ctypes.data, violations.ctypes.data, 2, 0)
        assert (counts == 1).all() and violations[0] == 0
    middle = runtime.parallel_stats()
    chunks = 200 // 5 + 1 + -(-100 // 3)  # the caller ran all 75 chunks of each, 37 beyond its half
    assert middle["taken_back"] - before["taken_back"] == 3 * (chunks - -(-chunks // 2))
    counts[:] = 0
    finished[:] = 0
    hooks.stax_parallel_test_hold(0)
    deadline = time.monotonic() + 10
    while runtime.parallel_stats()["late"] == middle["late"] and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.01)
    assert runtime.parallel_stats()["late"] > middle["late"], "the released pool thread never came back"
    assert not counts.any() and not finished.any(), "a pool thread ran a region after its caller returned"


def test_a_held_pool_thread_does_not_stop_a_compiled_program(hooks):
    """Softmax at 256 x 512 on two threads, its pool thread held: the caller computes it alone."""
    x = np.random.default_rng(1).random((256, 512)).astype(np.float32)
    compiled = stax.compile(lambda t: (t - t.amax(-1, keepdim=True)).exp() / (t - t.amax(-1, keepdim=True)).exp().sum(
        -1, keepdim=True), x, threads=2)
    want = evaluate(compiled.graph, x.copy())[0]
    np.testing.assert_allclose(compiled(x), want, rtol=2e-5, atol=1e-6)  # starts the pool thread
    assert "schedule(dynamic" in compiled.kernel_source
    hooks.stax_parallel_test_hold(1)
    before = runtime.parallel_stats()
    np.testing.assert_allclose(compiled(x), want, rtol=2e-5, atol=1e-6)
    after = runtime.parallel_stats()
    assert after["pooled"] > before["pooled"] and after["taken_back"] > before["taken_back"]


def test_a_static_schedule_waits_for_its_whole_team(counting, hooks):
    """Code that asks for its team (a static schedule) gets every thread it planned for, late ones
    included: each iteration runs once."""
    hooks.stax_parallel_test_delay(ctypes.c_int64(500))
    for n in (1, 7, 1000):
        counts = np.zeros(n, np.int32)
        counting.run_static(counts.ctypes.data, n, 2)
        assert (counts == 1).all()


def test_a_region_of_one_loop_hands_back_too(counting, hooks):
    """``omp parallel for schedule(dynamic)``, which GCC lowers to one combined call, with late
    pool threads and with a held one: each iteration once."""
    for delay_us, held in ((300, 0), (0, 1)):
        hooks.stax_parallel_test_delay(ctypes.c_int64(delay_us))
        hooks.stax_parallel_test_hold(held)
        for n, chunk in ((0, 1), (1, 4), (1000, 7), (5000, 64)):
            for threads in (2, 3):
                counts = np.zeros(max(n, 1), np.int32)
                counting.run_combined(counts.ctypes.data, n, chunk, threads)
                assert (counts[:n] == 1).all() and not counts[n:].any()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "batchnorm_stats", "adam_step", "transposed_add"])
def test_suite_programs_compute_numpys_results_with_late_pool_threads(hooks, name):
    """Generated kernels (row passes, split column reductions with their `omp single`, in-place
    updates, tiles) on two threads whose pool thread joins each region up to 200 us late."""
    from instances.programs import PROGRAMS
    arrays = PROGRAMS[name].inputs(256, columns=512)
    compiled = stax.compile(PROGRAMS[name].fn, *arrays, threads=2)
    want = evaluate(compiled.graph, *[a.copy() for a in arrays])
    hooks.stax_parallel_test_delay(ctypes.c_int64(200))
    before = runtime.parallel_stats()
    for _ in range(5):
        got = compiled(*[a.copy() for a in arrays])
        for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5)
    assert runtime.parallel_stats()["pooled"] >= before["pooled"] + 5


def test_chunks_cut_each_threads_share_in_four():
    """The chunk size of a parallel loop nest (Algorithm 8.1's share per thread over
    ``Tuning.chunks_per_thread``), in logical iterations of the collapsed loops; a C++ expression
    when a bound is one."""
    from stax.codegen.tuning import Tuning, chunk_iterations
    assert Tuning().chunks_per_thread == 4
    assert chunk_iterations([(0, 64, 1)], 2) == 8
    assert chunk_iterations([(0, 131072, 16)], 2) == 1024  # a vector loop: 8192 iterations
    assert chunk_iterations([(0, 4, 1), (0, 6, 1)], 3) == 2  # collapse(2): 24 iterations
    assert chunk_iterations([(0, 3, 1)], 2) == 1
    assert chunk_iterations([("x1_head", 64, 1)], 2) == "std::max<int64_t>(1, (((64) - (x1_head) + 0) / 1 + 7) / 8)"


def stalled_region(counting, kind: str) -> None:
    """One region on two threads whose every iteration must run once: a combined loop, or two
    loops with a barrier between them and a single after (the caller then waits at a barrier)."""
    if kind == "one loop":
        n = 1 << 16
        counts = np.zeros(n, np.int32)
        counting.run_combined(counts.ctypes.data, n, 64, 2)
        assert (counts == 1).all()
    else:
        steps = np.array([[LOOP, 4000, 20, 0], [LOOP, 4000, 20, 1], [SINGLE, 1, 1, 2]], np.int64)
        counts, violations = run_counted(counting, steps, threads=2, pause_every=200)  # the pool thread gets a core
        assert violations == 0 and (counts == 1).all()


def stalled_then_next(counting, hooks, kind: str) -> list[dict[str, int]]:
    """A region whose pool thread stalls 30 ms once it claimed chunks, then one more region: the
    pool's statistics before, between and after."""
    hooks.stax_parallel_test_stall(ctypes.c_int64(30_000))
    stats = [runtime.parallel_stats()]
    for _ in range(2):
        stalled_region(counting, kind)
        stats.append(runtime.parallel_stats())
    return stats


def repeat_until(attempt, succeeded, what: str, seconds: float = 30):
    """Call ``attempt()`` until ``succeeded`` holds of what it returned (this machine's load can
    keep a pool thread from joining in time, or the caller from keeping its core); its result."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = attempt()
        if succeeded(result):
            return result
    pytest.fail(f"{what}: {result}")


@pytest.mark.parametrize("kind", ["one loop", "loops and a barrier"])
def test_a_stalled_pool_thread_sends_the_next_regions_to_their_caller_then_the_pool_again(counting, hooks, kind):
    """A pool thread that stops 30 ms while it holds chunks (the stall hook): the region's results
    are right, its caller counts a straggler and runs the next region alone (solo); with the
    thread running again, later regions use the pool and it runs chunks in them."""
    hooks.stax_parallel_test_straggler_rule(1)
    stalled_region(counting, kind)  # the pool thread exists and spins
    before, middle, after = repeat_until(
        lambda: stalled_then_next(counting, hooks, kind),
        lambda s: s[1]["stragglers"] > s[0]["stragglers"] and s[2]["solo"] > s[1]["solo"],
        "no stalled region was followed by a solo one")
    assert after["pooled"] == middle["pooled"], "the region after the straggler used the pool"
    hooks.stax_parallel_test_stall(ctypes.c_int64(0))

    def later_region():
        time.sleep(0.005)
        stalled_region(counting, kind)
        return runtime.parallel_stats()
    repeat_until(later_region, lambda now: now["pooled"] > after["pooled"] and now["shared"] > after["shared"],
                 "the pool thread never ran chunks again after the straggler")


def thread_affinities() -> dict[int, set[int]]:
    """Every thread of this process and the CPUs it may run on."""
    import os
    threads = {}
    for name in os.listdir("/proc/self/task"):
        try:
            threads[int(name)] = os.sched_getaffinity(int(name))
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return threads


@pytest.mark.parametrize("kind", ["one loop", "loops and a barrier"])
def test_a_caller_waiting_on_a_stalled_pool_thread_lends_it_its_core_and_takes_it_back(counting, hooks, kind):
    """A pool thread that stops 30 ms while it holds chunks: its caller, done with the rest of the
    work, moves it to its own core before it sleeps (at the region's end, or at a barrier), the
    results are right, and afterwards every thread may run where it could before."""
    stalled_region(counting, kind)  # the pool thread exists
    homes = thread_affinities()
    repeat_until(lambda: stalled_then_next(counting, hooks, kind), lambda s: s[1]["lent"] > s[0]["lent"],
                 "the caller never lent its core to the stalled pool thread")
    assert thread_affinities() == homes


def test_with_the_rule_off_a_straggler_is_counted_and_the_pool_kept(counting, hooks):
    """The straggler rule off (as the hooks fixture leaves it): a stalled pool thread still counts
    as a straggler, and the next region uses the pool."""
    stalled_region(counting, "one loop")
    before, _, after = repeat_until(lambda: stalled_then_next(counting, hooks, "one loop"),
                                    lambda s: s[1]["stragglers"] > s[0]["stragglers"],
                                    "no stalled region counted a straggler")
    assert after["solo"] == before["solo"] and after["pooled"] == before["pooled"] + 2


@pytest.mark.parametrize("waited, worked, chunks, member_chunks, member_worked, straggler", [
    (36.0, 35.0, 1, 2, 71.0, False),      # the pool thread had two chunks to the caller's one, at its pace
    (250.0, 140.0, 15, 9, 300.0, False),  # 3.6 times the caller's time a chunk: under STRAGGLER_SLOWDOWN
    (1880.0, 490.0, 1, 1, 2280.0, True),  # the same chunk took the pool thread 4.7 times as long
    (50.0, 10.0, 3, 0, 0.0, True),        # a member that held no chunk kept the caller waiting
    (50.0, 10.0, 0, 1, 55.0, True),       # the caller ran nothing: no pace to compare with
    (15.0, 5.0, 1, 1, 20.0, False),       # a wait under STRAGGLER_FLOOR_SECONDS
    (30.0, 40.0, 1, 1, 200.0, False),     # the caller worked longer than it waited
])
def test_a_straggler_is_a_member_slower_than_the_caller_a_chunk(waited, worked, chunks, member_chunks,
                                                                member_worked, straggler):
    """The straggler rule's test (times in us): the caller waited longer than it worked, on pool
    threads that ran their chunks more than STRAGGLER_SLOWDOWN (4) times slower than it ran its own;
    an uneven split of chunks run at the same pace is no straggler (it sent two-thread code solo on
    a quiet machine)."""
    from stax.runtime.build import load_runtime

    test = load_runtime().stax_parallel_test_is_straggler
    test.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_int64, ctypes.c_double]
    assert bool(test(waited, worked, chunks, member_chunks, member_worked)) is straggler


@pytest.mark.parametrize("last_ms, since_ms, waited_us, crowded, window_ms", [
    (0, 0, 60, True, 10),        # the first straggler, a late wake-up: the shortest window
    (0, 0, 3000, True, 150),     # the first, a wait of a time slice: another task holds the pool thread's core
    (10, 20, 60, True, 40),      # the pool failed again 20 ms after a 10 ms window: a lasting co-runner
    (40, 900, 60, True, 160),    # within SOLO_MEMORY_SECONDS of the last window's end
    (40, 900, 4000, True, 200),  # the longer of the grown window and the wait's
    (160, 100, 60, True, 500),   # grown to SOLO_MAX_SECONDS
    (500, 50, 60, True, 500),
    (0, 0, 60_000, True, 500),   # a wait's window is capped too
    (500, 1500, 60, True, 10),   # a straggler long after the last window: the machine was quiet meanwhile
    (0, 0, 60, False, 3),        # no more runnable tasks than CPUs: a moment's interruption, 50 times its wait
    (10, 20, 60, False, 3),      # ... which does not grow the window however often it recurs
    (0, 0, 3000, False, 10),     # ... and opens at most the shortest crowded window
])
def test_the_solo_window_follows_the_wait_and_grows_while_stragglers_recur(last_ms, since_ms, waited_us, crowded,
                                                                           window_ms):
    """A straggler's window is SOLO_PER_WAIT (50) times its wait, and under a co-runner that lets
    the pool run for a while between its stalls the windows grow (10, 40, 160, 500 ms) rather than
    fall back whenever the pool outlasted one; with no more runnable tasks than CPUs they neither
    grow nor exceed 10 ms."""
    from stax.runtime.build import load_runtime
    solo_window = load_runtime().stax_parallel_test_solo_window
    solo_window.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_double, ctypes.c_int]
    solo_window.restype = ctypes.c_int64
    assert solo_window(last_ms * 1_000_000, since_ms * 1_000_000, waited_us, crowded) == window_ms * 1_000_000


def test_the_straggler_rule_reads_the_machines_runnable_tasks():
    """The count that tells a crowded machine from a moment's interruption is /proc/loadavg's
    runnable tasks: what this process reads there, and more than the CPUs once as many busy
    processes as CPUs run beside it."""
    import os
    import subprocess
    import sys
    from stax.runtime.build import load_runtime
    runnable = load_runtime().stax_parallel_test_runnable_tasks
    runnable.restype = ctypes.c_long
    with open("/proc/loadavg") as f:
        before = int(f.read().split()[3].split("/")[0])
    assert 1 <= runnable() <= before + 8
    cpus = os.cpu_count()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        repeat_until(lambda: runnable(), lambda n: n > cpus, f"never more than {cpus} runnable tasks", seconds=10)
    finally:
        for p in busy:
            p.kill()
            p.wait()


WARM_512 = """
import numpy as np, stax
from stax.runtime.build import load_runtime
from stax.target import ISA_LEVELS, runs_here
warm = load_runtime().stax_parallel_test_warm_512
x = np.ones((64, 64), np.float32)
seen = [warm()]
stax.compile(lambda a: a * 2 + 1, x, isa="avx2")
seen.append(warm())
if runs_here(ISA_LEVELS["avx512"]):
    stax.compile(lambda a: a * 3 + 1, x, isa="avx512")
    seen.append(warm())
print(seen)
"""


def test_waits_keep_the_512_bit_units_busy_once_512_bit_kernels_are_loaded():
    """A fresh process: its waits run no 512-bit instruction until a library of 512-bit kernels
    is loaded (where the CPU has them); an AVX2 library does not turn them on."""
    import subprocess
    import sys
    from stax.target import ISA_LEVELS, runs_here
    out = subprocess.run([sys.executable, "-c", WARM_512], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("[0, 0, 1]" if runs_here(ISA_LEVELS["avx512"]) else "[0, 0]")
