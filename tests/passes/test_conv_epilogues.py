"""The per-channel epilogues folded into blocked convolutions (stax.passes.conv_epilogues): which chains
fold, into what scale, shift and ReLU; the compiled programs against the numpy reference of the
traced (unfolded) graph under every fusion strategy; an eval-mode Conv2d + BatchNorm2d + ReLU from
torch against torch."""
from __future__ import annotations

import numpy as np
import pytest

import stax
from stax.environment import isa_from_env
from stax.frontend.ops import nn
from stax.passes.conv_epilogues import fold_conv_epilogues
from stax.frontend.ops.conv_forms import ConvForm, blocked_applies
from stax.frontend.tracing import trace

pytestmark = pytest.mark.skipif(not blocked_applies((1, 1), (1, 1), 1, "float32", isa_from_env()),
                                reason="the blocked form needs vector instructions, which this CPU lacks")

RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 8, 10, 19), dtype=np.float32)  # outputs 17 wide: rows with a tail
W = RNG.standard_normal((12, 8, 3, 3), dtype=np.float32)
B, M = RNG.standard_normal(12, dtype=np.float32), RNG.standard_normal(12, dtype=np.float32)
V = RNG.random(12, dtype=np.float32) + 0.5


def _conv(x, w):
    return nn.conv2d(x, w, form=ConvForm.BLOCKED)


def _channel(v):
    return v.reshape(1, -1, 1, 1)


def _batch_norm_relu(x, w, b, m, v):
    """Eval-mode batch norm as torch decomposes it: (y - mean) * rsqrt(var + eps) * weight + bias."""
    y = (_conv(x, w) - _channel(m)) * (_channel(v) + 1e-5).rsqrt() * _channel(v) + _channel(b)
    return y.relu()


#: programs of (x, w, b, m, v) and the epilogue their convolution gets: (scale, shift, relu)
FOLDED = {
    "bias": (lambda x, w, b, m, v: nn.conv2d(x, w, b, form=ConvForm.BLOCKED), (False, True, False)),
    "relu": (lambda x, w, b, m, v: _conv(x, w).relu(), (False, False, True)),
    "batch_norm_relu": (_batch_norm_relu, (True, True, True)),
    "scalar_scale": (lambda x, w, b, m, v: (_conv(x, w) * 0.5 + _channel(b)).relu(), (True, True, True)),
    "shift_then_scale": (lambda x, w, b, m, v: (_conv(x, w) - _channel(m)) * _channel(v), (True, True, False)),
}
#: programs whose chain stops early (the epilogue they keep), or where nothing folds (None)
STOPPED = {
    "relu_is_last": (lambda x, w, b, m, v: _conv(x, w).relu() * _channel(v), (False, False, True)),
    "not_per_channel": (lambda x, w, b, m, v: _conv(x, w) + _conv(x, w * 2.0).exp(), None),
    "read_twice": (lambda x, w, b, m, v: (lambda y: (y + _channel(b), y))(_conv(x, w)), None),
    "subtracted_from": (lambda x, w, b, m, v: _channel(m) - _conv(x, w), None),
    "stopped_at_a_full_tensor": (lambda x, w, b, m, v: (_conv(x, w) + _channel(b)) * _conv(x, w * 2.0),
                                 (False, True, False)),
}


def _epilogues(program) -> list[tuple[bool, bool, bool] | None]:
    """The epilogue of each blocked convolution of ``program``'s folded graph, None for none."""
    graph = fold_conv_epilogues(trace(program, X, W, B, M, V))
    convs = [n for n in graph.nodes.values() if n.op == "conv2d"]
    return [tuple(n.attr(k, False) for k in ("scale", "shift", "relu")) if n.attrs else None for n in convs]


@pytest.mark.parametrize("name", sorted(FOLDED) + sorted(STOPPED))
def test_the_chains_that_fold(name):
    program, epilogue = {**FOLDED, **STOPPED}[name]
    found = _epilogues(program)
    assert epilogue in found
    assert found.count(None) == len(found) - (epilogue is not None)  # a second convolution folds nothing


def test_the_folded_node_takes_the_chains_name_and_its_vectors():
    graph = trace(_batch_norm_relu, X, W, B, M, V)
    folded = fold_conv_epilogues(graph)
    (conv,) = [n for n in folded.nodes.values() if n.op == "conv2d"]
    assert conv.name == folded.outputs[0] == graph.outputs[0]
    assert len(conv.inputs) == 4 and all(folded.nodes[i].shape == (12,) for i in conv.inputs[2:])
    assert not any(n.op in ("relu", "sub") and n.shape == conv.shape for n in folded.nodes.values())


def test_a_graph_without_a_chain_is_returned_as_it_is():
    graph = trace(lambda x, w: _conv(x, w) + _conv(x, w), X, W)
    assert fold_conv_epilogues(graph) is graph


@pytest.mark.parametrize("fusion", ["greedy", "none", "cpsat"])
@pytest.mark.parametrize("name", sorted(FOLDED) + sorted(STOPPED))
def test_folded_programs_match_the_reference_of_the_traced_graph(check, name, fusion):
    program, epilogue = {**FOLDED, **STOPPED}[name]
    compiled = check(program, X, W, B, M, V, rtol=1e-4, atol=1e-3, fusion=fusion)
    assert "stax::direct_conv(" in compiled.source
    assert compiled.graph.nodes.keys() == trace(program, X, W, B, M, V).nodes.keys()  # the traced graph, unfolded


def test_a_scalar_shared_by_convolutions_of_two_widths(check):
    """The same traced constant scales two convolutions of 12 and 24 output channels: each gets a
    vector of its own width."""
    w2 = RNG.standard_normal((24, 12, 3, 3), dtype=np.float32)

    def program(x, w, v):
        return (_conv((_conv(x, w) * 0.5).relu(), v) * 0.5).relu()
    folded = fold_conv_epilogues(trace(program, X, W, w2))
    convs = [n for n in folded.nodes.values() if n.op == "conv2d"]
    assert [folded.nodes[n.inputs[2]].shape for n in convs] == [(12,), (24,)]
    compiled = check(program, X, W, w2, rtol=1e-4, atol=1e-3)
    assert [k.extern["attrs"] for k in compiled.kernels if k.extern] == [{"relu": True, "scale": True}] * 2


def test_whole_vector_rows_and_threads(check):
    """Outputs 16 wide (rows of whole vectors at 8 and 16 lanes), on two threads."""
    x = RNG.standard_normal((3, 8, 18, 18), dtype=np.float32)
    check(_batch_norm_relu, x, W, B, M, V, rtol=1e-4, atol=1e-3, threads=2)


def test_an_eval_mode_conv_batch_norm_relu_module_matches_torch():
    torch = pytest.importorskip("torch", reason="the comparison with torch needs torch")
    from stax.torch.capture import import_module
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU())
    with torch.no_grad():  # running statistics that are not the defaults
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    net.eval()
    program = import_module(net, torch.randn(4, 16, 32, 32))
    compiled = program.compile()
    assert [k.extern["attrs"] for k in compiled.kernels if k.extern] == [{"relu": True, "scale": True, "shift": True}]
    got = compiled(*program.arguments())
    np.testing.assert_allclose(got, program.expected[0], rtol=1e-4, atol=1e-4)
