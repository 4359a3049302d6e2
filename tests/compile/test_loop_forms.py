"""Loops over large rows and scratch: non-temporal stores and prefetches past the caches, scratch
rows on the stack or the heap, and a region's final barrier."""
from __future__ import annotations

import functools
import re
import threading

import numpy as np
import pytest

from stax.codegen.kernel import without_final_barrier
from stax.codegen.tuning import Tuning

from tests.helpers import sample

DEFAULT = Tuning()


def _softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("columns", [2048, 2051])
def test_large_row_outputs_stream_past_the_caches(columns, check):
    """An output of Tuning.stream_min_bytes or more written by a row pass takes non-temporal stores (rows
    of 2051 floats start misaligned three times in four: those stores fall back to plain ones) and
    a fence, and the later passes prefetch the next row: the values still match the reference."""
    check = functools.partial(check, isa="avx2")
    x = sample((DEFAULT.stream_min_bytes // (4 * 2048), columns), seed=58)
    source = check(_softmax, x, threads=2).block_kernels[0].source
    assert "stax::vstore_stream(out_ptr0" in source and "stax::store_fence();" in source
    assert "__builtin_prefetch(in_ptr0" in source
    small = check(_softmax, x[:64], threads=2).block_kernels[0].source
    assert "vstore_stream" not in small and "store_fence" not in small
    for text in (source, small):  # the region's closing barrier is the only one after the last loop
        assert re.search(r"#pragma omp for schedule\(dynamic, \d+\) nowait", text) and "#pragma omp barrier" not in text


def test_loops_with_an_expensive_op_per_streamed_element_prefetch_their_large_rows_ahead(check):
    """A vector loop computing at least one expensive op per element of each large contiguous row
    it streams prefetches those rows Tuning.prefetch_ahead_bytes ahead (a one-pass row reduction, a
    pointwise loop; not a small row broadcast along the rows); one sqrt over four streams, or
    inputs below Tuning.stream_min_bytes, do not; the values match the reference."""
    check = functools.partial(check, isa="avx2")
    rows = DEFAULT.stream_min_bytes // (4 * 2048)
    x, bias = sample((rows, 2048), seed=65), sample((2048,), seed=66)
    ahead = f" + {DEFAULT.prefetch_ahead_bytes // 4}"  # elements ahead, then the cache line's offset in a step

    def prefetches(source: str) -> list[str]:
        return [line.strip() for line in source.splitlines() if "__builtin_prefetch" in line]

    def exp_sum_amax(a):
        e = a.exp()
        return e.sum(-1), e.amax(-1)

    one_pass = prefetches(check(exp_sum_amax, x, threads=2).block_kernels[0].source)
    assert one_pass and all(line.startswith("__builtin_prefetch(in_ptr0") and ahead in line for line in one_pass)
    pointwise = prefetches(check(lambda a, b: (a + b).erf(), x, bias, threads=2).block_kernels[0].source)
    assert len(pointwise) == 1 and ahead in pointwise[0] and "in_ptr0 + 2048*x0 + x1" in pointwise[0]
    four_streams = [x, x + 1, x + 2, x + 3]
    assert not prefetches(check(lambda a, b, c, d: (a + b + c + d).sqrt(), *four_streams).block_kernels[0].source)
    assert not prefetches(check(exp_sum_amax, x[:64], threads=2).block_kernels[0].source)


def test_scratch_rows_live_on_the_stack_up_to_a_size_and_on_the_heap_beyond(check):
    """A scratch row of at most Tuning.stack_array_max_bytes is a stack array, a longer one a heap
    array; both compute the reference's values, also on a thread other than the main one."""
    columns = DEFAULT.stack_array_max_bytes // 4
    on_stack = check(_softmax, sample((4, columns), seed=67), threads=2)
    assert f"stax::stack_array<float, {columns}> buf1_row;" in on_stack.block_kernels[0].source
    on_heap = check(_softmax, sample((4, columns + 4), seed=68), threads=2)
    assert "std::unique_ptr<float[]> buf1_row" in on_heap.block_kernels[0].source
    x = sample((4, columns), seed=69)
    results = []
    worker = threading.Thread(target=lambda: results.append(on_stack(x)))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(results[0], on_stack(x))


def test_a_region_ends_without_a_barrier_of_its_own_only_where_nothing_follows_its_last_loop():
    loop = ["#pragma omp for", "for (int64_t x0 = 0; x0 < 64; x0 += 1)", "{", "    f(x0);", "}"]
    assert without_final_barrier(["{", *("    " + line for line in loop), "}"])[1] == "    #pragma omp for nowait"
    followed = loop + ["g();"]  # g may read what other threads wrote in the loop
    assert without_final_barrier(followed) == followed
    fenced = ["#pragma omp for nowait", *loop[1:], "stax::store_fence();", "#pragma omp barrier"]
    assert without_final_barrier(fenced) == fenced[:-1]
    single = loop + ["#pragma omp single", "{", "    g();", "}"]
    assert without_final_barrier(single) == single
