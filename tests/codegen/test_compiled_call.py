"""The graph's compiled call (stax/codegen/entry.py): the wrapper's work in C++, taking only
inputs of exactly the compiled layout and handing every other call to the Python wrapper."""
from __future__ import annotations

import inspect
import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stax
from stax.frontend.ops import conv_forms as conv_gemm
from stax.kernels import narrow_gemm
from stax.frontend.ops import nn
from stax.compiler import compile_graph
from stax.errors import CallError, KernelError, StaxError
from stax.frontend.tracing import parameter_names
from stax.codegen.wrapper import MemoryTracker, bind_arguments
from stax.runtime.allocator import allocator
from stax.reference import evaluate


def _x(*shape) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _compiled_call(compiled):
    """The compiled call behind ``compiled`` (held in ``one_blas_thread`` when its products call
    OpenBLAS: wrapper.py's build_wrapper)."""
    return getattr(compiled._call, "compiled_call", compiled._call)


def _python_wrapper(compiled) -> types.FunctionType:
    return _compiled_call(compiled).__self__[0].python_call()  # the compiled call's state: its fallback comes first


def test_kernels_and_products_are_called_in_cpp_and_a_pooled_plan_in_python():
    x, w = _x(8, 16), _x(16, 4)
    compiled = stax.compile(lambda t: (t - t.amax(-1, keepdim=True)).exp(), x)
    assert isinstance(compiled._call, types.BuiltinFunctionType)
    assert isinstance(_python_wrapper(compiled), types.FunctionType)
    np.testing.assert_allclose(compiled(x), np.exp(x - x.max(-1, keepdims=True)), rtol=1e-6)
    with_matmul = stax.compile(lambda a, b: a @ b + 1, x, w)
    assert isinstance(_compiled_call(with_matmul), types.BuiltinFunctionType)
    assert _calls_through_python(with_matmul, x, w) == 0
    np.testing.assert_allclose(with_matmul(x, w), x @ w + 1, rtol=1e-5)
    pooled = stax.compile(lambda a, b: a @ b + 1, x, w, memory_plan="pool")
    assert isinstance(pooled._call, types.FunctionType) and not hasattr(pooled._call, "compiled_call")


def test_inputs_of_another_layout_go_to_the_wrapper_which_accepts_or_explains_them():
    x = _x(8, 16)
    compiled = stax.compile(lambda t: t * 2 + 1, x)
    with pytest.raises(CallError, match="strides"):
        compiled(np.asfortranarray(x))
    with pytest.raises(CallError, match="shape"):
        compiled(x[:4])
    with pytest.raises(CallError, match="dtype"):
        compiled(x.astype(np.float64))
    with pytest.raises(CallError, match="numpy array"):
        compiled(x.tolist())
    with pytest.raises(CallError, match=r"takes 1 arrays \(t\), by position or by name: too many"):
        compiled(x, x)

    class Tagged(np.ndarray):
        pass
    np.testing.assert_array_equal(compiled(x.view(Tagged)), x * 2 + 1)  # a subclass: the wrapper runs it


@pytest.mark.parametrize("pooled", [False, True])
def test_inputs_may_be_passed_by_the_traced_functions_parameter_names(pooled):
    """By name, by position or both, on the compiled call and on the Python wrapper (a pooled
    memory plan): the same values; a name that is not an input, a missing or a doubled input are
    errors naming the inputs; layout errors name the parameter."""
    def program(x, w, scale=2.0):
        return (x @ w) * scale + 1
    x, w = _x(8, 8), _x(8, 8)
    compiled = stax.compile(program, x, w, memory_plan="pool" if pooled else "wrapper")
    assert isinstance(_compiled_call(compiled), types.FunctionType if pooled else types.BuiltinFunctionType)
    want = program(x, w)
    for got in (compiled(x, w), compiled(x=x, w=w), compiled(w=w, x=x), compiled(x, w=w)):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(CallError, match=r"no input 'scale'; it takes x, w \(the traced function's other parameters"):
        compiled(x, w, scale=3.0)
    with pytest.raises(CallError, match=r"takes 2 arrays \(x, w\), by position or by name: missing a required argument: 'w'"):
        compiled(x=x)
    with pytest.raises(CallError, match="multiple values for argument 'x'"):
        compiled(x, x=x)
    with pytest.raises(CallError, match="argument w has shape"):
        compiled(x=x, w=w[:4])
    star = stax.compile(lambda *arrays: arrays[0] - arrays[1], x, w)
    np.testing.assert_array_equal(star(arg1=w, arg0=x), x - w)


def test_the_names_of_the_inputs_are_the_positional_parameters_then_unique_arg_names():
    assert parameter_names(lambda x, w, scale=2.0: x, 2) == ("x", "w")
    assert parameter_names(lambda arg1, *rest, key=None: arg1, 3) == ("arg1", "arg1_", "arg2")
    assert parameter_names(max, 2) == ("arg0", "arg1")  # a builtin without a signature to read
    graph = stax.trace(lambda a, b: a + b, _x(4), _x(4))
    for wrong in (("a",), ("a", "a"), ("a", "b", "c")):
        with pytest.raises(StaxError, match="must name each of the graph's 2 inputs once"):
            compile_graph(graph, None, wrong)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.permutations(range(n)))))
def test_any_split_of_the_inputs_between_position_and_name_binds_them_in_order(case):
    """bind_arguments: the first k inputs by position and the others by name, in any order, give
    the inputs in their order; the same call with an input named twice, or one too few, is an error."""
    n, k, order = case
    parameters = tuple(f"p{i}" for i in range(n))
    values = tuple(object() for _ in range(n))
    named = {parameters[i]: values[i] for i in order if i >= k}
    assert bind_arguments(values[:k], named, parameters) == values
    if k > 0:
        with pytest.raises(CallError, match="multiple values"):
            bind_arguments(values[:k], {**named, parameters[0]: values[0]}, parameters)
    last = parameters[-1]  # passed by position when k == n, else by name
    with pytest.raises(CallError, match=f"missing a required argument: '{last}'"):
        if k == n:
            bind_arguments(values[:-1], {}, parameters)
        else:
            bind_arguments(values[:k], {name: value for name, value in named.items() if name != last}, parameters)


def test_a_read_only_input_updated_in_place_is_refused():
    def step(p, g):
        p.sub_(g * 0.5)
        return p * 1
    p, g = _x(4, 8), _x(4, 8)
    compiled = stax.compile(step, p.copy(), g)
    frozen = p.copy()
    frozen.flags.writeable = False
    with pytest.raises(CallError, match="read-only"):
        compiled(frozen, g)
    updated = p.copy()
    np.testing.assert_allclose(compiled(updated, g), p - g * 0.5, rtol=1e-6)
    np.testing.assert_allclose(updated, p - g * 0.5, rtol=1e-6)


def test_a_kernel_error_raises_from_the_compiled_call():
    i = np.arange(1, 9, dtype=np.int32)
    compiled = stax.compile(lambda a, b: a // b, i, i)
    assert isinstance(compiled._call, types.BuiltinFunctionType)
    with pytest.raises(KernelError, match="division by zero"):
        compiled(i, np.zeros(8, np.int32))


def test_several_outputs_the_peak_and_the_allocator_match_the_python_wrapper():
    """The same outputs, the same recorded peak and the same allocator traffic from the compiled
    call and from the Python wrapper it stands for; no reference is leaked."""
    x = _x(16, 64)
    compiled = stax.compile(lambda t: (t.exp().sum(-1), t * 3, (t * 3).amax(-1)), x)
    python = _python_wrapper(compiled)
    want = python(x)
    python_peak = compiled.memory.peak
    got = compiled(x)
    assert len(got) == len(want) == 3 and compiled.memory.peak == python_peak == compiled.memory_plan.peak
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    del got, want, a, b
    references, hits = sys.getrefcount(x), allocator.stats.hits
    for _ in range(50):
        compiled(x)
    assert sys.getrefcount(x) == references
    if compiled.schedule.options.caching_allocator:
        assert allocator.stats.hits - hits == 50 * len(compiled.memory_plan.storage)


def test_separate_compiles_of_one_graph_keep_their_own_trackers():
    """Both compiles load the same library; each compiled call has its own state."""
    x = _x(4, 8)
    first, second = (stax.compile(lambda t: t + 1, x) for _ in range(2))
    assert first.library_path == second.library_path
    first(x)
    first(x)
    second(x)
    assert (first.memory.calls, second.memory.calls) == (2, 1)


def test_calling_the_function_is_calling_its_call_and_its_signature_says_so():
    """CompiledFunction's call goes straight to ``_call`` (no Python frame between), and
    introspection shows its inputs, by the traced function's names."""
    x = _x(4, 8)
    compiled = stax.compile(lambda t: t * 2, x)
    np.testing.assert_array_equal(compiled(x), x * 2)
    seen = []
    compiled._call = lambda *arrays: seen.append(arrays) or "called"
    assert compiled(x, x) == "called" and seen == [(x, x)]
    assert str(inspect.signature(compiled)) == "(t: numpy.ndarray)"
    assert "kernel_source" in inspect.signature(stax.CompiledFunction).parameters  # the class: its constructor


def test_the_compiled_call_refuses_a_tracker_it_cannot_write(monkeypatch):
    """graph_set_up checks once that the tracker's counts are an int64 numpy pair, which every
    call then writes in place."""
    init = MemoryTracker.__init__

    def int32_counts(self, held=0):
        init(self, held)
        self.counts = self.counts.astype(np.int32)
    monkeypatch.setattr(MemoryTracker, "__init__", int32_counts)
    with pytest.raises(TypeError, match="int64 numpy array of 2"):
        stax.compile(lambda t: t + 1, _x(4, 8))


def test_the_compiled_call_hands_out_a_dropped_output_again_and_counts_it():
    """The allocator's hit, taken in C++ (stax_py.h's take_pooled): the array the caller dropped
    comes back, counted as a hit; one still held is not handed out; a dropped array its user
    reshaped in place is made anew by the allocator's own path; nothing is pooled by a function
    compiled with the allocator off."""
    allocator.empty_cache()  # no idle storage of this size left by earlier tests
    x = _x(8, 16)
    compiled = stax.compile(lambda t: t * 2 + 1, x, caching_allocator=True)
    first = compiled(x)
    first_id, hits, misses = id(first), allocator.stats.hits, allocator.stats.misses
    del first
    again = compiled(x)
    assert id(again) == first_id and allocator.stats.hits == hits + 1
    held = compiled(x)
    assert not np.shares_memory(held, again) and allocator.stats.misses == misses + 1
    again.shape = (16, 8)
    del again
    remade = compiled(x)
    assert remade.shape == (8, 16) and allocator.stats.hits == hits + 2
    np.testing.assert_array_equal(remade, x * 2 + 1)
    uncached = stax.compile(lambda t: t * 2 + 1, x, caching_allocator=False)
    del remade, held
    off = uncached(x)
    assert all(not np.shares_memory(off, s.memory) for pool in allocator.pools.values() for s in pool)
    assert allocator.stats.hits == hits + 2 and allocator.stats.misses == misses + 1


def test_one_build_of_the_helpers_serves_every_level_whichever_comes_first():
    """The compiled calls' helpers are loaded once per process, with global symbols, for every
    later kernel library: built for the ``none`` level, an AVX-512 compile coming first on a CPU
    without AVX-512 leaves nothing an AVX2 call cannot run."""
    code = ("import os, numpy as np, stax\n"
            "x = np.ones((4, 8), np.float32)\n"
            "stax.compile(lambda t: t * 2, x, isa='avx512')\n"
            "print(float(stax.compile(lambda t: t * 3, x, isa='avx2')(x).sum()))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["96.0"]


def _calls_through_python(compiled, *args) -> int:
    """How many kernel calls the Python wrapper made while ``compiled`` ran on ``args`` (0 when
    the compiled call took it)."""
    scope = _python_wrapper(compiled).__globals__
    name = next(k.name for k in compiled.kernels if not k.extern)
    kernel, count = scope[name], []
    scope[name] = lambda *a: (count.append(1), kernel(*a))[1]
    try:
        compiled(*args)
    finally:
        scope[name] = kernel
    return len(count)


def test_the_compiled_call_reads_empty_and_read_only_arrays_as_numpy_lays_them_out():
    """The compiled call reads an array's data, shape, strides, dtype and flags from the array
    object: it takes a graph on empty arrays (numpy gives them zero strides) and a read-only input
    the graph does not update, and hands a read-only input the graph updates to the wrapper."""
    empty = np.zeros((0, 5), np.float32)
    on_empty = stax.compile(lambda t: t * 2 + 1, empty)
    assert _calls_through_python(on_empty, empty) == 0 and on_empty(empty).shape == (0, 5)
    x = _x(4, 8)
    x.flags.writeable = False
    reads = stax.compile(lambda t: t * 3, x)
    assert _calls_through_python(reads, x) == 0
    np.testing.assert_array_equal(reads(x), x * 3)
    assert _calls_through_python(reads, _x(4, 8)[:, ::-1].copy()) == 0
    subclass = type("Subclass", (np.ndarray,), {})
    assert _calls_through_python(reads, _x(4, 8).view(subclass)) == 1  # not exactly ndarray: the wrapper's
    updates = stax.compile(lambda t: t.add_(1), _x(4, 8))
    with pytest.raises(CallError, match="read-only|writ"):
        updates(x)


@pytest.mark.parametrize("case", ["small", "narrow", "narrow_gradient", "batched", "broadcast_weight", "sum",
                                  "empty", "float64", "blocked_conv", "blocked_conv_flat_weight",
                                  "blocked_conv_weight_grad"])
def test_products_run_in_the_compiled_call_and_match_the_python_wrapper(case):
    """Every route of stax.kernels.matmul's plan_product is called from C++ (none through Python), with
    the results of the Python wrapper's calls of the same plan and of numpy: a small product on
    the team gemm; a weight times a batch of columns and a weight gradient (narrow_gemm's
    kernel at an ISA level of 16 lanes, else the team gemm); batches, a weight broadcast over a batch,
    a sum of products accumulating into one output, an empty product and float64; and a 3x3
    convolution on stax.kernels.direct_conv's blocked kernel (at a level with vector instructions), also
    of a weight read in place as a reshape of a flat input, and its weight gradient."""
    rng = np.random.default_rng(3)
    programs = {
        "small": (lambda a, b: a @ b + 1, [(8, 16), (16, 4)]),
        "narrow": (lambda a, b: (a @ b).relu(), [(32, 288), (2, 288, 1024)]),
        "narrow_gradient": (lambda g, c: g @ c.t() * 2, [(32, 2048), (288, 2048)]),
        "batched": (lambda a, b: (a @ b).exp(), [(4, 8, 16), (4, 16, 8)]),
        "broadcast_weight": (lambda a, b: a @ b - 1, [(8, 16), (3, 16, 40)]),
        "sum": (lambda a, b, c: a @ b + (a * 2) @ c, [(16, 24), (24, 8), (24, 8)]),
        "empty": (lambda a, b: a @ b + 1, [(8, 0), (0, 4)]),
        "float64": (lambda a, b: (a @ b).t() * 2, [(8, 16), (16, 12)]),
        "blocked_conv": (lambda x, w: nn.conv2d(x, w, padding=1).relu(), [(4, 16, 20, 20), (24, 16, 3, 3)]),
        "blocked_conv_flat_weight": (lambda x, w: nn.conv2d(x, w.reshape(24, 16, 3, 3), padding=1),
                                     [(4, 16, 20, 20), (24 * 16 * 9,)]),
        "blocked_conv_weight_grad": (lambda g, x: nn.conv2d_weight_grad(g.relu(), x, (24, 16, 3, 3), padding=1) * 2,
                                     [(4, 24, 20, 20), (4, 16, 20, 20)]),
    }
    fn, shapes = programs[case]
    dtype = np.float64 if case == "float64" else np.float32
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    compiled = stax.compile(fn, *arrays)
    assert isinstance(_compiled_call(compiled), types.BuiltinFunctionType), case
    assert _calls_through_python(compiled, *arrays) == 0
    got = compiled(*arrays)
    np.testing.assert_array_equal(got, _python_wrapper(compiled)(*arrays))
    np.testing.assert_allclose(got, evaluate(compiled.graph, *arrays, upcast=True)[0], rtol=2e-4, atol=2e-4)
    if case.startswith("narrow"):
        wide = compiled.isa.width >= narrow_gemm.MIN_LANES
        helper = "narrow_gradient_product" if case == "narrow_gradient" else "narrow_product"
        assert (helper in compiled.source) == wide and ("team_product" in compiled.source) == (not wide)
    if case.startswith("blocked_conv"):
        blocked = compiled.isa.width >= conv_gemm.BLOCKED_MIN_LANES
        helper = "stax::direct_conv_weight_grad(" if case.endswith("weight_grad") else "stax::direct_conv("
        assert (helper in compiled.source) == blocked


@pytest.mark.parametrize("program", [lambda a, b: ((a @ b).exp() @ b).t() * 2,
                                     lambda a, b: (((a @ b) @ b) @ b).reshape(4, 32)])
def test_an_output_in_a_reused_storage_of_another_shape_is_returned_in_its_own_shape(program):
    """A buffer in the storage of another (memory/plan.py's reuse and inplace) holds that
    buffer's array in the compiled call, which hands it out reshaped: the values, the shape, the
    peak and the allocator's traffic of the Python wrapper, and no reference leaked."""
    x, w = _x(8, 16), _x(16, 16)
    compiled = stax.compile(program, x, w)
    assert {s.kind for s in compiled.memory_plan.storage.values()} > {"alloc"}
    want = _python_wrapper(compiled)(x, w)
    python_peak = compiled.memory.peak
    got = compiled(x, w)
    assert got.shape == want.shape and compiled.memory.peak == python_peak
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, evaluate(compiled.graph, x, w, upcast=True)[0], rtol=1e-4)
    del got, want
    references = sys.getrefcount(x), sys.getrefcount(w)
    for _ in range(20):
        compiled(x, w)
    assert (sys.getrefcount(x), sys.getrefcount(w)) == references


def test_a_value_returned_twice_is_one_array_from_the_compiled_call():
    """As from the Python wrapper: the same array object at both places of the outputs (an LSTM
    cell's training step returns its cell state's gradient so)."""
    x = _x(4, 8)
    compiled = stax.compile(lambda t: (t * 2, t.exp(), t * 2), x)
    assert _calls_through_python(compiled, x) == 0
    first, other, again = compiled(x)
    assert first is again
    np.testing.assert_allclose(first, x * 2)
    np.testing.assert_allclose(other, np.exp(x), rtol=1e-6)
