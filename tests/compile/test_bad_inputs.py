"""The bad-input corpus items no other test file covers: each error has stax's type and names the
problem.  (Unsupported ops, dtype and broadcasting mismatches, bad return values, call-time
mismatches, integer division by zero and malformed config files are in tests/frontend/test_frontend.py,
tests/compile/test_call_errors.py, tests/scheduler/test_problems.py, tests/instances/test_programs.py and
tests/experiments/sweep/test_sweep.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import stax
import stax.compiler
from instances import store
from instances.dags import fusion_problem, layered_dag, order_problem
from stax.errors import BuildError, InstanceFormatError, InvalidScheduleError, StaxError
from stax.scheduler.problems import ORDER_FORMAT, FusionProblem, OrderProblem
from stax.runtime import build as runtime
from stax.runtime.build import build
from stax.target import Isa

X = np.arange(24, dtype=np.float32).reshape(4, 6)


def two_kernels(x):
    return x.sum(-1, keepdim=True) * x.t().sum(0)


# --- gcc failures ---------------------------------------------------------------------------------

def test_gcc_failure_shows_the_compiler_message_and_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("STAX_CACHE_DIR", str(tmp_path))
    real = stax.compiler.translation_unit
    monkeypatch.setattr(stax.compiler, "translation_unit",
                        lambda *args, **kwargs: real(*args, **kwargs) + "\n#error stax test: broken unit\n")
    with pytest.raises(BuildError, match="g\\+\\+ failed") as info:
        stax.compile(lambda a: a * 2, X)
    message = str(info.value)
    assert "#error stax test: broken unit" in message
    source = Path(message.split("(source: ")[1].split(")")[0])
    assert source.exists() and "broken unit" in source.read_text()
    assert not list(tmp_path.rglob("*.so")), "a failed build leaves no library behind"


def test_bad_compiler_flag_is_a_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("STAX_CACHE_DIR", str(tmp_path))
    with pytest.raises(BuildError, match="-mno-such-flag"):
        build("int f() { return 1; }\n", Isa("bogus", 1, ("-mno-such-flag",)))


def test_a_missing_compiler_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("STAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ there
    runtime._compiler_version.cache_clear()
    try:
        with pytest.raises(BuildError, match="no g\\+\\+ on PATH.*apt-get install g\\+\\+"):
            build("int f() { return 1; }\n", Isa("plain", 1, ()))
    finally:
        runtime._compiler_version.cache_clear()


# --- compile options ------------------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    ({"fusion_options": {}}, "no option 'fusion_options'; did you mean 'fusion_params'"),
    ({"threads": 0}, "threads=0: give a whole number of threads, at least 1"),
    ({"threads": 1.5}, "threads=1.5"),
    ({"threads": True}, "threads=True"),
    ({"isa": "sse9"}, "isa='sse9' is not a level; use one of avx512, avx2, none"),
    ({"isa": 2}, "isa must be a level's name"),
    ({"cost_model": {}}, "cost_model must be a stax.CostModel, got dict"),
    ({"rule": "tpu"}, "rule='tpu': use 'cpu-split'"),
    ({"memory_plan": "heap"}, "memory_plan='heap': use 'wrapper'"),
    ({"fusion": "cpsat", "fusion_params": {"time_limt": 1}}, "fusion_params \\['time_limt'\\] do not fit fusion "
                                                              "strategy 'cpsat'.*it takes time_limit, workers"),
    ({"order_params": {"depth": 2}}, "order_params \\['depth'\\] do not fit order strategy 'best'.*no parameters"),
    ({"fusion": lambda p: [p.nodes], "fusion_params": {"seed": 1}}, "configure a fusion strategy given by name"),
    ({"fusion_params": [1]}, "fusion_params must be a dict"),
])
def test_a_bad_compile_option_is_named_before_tracing(options, message):
    def never_traced(x):
        raise AssertionError("a bad option must fail before the function is traced")
    with pytest.raises(StaxError, match=message):
        stax.compile(never_traced, X, **options)


def test_an_isa_and_threads_given_by_value_compile():
    numpy_threads = np.int64(1)  # a numpy integer is a whole number too
    compiled = stax.compile(lambda a: a * 2, X, isa="none", threads=numpy_threads)
    assert compiled.isa.name == "none" and "num_threads" not in compiled.source
    np.testing.assert_array_equal(compiled(X), X * 2)


def test_a_number_as_input_says_how_to_pass_it():
    with pytest.raises(StaxError, match="a number is a constant of the function"):
        stax.compile(lambda a, s: a * s, X, 2.0)


# --- strategies that return invalid answers --------------------------------------------------------

@pytest.mark.parametrize("fusion, reason", [
    (lambda p: [p.nodes[:-1]], "in no block"),
    (lambda p: [p.nodes, p.nodes[:1]], "blocks must be disjoint"),
    (lambda p: [[n] for n in p.nodes] + [["ghost"]], "not a node of the problem"),
    (lambda p: [[n] for n in p.nodes] + [[]], "empty"),
])
def test_compile_rejects_an_invalid_partition_with_the_reason(fusion, reason):
    with pytest.raises(InvalidScheduleError, match=reason):
        stax.compile(two_kernels, X, fusion=fusion)


def test_compile_rejects_a_partition_with_a_forbidden_pair():
    def everything(problem):
        assert problem.forbidden, "the program must have a pair that cannot share a kernel"
        return [problem.nodes]
    with pytest.raises(InvalidScheduleError, match="forbidden pair"):
        stax.compile(two_kernels, X, fusion=everything)


@pytest.mark.parametrize("order, reason", [
    (lambda p: tuple(reversed(p.tasks)), "not topological"),
    (lambda p: p.tasks[:-1], "missing"),
])
def test_compile_rejects_an_invalid_order_with_the_reason(order, reason):
    with pytest.raises(InvalidScheduleError, match=reason):
        stax.compile(two_kernels, X, fusion="none", order=order)


# --- solvers out of time ---------------------------------------------------------------------------

@pytest.mark.parametrize("strategy, params", [("cpsat", {"time_limit": 0.01, "workers": 1}),
                                              ("mwc", {"time_limit": 0.01})])
def test_fusion_solver_out_of_time_is_not_optimal(strategy, params):
    problem = fusion_problem(layered_dag(60, seed=7), 7, forbidden_fraction=0.05)
    result = stax.run_fusion(strategy, problem, **params)
    assert result.status in ("feasible", "heuristic")
    assert problem.validate(result.partition) and result.cost <= problem.unfused_cost()


def test_order_solver_out_of_time_is_not_optimal():
    problem = order_problem(layered_dag(60, seed=7), 7)
    result = stax.run_order("cpsat", problem, time_limit=0.01, workers=1)
    assert result.status in ("feasible", "heuristic")
    assert result.bound is None or result.bound <= result.peak


# --- malformed and schema-violating problem files --------------------------------------------------

def _write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize("content, message", [
    ('{"nodes": ["a", ', r"bad\.json: not valid JSON at line 1"),
    ('[1, 2]', r"bad\.json: expected a JSON object at the top level, found list"),
])
def test_malformed_problem_file(tmp_path, content, message):
    with pytest.raises(InstanceFormatError, match=message):
        store.load(str(_write(tmp_path, content)))


def test_missing_problem_file_names_it(tmp_path):
    with pytest.raises(InstanceFormatError, match=r"nothere\.json: cannot read the file"):
        FusionProblem.load(tmp_path / "nothere.json")


def _fusion_dict() -> dict:
    return store.load("layered/8/0").fusion.to_dict()


def test_buffer_naming_an_unknown_node(tmp_path):
    data = _fusion_dict()
    data["buffers"][1]["users"] = ["ghost"]
    with pytest.raises(InstanceFormatError, match=r"bad\.json: field 'buffers\[1\]\.users\[0\]': expected a node of the problem, found 'ghost'"):
        store.load(str(_write(tmp_path, json.dumps(data))))


def test_duplicate_nodes_and_cycles(tmp_path):
    data = _fusion_dict()
    with pytest.raises(InstanceFormatError, match="unique"):
        store.load(str(_write(tmp_path, json.dumps(data | {"nodes": data["nodes"] + data["nodes"][:1]}))))
    order = {"format": ORDER_FORMAT, "version": 1, "tasks": ["a", "b"],
             "buffers": [{"name": "x", "size": 4, "producer": "a", "users": ["b"]},
                         {"name": "y", "size": 4, "producer": "b", "users": ["a"]}]}
    with pytest.raises(InstanceFormatError, match=r"has a cycle through \[.a., .b.\]; it must be a DAG"):
        OrderProblem.from_dict(order, "cyclic.json")


def test_order_buffer_without_producer(tmp_path):
    with pytest.raises(InstanceFormatError, match="producer is required"):
        OrderProblem.from_dict({"format": ORDER_FORMAT, "version": 1, "tasks": ["a"],
                                "buffers": [{"name": "x", "size": 4, "producer": None, "users": ["a"]}]}, "f.json")


# --- problem files: each malformation is one line naming the field (issue 51) ---------------------

def _set(path: str, value):
    """A mutation setting the field at ``path`` (keys and indices separated by dots)."""
    def mutate(data: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    return mutate


@pytest.mark.parametrize("mutate, message", [
    (_set("extra_edges", [["n0", "ghost"]]), r"field 'extra_edges\[0\]': expected a pair of two different names"),
    (_set("extra_edges", [["n1", "n1"]]), r"field 'extra_edges\[0\]': expected a pair of two different names"),
    (_set("node_info", ["n0"]), r"field 'node_info': expected an object mapping node names to objects"),
    (_set("node_info", {"ghost": {}}), r"field 'node_info\.ghost': expected an object, under the name of a node"),
    (lambda d: d["buffers"][2].update(users=d["buffers"][2]["users"] + [d["buffers"][2]["producer"]]),
     r"field 'buffers\[2\]\.users\[\d+\]': expected a node other than the producer"),
    (lambda d: d["buffers"][3].update(name=d["buffers"][2]["name"]),
     r"field 'buffers\[3\]\.name': expected a buffer name not given before"),
    (_set("buffers.2.is_output", "false"), r"field 'buffers\[2\]\.is_output': expected true or false, found 'false'"),
    (_set("buffers.2.size", 2**80), r"field 'buffers\[2\]\.size': expected a whole number from 0 below 2\^62"),
    (_set("buffers.2.size", -4), r"field 'buffers\[2\]\.size': expected a whole number from 0"),
    (_set("buffers.2.size", 4.5), r"field 'buffers\[2\]\.size'"),
    (_set("nodes.0", "n0\nsystem"), r"field 'nodes': expected a list of names, each an identifier"),
    (_set("buffers.2.colour", "red"), r"field 'buffers\[2\]\.colour' is not a known key"),
    (_set("max_nodes", 0), r"field 'max_nodes': expected a positive integer"),
    (_set("forbidden", [{"a": "n0", "b": "n0", "reason": "x"}]), r"field 'forbidden\[0\]\.b': expected a node other"),
    (_set("name", "a\nb"), r"field 'name': expected a printable string"),
])
def test_a_malformed_fusion_problem_is_one_line_naming_the_field(tmp_path, mutate, message):
    data = _fusion_dict()
    mutate(data)
    with pytest.raises(InstanceFormatError, match=r"^.*bad\.json: " + message) as info:
        store.load(str(_write(tmp_path, json.dumps(data))))
    assert "\n" not in str(info.value)


def test_sizes_whose_sum_would_overflow_are_refused():
    data = _fusion_dict()
    for buf in data["buffers"]:
        buf["size"] = 2**61
    with pytest.raises(InstanceFormatError, match=r"sizes whose sum stays below 2\^62"):
        FusionProblem.from_dict(data, "big.json")


def test_the_largest_sizes_allowed_solve_with_cpsat():
    """Sizes near the cap (the 2^80-byte probe crashed OR-Tools): the order solver still answers."""
    data = store.load("layered/8/0").fusion.to_dict()
    produced = [b for b in data["buffers"] if b["producer"]]
    for buf in produced:
        buf["size"] = 2**62 // (2 * len(produced))
    problem = FusionProblem.from_dict(data, "near-cap.json")
    from stax.scheduler.problems import kernel_order_problem
    order = kernel_order_problem(problem, [(n,) for n in problem.nodes])
    result = stax.run_order("cpsat", order, time_limit=2, workers=1)
    assert order.validate(result.order) and result.peak == order.peak(result.order)


def test_the_node_limit_is_configurable_and_named(tmp_path, monkeypatch):
    data = _fusion_dict()
    monkeypatch.setenv("STAX_MAX_NODES", "3")
    with pytest.raises(InstanceFormatError, match=r"field 'nodes': expected at most 3 nodes \(raise STAX_MAX_NODES"):
        FusionProblem.from_dict(data, "big.json")
    monkeypatch.setenv("STAX_MAX_NODES", str(len(data["nodes"])))
    monkeypatch.setenv("STAX_MAX_BUFFERS", "2")
    with pytest.raises(InstanceFormatError, match=r"field 'buffers': expected at most 2 buffers \(raise STAX_MAX_BUFFERS"):
        FusionProblem.from_dict(data, "big.json")
    monkeypatch.setenv("STAX_MAX_BUFFERS", "lots")
    with pytest.raises(StaxError, match="STAX_MAX_BUFFERS='lots' is not a limit"):
        FusionProblem.from_dict(data, "big.json")


def test_a_million_node_file_is_refused_before_it_is_built(tmp_path):
    nodes = [f"n{i}" for i in range(10**6)]
    data = {"format": "stax.fusion-problem", "version": 1, "nodes": nodes, "buffers": []}
    with pytest.raises(InstanceFormatError, match=r"expected at most 20000 nodes"):
        FusionProblem.from_dict(data, "huge.json")


def test_a_deeply_nested_file_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"nodes": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(InstanceFormatError, match=r"deep\.json: its JSON nests arrays or objects too deeply"):
        FusionProblem.load(path)
