"""``torch.compile(model, backend="stax")`` (stax.torch.backend): outputs, gradients and
optimizer steps agree with eager torch across graph breaks, new shapes recompile, options reach
stax, an op stax lacks runs eagerly with its warning, and the backend is found by name."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs torch: pip install 'stax[torch]'")

from stax.torch import backend as torch_backend  # noqa: E402
from stax.decisions import Schedule  # noqa: E402
from stax.torch.backend import StaxFallbackWarning  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles afresh (dynamo's cache emptied) and sees only its own graphs."""
    torch._dynamo.reset()
    torch_backend.reset()
    yield
    torch._dynamo.reset()
    torch_backend.reset()  # no summary at exit for a test's own fallbacks


class Branchy(torch.nn.Module):
    """A branch on a tensor's value: dynamo breaks the graph there (two regions). The forward's
    constants are folded while AOTAutograd's fake mode is on (the backward's, later, when it is off)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(6, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.first(x * (torch.arange(6) % 3 != 1)) + torch.full((8,), 0.5))  # constants stax folds
        if h.sum() > 0:
            h = h * 2
        return self.second(h).softmax(-1)


def graphs(kind: str | None = None) -> list[torch_backend.CompiledGraph]:
    return [g for g in torch_backend.compiled_graphs() if kind is None or g.kind == kind]


def assert_close(got, want, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def test_graph_break_gives_eager_outputs_and_gradients():
    torch.manual_seed(0)
    model, x, weights = Branchy(), torch.randn(4, 6), torch.randn(4, 3)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stax")
    out = compiled(x)
    (out * weights).sum().backward()
    want = eager(x)
    (want * weights).sum().backward()
    assert_close(out, want, "output")
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_close(p.grad, q.grad, f"gradient of {name}")
    assert len({g.region for g in graphs()}) == 2, "dynamo should hand over two regions (a graph break)"
    assert [g.kind for g in graphs()].count("forward") == 2 and len(graphs("backward")) == 2
    assert all(not g.fallback and g.schedule is not None for g in graphs()), torch_backend.summary()


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    scale = max(float(reference.abs().max()), 1e-30)
    return float((got.double() - reference.double()).abs().max()) / scale


def test_three_optimizer_steps_match_eager_and_float64():
    """Conv, batch norm (running statistics updated in place by AOTAutograd's epilogue), ReLU, a
    graph break and a linear layer, trained 3 SGD-with-momentum steps: every parameter and buffer
    agrees with eager float32, and is as close to a float64 eager run as eager float32 is."""
    torch.manual_seed(1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                                torch.nn.ReLU())
            self.head = torch.nn.Linear(4 * 5 * 5, 5)

        def forward(self, x):
            h = self.features(x)
            torch._dynamo.graph_break()
            return self.head(h.flatten(1))
    net, x, target = Net(), torch.randn(3, 3, 5, 5), torch.tensor([0, 3, 1])

    def train(compiled: bool, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        model = copy.deepcopy(net).to(dtype)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        forward = torch.compile(model, backend="stax") if compiled else model
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(forward(x.to(dtype)), target).backward()
            optimizer.step()
        return model.state_dict()
    ours, eager, exact = train(True, torch.float32), train(False, torch.float32), train(False, torch.float64)
    assert not any(g.fallback for g in graphs()) and len(graphs("backward")) == 2, torch_backend.summary()
    for name, value in ours.items():
        if not value.is_floating_point():
            assert torch.equal(value, eager[name]), name
            continue
        stax_error, eager_error = relative_error(value, exact[name]), relative_error(eager[name], exact[name])
        message = f"{name}: stax vs float64 {stax_error:.2e}, eager float32 vs float64 {eager_error:.2e}"
        assert stax_error <= 2 * eager_error + 1e-6, message
        assert relative_error(value, eager[name]) <= 1e-5, message


def test_a_compiled_adam_step_matches_eager():
    """torch.compile of the optimizer's step too (dynamo rewrites Adam's addcmul_ into prims.fma):
    3 steps. The compiled step computes its bias corrections in float32 tensors where eager's
    takes Python floats, so the reference for stax's error against float64 is the same graphs
    run by torch's own kernels (the aot_eager backend); stax's parameters are eager's too."""
    torch.manual_seed(2)
    net, x, target = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)), \
        torch.randn(4, 8), torch.randn(4, 2)

    def train(backend: str | None, dtype: torch.dtype) -> list[torch.Tensor]:
        model = copy.deepcopy(net).to(dtype)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        step = torch.compile(optimizer.step, backend=backend) if backend else optimizer.step
        forward = torch.compile(model, backend=backend) if backend else model
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(forward(x.to(dtype)), target.to(dtype)).backward()
            step()
        return [p.detach() for p in model.parameters()]
    ours, traced, eager = train("stax", torch.float32), train("aot_eager", torch.float32), train(None, torch.float32)
    exact = train(None, torch.float64)
    assert sorted(g.kind for g in graphs()) == ["backward", "forward", "inference"], torch_backend.summary()
    assert not any(g.fallback for g in graphs()), torch_backend.summary()
    for i, (value, reference) in enumerate(zip(ours, exact)):
        errors = [relative_error(v, reference) for v in (value, traced[i], eager[i])]
        message = "parameter {}: against float64, stax {:.2e}, the graphs run by torch {:.2e}, eager {:.2e}".format(
            i, *errors)
        assert errors[0] <= 2 * errors[1] + 1e-7, message
        assert relative_error(value, eager[i]) <= 1e-5, message


@pytest.mark.parametrize("dynamic", [False, None, True])
def test_a_new_shape_recompiles(dynamic):
    """Each new shape compiles, whichever way dynamo treats sizes (static guards, automatic
    dynamic, symbolic from the start: stax specializes those per shape), and is right; a shape
    compiled before compiles nothing more (but under automatic dynamic, where dynamo itself
    recompiles the graph once its second size has changed)."""
    def fn(x):
        return (x.exp() * 2).sum(-1)
    compiled = torch.compile(fn, backend="stax", dynamic=dynamic)
    for shape in [(2, 3), (4, 3), (5, 7)]:
        x = torch.randn(shape)
        assert_close(compiled(x), fn(x), f"shape {shape}")
        count = len(graphs())
        assert graphs()[-1].inputs[-1][0] == shape, f"no compilation of shape {shape}"
        compiled(torch.randn(shape))
        assert len(graphs()) == count, f"shape {shape} compiled again"
    x = torch.randn(2, 3)
    assert_close(compiled(x), fn(x), "shape (2, 3) again")
    assert all(g.compiled is not None for g in graphs()), torch_backend.summary()
    assert len(graphs()) == (3 if dynamic is not None else 4), [g.inputs for g in graphs()]


def test_symbolic_sizes_train_per_shape():
    """dynamic=True hands over symbolic sizes: each shape's forward and backward are stax's, and
    the gradients are eager's."""
    weight = torch.randn(3, requires_grad=True)

    def fn(x):
        return (x.tanh() * weight).sum(-1).square().mean()
    compiled = torch.compile(fn, backend="stax", dynamic=True)
    for rows in (2, 5):
        x = torch.randn(rows, 3)
        weight.grad = None
        compiled(x).backward()
        ours = weight.grad
        weight.grad = None
        fn(x).backward()
        assert_close(ours, weight.grad, f"gradient at {rows} rows")
    assert sorted(g.kind for g in graphs()) == ["backward", "backward", "forward", "forward"], torch_backend.summary()
    assert all(g.compiled is not None for g in graphs()), torch_backend.summary()


@torch.library.custom_op("stax_backend_test::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    """An op of the test's own, so no translation of stax's can exist for it."""
    return x * x * x


@cube.register_fake
def _(x):
    return torch.empty_like(x)


def _cube_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


cube.register_autograd(lambda ctx, grad: grad * 3 * ctx.saved_tensors[0] ** 2, setup_context=_cube_setup)


def test_an_op_stax_lacks_runs_eagerly_with_its_warning():
    def fn(x):
        return torch.cos(cube(x.sin())).sum()
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.warns(StaxFallbackWarning, match=r"forward graph 0 runs eagerly: .*stax_backend_test\.cube") as seen:
        loss = torch.compile(fn, backend="stax")(x)
    assert len(seen) == 1 and "\n" not in str(seen[0].message)
    loss.backward()
    ours = x.grad
    x.grad = None
    want = fn(x)
    want.backward()
    assert_close(loss, want, "loss")
    assert_close(ours, x.grad, "gradient")
    forward, backward = graphs("forward")[0], graphs("backward")[0]
    assert forward.fallback and forward.compiled is None and forward.op == "stax_backend_test.cube.default"
    assert not backward.fallback, "the backward (the cube's gradient is translatable) should be stax's"
    assert "1 graphs compiled (1 backward); 1 ran eagerly (stax_backend_test.cube.default: 1)" in \
        torch_backend.summary()


def test_a_call_stax_refuses_runs_eagerly_and_gives_torchs_error():
    """An integer division by zero: stax's kernel refuses the call (KernelError), which then runs
    eagerly, so the caller gets torch's own error; the next call is stax's again."""
    def fn(x, y):
        return (x // y) + 1
    compiled, x = torch.compile(fn, backend="stax"), torch.tensor([4, 9, 7])
    assert torch.equal(compiled(x, torch.tensor([2, 3, 5])), fn(x, torch.tensor([2, 3, 5])))
    with pytest.warns(StaxFallbackWarning, match="a call of inference graph 0 runs eagerly: integer division by zero"):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            compiled(x, torch.tensor([2, 0, 5]))
    assert torch.equal(compiled(x, torch.tensor([1, 3, 7])), fn(x, torch.tensor([1, 3, 7])))
    (graph,) = graphs()
    assert graph.eager_calls == 1 and not graph.fallback
    assert "1 calls of compiled graphs ran eagerly after a stax error at run time" in torch_backend.summary()


def test_a_region_aotautograd_fails_on_runs_eagerly(monkeypatch):
    """Whatever fails before stax is handed a graph (here a fault put into the decompositions'
    table) leaves dynamo's graph to run eagerly, with its warning, instead of raising."""
    def broken():
        raise RuntimeError("no decompositions today")
    monkeypatch.setattr(torch_backend, "_backend_decompositions", broken)

    def fn(x):
        return x.sin() * 2
    x = torch.randn(5)
    with pytest.warns(StaxFallbackWarning, match="region graph 0 runs eagerly: RuntimeError in AOTAutograd: no "):
        out = torch.compile(fn, backend="stax")(x)
    assert torch.equal(out, fn(x))
    assert [(g.kind, g.op) for g in graphs()] == [("region", "RuntimeError in AOTAutograd")]


def test_options_reach_stax():
    def fn(x, y):
        return ((x * y).relu() + 1).sum(-1) * (x - y).exp().mean()
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    counts = {}
    for fusion in ("none", "greedy"):
        torch._dynamo.reset()
        out = torch.compile(fn, backend="stax", options={"fusion": fusion, "threads": 1, "isa": "none"})(x, y)
        assert_close(out, fn(x, y), f"fusion={fusion}")
        (graph,) = graphs()[-1:]
        assert (graph.schedule.options.fusion, graph.schedule.options.threads, graph.schedule.options.isa) == \
            (fusion, 1, "none")
        counts[fusion] = len(graph.compiled.block_kernels)
    assert counts["none"] > counts["greedy"], counts
    torch._dynamo.reset()
    with pytest.warns(StaxFallbackWarning, match="mode='max-autotune' is Inductor's; stax ignores it"):
        assert_close(torch.compile(fn, backend="stax", mode="max-autotune")(x, y), fn(x, y), "mode='max-autotune'")
    with pytest.raises(Exception, match=r"no option 'fusoin'; did you mean 'fusion'\?"):
        torch.compile(fn, backend="stax", options={"fusoin": "none"})(x, y)


def test_a_graph_keeps_its_schedule_to_save_replay_or_recompile(tmp_path):
    def fn(x):
        return (x.sigmoid() * x).sum(0) + x.mean()
    x = torch.randn(8, 4)
    compiled = torch.compile(fn, backend="stax")
    compiled(x)
    (graph,) = graphs()
    greedy_kernels = len(graph.compiled.block_kernels)
    graph.schedule.save(tmp_path / "graph.json")
    graph.recompile(fusion="none")
    assert len(graph.compiled.block_kernels) > greedy_kernels
    assert_close(compiled(x), fn(x), "after recompiling with fusion='none'")
    graph.rebuild(Schedule.load(tmp_path / "graph.json"))
    assert len(graph.compiled.block_kernels) == greedy_kernels
    assert_close(compiled(x), fn(x), "after rebuilding the saved schedule")


def test_the_backend_is_found_by_name_without_importing_stax(tmp_path):
    script = textwrap.dedent("""
        import sys
        import torch
        before = "stax" in sys.modules
        out = torch.compile(lambda x: (x.sin() * 2).sum(), backend="stax")(torch.ones(3))
        graphs = sys.modules["stax.torch.backend"].compiled_graphs()
        print(before, float(out), len(graphs), graphs[0].compiled is not None)
        """)
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    before, value, count, compiled = done.stdout.split()
    assert before == "False", "the script imported stax before torch.compile looked the backend up"
    assert (count, compiled) == ("1", "True"), done.stdout
    assert abs(float(value) - 6 * float(torch.sin(torch.tensor(1.0)))) < 1e-5
