"""The spec's listing 7.1: example 7.1's fused kernel (a parallel row loop, a vector row sum, a
vector division of the same row) and its two kernels without fusion."""
from __future__ import annotations

import re

import numpy as np
import pytest

import stax
from stax.compiler import Options, compile_graph
from stax.measure.demo import example_7_1

from tests.helpers import HAS_AVX512, sample


@pytest.mark.parametrize("level,width", [("avx512", 16), ("avx2", 8)])
def test_example_7_1_reads_like_listing_7_1(level, width):
    """One kernel: a parallel outer loop of 64 rows, a vector row sum kept in the kernel, then a
    vector division of the same row; buffer names as the wrapper allocates them."""
    x = sample((64, 128), seed=55)
    compiled = compile_graph(stax.trace(example_7_1, x), Options(isa=level))
    assert [k.nodes for k in compiled.block_kernels] == [["op0", "op1"]]
    src = compiled.block_kernels[0].source
    assert compiled.block_kernels[0].form == "vector"
    assert 'extern "C" void cpp_fused_op0_op1(const float* in_ptr0, float* out_ptr0, int64_t* err)' in src
    assert re.search(r"#pragma omp for schedule\(dynamic, 8\)\n\s*for \(int64_t x0 = 0; x0 < 64; x0 \+= 1\)", src)
    assert src.count("#pragma omp for") == 1
    op0, op1 = src.split("// op1\n")
    # op0: vector accumulators of W lanes over the row, combined at the end (Proposition 8.1)
    step = int(re.search(r"for \(int64_t y0 = 0; y0 < 128; y0 \+= (\d+)\)", op0).group(1))
    assert step % width == 0 and all(f"in_ptr0 + 128*x0 + y0 + {k})" in op0 for k in range(width, step, width))
    assert "stax::vload(in_ptr0 + 128*x0 + y0)" in op0
    assert re.search(r"tmp_acc0 = stax::r_sum\(tmp_acc0, stax::hreduce_sum<float>\(", op0)
    # op1: the division of the same row by its sum, W floats at a time, stored contiguously
    assert f"for (int64_t y0 = 0; y0 < 128; y0 += {width})" in op1
    assert "stax::vload(in_ptr0 + 128*x0 + y0)" in op1
    assert "stax::splat<float>(tmp_acc0)" in op1
    assert re.search(r"stax::vstore\(out_ptr0 \+ 128\*x0 \+ y0, tmp\d+\);", src)
    assert "// in_ptr0=arg0, out_ptr0=buf1" in src
    assert "cpp_fused_op0_op1(arg0, buf1)" in compiled.wrapper_source
    if level == "avx2" or HAS_AVX512:
        np.testing.assert_allclose(compiled(x), x / x.sum(-1, keepdims=True), rtol=1e-5)


def test_example_7_1_before_fusion():
    """Without fusion: the row sum writes buf0 (64 floats) and the division reads it; each kernel
    has its own ``omp for`` over the 64 rows or the 8192 flat elements."""
    x = sample((64, 128), seed=55)
    compiled = compile_graph(stax.trace(example_7_1, x), Options(fusion="none", isa="avx512"))
    assert [k.name for k in compiled.block_kernels] == ["cpp_fused_op0", "cpp_fused_op1"]
    row_sum, division = (k.source for k in compiled.block_kernels)
    assert re.search(r"#pragma omp for schedule\(dynamic, \d+\)\n\s*for \(int64_t x0 = 0; x0 < 64; x0 \+= 1\)", row_sum)
    assert "stax::vload(in_ptr0 + 128*x0 + y0 + 16)" in row_sum
    assert "for (int64_t x1 = 0; x1 < 128; x1 += 16)" in division
    assert "out_ptr0[x0] = tmp_acc0;" in row_sum
    assert "// in_ptr0=arg0, out_ptr0=buf0" in row_sum
    assert "// in_ptr0=arg0, in_ptr1=buf0, out_ptr0=buf1" in division
    assert "buf0 = empty_float32_64x1()\n    live += 256" in compiled.wrapper_source
    assert "live -= 256; del buf0" in compiled.wrapper_source
