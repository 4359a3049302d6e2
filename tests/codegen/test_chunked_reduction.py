"""The chunked-reduction form (``split_reduction.ChunkedReduction``): a reduction of fewer rows than
threads cuts its rows into chunks the threads claim.  Its results equal the reference evaluation
at every ISA level this CPU runs, do not depend on which thread ran which chunk (bit for bit,
a pool thread stalled or not), and a kernel on one thread keeps its one loop."""
import ctypes

import numpy as np
import pytest

import stax
from stax.runtime import build as runtime
from stax.target import ISA_LEVELS, runs_here
from tests.helpers import run_check
from tests.runtime.test_parallel_handback import repeat_until

LEVELS = [name for name in ("none", "avx2", "avx512") if runs_here(ISA_LEVELS[name])]
CHUNKED = "chunked-reduction"


def forms(compiled) -> list[str]:
    return [form for k in compiled.block_kernels for form in k.form.split("+")]


def values(shape, seed: int, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


CASES = {
    # a loss: one value from 197,000 points, the last chunk shorter than the others
    "mse": (lambda a, t: ((a - t) * (a - t)).mean(), [(1000, 197), (1000, 197)], np.float32),
    "max of a transposed view": (lambda a: a.t().amax(), [(640, 230)], np.float32),
    "min with its row stored": (lambda a: (a * 2 + 1, (a * 2 + 1).amin()), [(140_001,)], np.float32),
    "integer sum": (lambda a: a.sum(), [(400, 401)], np.int64),
    "float64 norm": (lambda a: (a * a).sum().sqrt(), [(457, 300)], np.float64),
    # Welford states merged with their chunks' counts; values around 100 would lose digits as a
    # sum of squares less a squared sum
    "variance": (lambda a: (a + 100).var(), [(1000, 197)], np.float32),
    "std and mean": (lambda a: (a.std(), a.mean()), [(300, 700)], np.float64),
}


@pytest.mark.parametrize("isa", LEVELS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_whole_tensor_reduction_is_cut_into_chunks_and_matches_the_reference(case, isa):
    fn, shapes, dtype = CASES[case]
    arrays = [values(s, k, dtype) for k, s in enumerate(shapes)]
    compiled = run_check(fn, *arrays, rtol=1e-5, atol=1e-5, isa=isa, threads=2)
    assert CHUNKED in forms(compiled)


def test_fewer_outer_points_than_threads_each_get_their_chunks():
    """Three sums of 160,000 points on four threads: every chunk reduces the rows of each outer
    point into that point's partial results."""
    x = values((3, 400, 400), 5)
    compiled = run_check(lambda a: a.sum((1, 2)), x, rtol=1e-5, atol=1e-4, isa="avx2", threads=4)
    assert forms(compiled) == [CHUNKED]


def test_one_thread_and_small_reductions_keep_one_loop():
    """The form needs a second thread and Tuning.chunked_min_points points."""
    big, small = values((1000, 97), 1), values((100, 97), 2)
    assert CHUNKED not in forms(stax.compile(lambda a: a.sum(), big, isa="avx2", threads=1))
    assert CHUNKED not in forms(stax.compile(lambda a: a.sum(), small, isa="avx2", threads=2))
    lowered = stax.compile(lambda a: a.sum(), small, isa="avx2", threads=2, tuning=stax.Tuning(chunked_min_points=64))
    assert CHUNKED in forms(lowered)


def test_the_result_does_not_depend_on_which_thread_ran_which_chunk(no_straggler_rule):
    """The chunks' partial results are combined in chunk order: the same bits when the caller
    runs every chunk (the pool thread held), when the pool thread runs some, and when it stalls
    on one it claimed."""
    x = values((4096, 64), 7)
    compiled = stax.compile(lambda a: a.sum(), x, isa="avx2", threads=2)
    assert forms(compiled) == [CHUNKED]
    hooks = no_straggler_rule
    try:
        hooks.stax_parallel_test_hold(1)
        alone = compiled(x)
        hooks.stax_parallel_test_hold(0)
        np.testing.assert_allclose(alone, x.astype(np.float64).sum(), rtol=1e-5)

        def shared_call():
            shared = runtime.parallel_stats()["shared"]
            got = compiled(x)
            return got, runtime.parallel_stats()["shared"] > shared
        got, _ = repeat_until(shared_call, lambda result: result[1], "the pool thread never ran a chunk")
        assert got.tobytes() == alone.tobytes()
        for call in range(5):
            hooks.stax_parallel_test_stall(ctypes.c_int64(2000))
            assert compiled(x).tobytes() == alone.tobytes(), f"stalled call {call}"
    finally:
        hooks.stax_parallel_test_hold(0)
        hooks.stax_parallel_test_stall(ctypes.c_int64(0))
