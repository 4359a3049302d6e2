"""The target is resolved once (``stax.target``, ``Options.isa``) and reaches every extern kernel
and tracing: compiled for a level, a program that uses each extern (the team gemm, the narrow
gemm, the blocked convolution and its weight gradient, row lookups and their gradient, random
draws) builds every extern library for that level, chooses its externs by that level's width,
not the host's, and never asks the CPU for its level (``native_isa`` raises)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stax.frontend.ops.conv_forms import BLOCKED_MIN_LANES
from stax.kernels import blas
from stax.kernels.narrow_gemm import MIN_LANES
from stax.target import ISA_LEVELS, runs_here

LEVELS = [name for name, isa in ISA_LEVELS.items() if runs_here(isa)]

#: run in a fresh process (no extern library loaded yet): every binding of ``native_isa`` raises,
#: each extern library built is recorded with its level, and the program is compiled for the
#: level named in argv and called through the compiled call and the Python wrapper
SCRIPT = r"""
import json, sys
import numpy as np
import stax
from stax import target
from stax.frontend.ops import gather, nn
from stax.kernels import libraries
from stax.reference import evaluate

def probed(*args):
    raise AssertionError("native_isa was called below the options")

for module in list(sys.modules.values()):
    if getattr(module, "native_isa", None) is target.native_isa:
        module.native_isa = probed
files = {libraries.source(p.stem): p.stem for p in libraries.SOURCE_DIR.glob("*.cpp")}
built = []
build = libraries.build
def recording_build(source, isa):
    built.append([files[source], isa.name])
    return build(source, isa)
libraries.build = recording_build

def program(x, w, g, table, index, seed, a, b):
    conv = nn.conv2d(x, w, padding=1).relu()
    weight_grad = nn.conv2d_weight_grad(g, x, w.shape, padding=1)
    rows = gather.index_select(table, 0, index)
    return (conv, weight_grad, rows.tanh(), gather.add_rows(table * 0.5, index, rows.exp()),
            stax.rand(seed, (1000,)), nn.dropout(a, 0.5, seed), (a @ b).exp())

rng = np.random.default_rng(0)
arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 16, 20, 20), (24, 16, 3, 3), (2, 24, 20, 20))]
arrays += [rng.standard_normal((300, 8)).astype(np.float32), np.array([0, 299, 7, 7, 21], np.int64),
           np.array(5, np.int64), rng.standard_normal((32, 288)).astype(np.float32),
           rng.standard_normal((2, 288, 1024)).astype(np.float32)]
compiled = stax.compile(program, *arrays, isa=sys.argv[1])
names = ("x", "w", "g", "table", "index", "seed", "a", "b")
for got in (compiled(*arrays), compiled(**dict(zip(names, arrays)))):  # the compiled call, the Python wrapper
    for have, want in zip(got, evaluate(compiled.graph, *arrays, upcast=True)):
        np.testing.assert_allclose(have, want, rtol=2e-4, atol=2e-4)
print(json.dumps({"built": built, "externs": sorted({k.extern["op"] for k in compiled.kernels if k.extern}),
                  "narrow": "narrow_product" in compiled.source}))
"""


@pytest.mark.parametrize("level", LEVELS)
def test_every_extern_is_built_for_the_compiled_level(level):
    out = subprocess.run([sys.executable, "-c", SCRIPT, level], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.splitlines()[-1])
    width = ISA_LEVELS[level].width
    assert {isa for _, isa in found["built"]} == {level}, found["built"]
    blocked = width >= BLOCKED_MIN_LANES
    wanted = {"row_index", "random_draws"} | ({"direct_conv"} if blocked else set())
    narrow = width >= MIN_LANES
    if narrow:
        wanted.add("narrow_gemm")
    elif blas.gemm("float32") is not None:
        wanted.add("team_gemm")  # the product the narrow kernel takes at 16 lanes
    assert wanted <= {name for name, _ in found["built"]}, found["built"]
    assert ({"conv2d", "conv2d_weight"} <= set(found["externs"])) == blocked, found["externs"]
    assert found["narrow"] == narrow


def test_a_trace_chooses_the_convolutions_form_by_its_level_not_the_hosts(monkeypatch):
    """``stax.trace(..., isa=...)``: the blocked form where the level has vectors of 8 floats, the
    rule's other forms at ``none``, whatever this CPU has."""
    import numpy as np

    import stax
    from stax import target
    from stax.frontend.ops import nn

    monkeypatch.setattr(target, "_cpu_flags", lambda: pytest.fail("the trace asked for this CPU's flags"))
    x, w = np.zeros((2, 16, 20, 20), np.float32), np.zeros((24, 16, 3, 3), np.float32)
    for level in ISA_LEVELS:
        graph = stax.trace(lambda x, w: nn.conv2d(x, w, padding=1), x, w, isa=level)
        blocked = any(node.op == "conv2d" for node in graph.nodes.values())
        assert blocked == (ISA_LEVELS[level].width >= BLOCKED_MIN_LANES), level
