"""A compiled function introduces itself in two lines; the fusion log says why nothing fused."""
import re

import numpy as np

import stax
from instances.store import instance


def compiled(family: str, size: int):
    inst = instance(family, size)
    return stax.compile(inst.program.fn, *inst.program.inputs(size, 0))


def test_repr_is_two_lines_naming_kernels_strategies_and_peak():
    f = compiled("softmax", 64)
    lines = repr(f).splitlines()
    assert len(lines) == 2 and all(len(line) < 120 for line in lines)
    assert re.fullmatch(r"<stax\.CompiledFunction\(x\): 1 kernel in 1 call, (avx512|avx2|none)>", lines[0])
    assert lines[1] == (f"  fusion greedy (heuristic, traffic {f.modeled_traffic} B), order best (heuristic, "
                        f"peak {f.order.peak} B)")
    assert f.source and f.fusion_log  # the details stay where they were


def test_mlp_fusion_log_says_the_externs_keep_every_pair_apart():
    f = compiled("mlp_block", 64)
    assert "4 kernels (2 extern)" in repr(f)
    last = f.fusion_log.splitlines()[-1]
    assert last.startswith("no fusion: each of the ") and "extern calls read and write whole buffers" in last
    assert "found 0 possible fusions" in f.fusion_log


def test_a_fusing_program_has_no_unfused_line():
    x = np.ones((8, 16), np.float32)
    f = stax.compile(lambda x: (x.exp() / x.exp().sum(-1, keepdim=True)), x)
    assert "no fusion" not in f.fusion_log and "fusing" in f.fusion_log
