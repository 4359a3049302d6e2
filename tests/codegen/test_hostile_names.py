"""No name of a file is pasted into generated source (issue 51, probe 2): a graph input whose name
holds a newline and a C++ constructor calling system() is refused when a schedule is loaded,
through the API and the CLI; and independently, with the validator bypassed, the generated C++
and Python never hold the name (inputs' buffers are named by position), while the code
generator refuses to paste a hostile name it is handed directly."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import stax
from experiments.cli import main
from stax.codegen.kernel import Kernel
from stax.codegen.entry import python_entry_points
from stax.codegen.names import comment_label, comment_text, source_name
from stax.errors import InstanceFormatError, StaxError
from stax.ir.graph import Graph, Node
from stax.reference import evaluate

PROGRAM = "def scaled(x):\n    return (x * 2.5).exp().sum(-1)\n"
X = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)


def _hostile(marker: Path) -> str:
    return f'arg0\n__attribute__((constructor)) static void stax_probe() {{ system("touch {marker}"); }}\n//'


def _renamed(schedule: stax.Schedule, old: str, new: str) -> dict:
    """The schedule's JSON with every occurrence of the name ``old`` replaced by ``new``."""
    return json.loads(json.dumps(schedule.to_dict()).replace(json.dumps(old), json.dumps(new)))


@pytest.fixture
def saved(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    namespace: dict = {}
    exec(PROGRAM, namespace)
    return tmp_path, f"{program}:scaled", stax.schedule(namespace["scaled"], X, isa="none", threads=1)


def test_a_hostile_input_name_is_refused_by_the_api(saved):
    tmp_path, _, schedule = saved
    marker = tmp_path / "marker"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_renamed(schedule, "arg0", _hostile(marker))))
    with pytest.raises(InstanceFormatError, match=r"s\.json: field 'graph\.nodes\[0\]\.name': expected an identifier"):
        stax.build(stax.Schedule.load(path))
    assert not marker.exists()


def test_a_hostile_input_name_is_refused_by_the_cli(saved):
    tmp_path, target, schedule = saved
    marker = tmp_path / "marker"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_renamed(schedule, "arg0", _hostile(marker))))
    result = CliRunner().invoke(main, ["compile", target, "--schedule", str(path)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "field 'graph.nodes[0].name': expected an identifier" in lines[0], result.output
    assert not marker.exists()


def test_a_hostile_parameter_name_is_refused(saved):
    tmp_path, _, schedule = saved
    data = schedule.to_dict() | {"parameters": ["x'); __import__('os').system('touch marker'); ('"]}
    with pytest.raises(InstanceFormatError, match="field 'parameters': expected a list of names"):
        stax.Schedule.from_dict(data, "s.json")


def test_with_the_validator_bypassed_no_graph_name_reaches_the_generated_source(saved):
    tmp_path, _, schedule = saved
    marker = tmp_path / "marker"
    evil = _hostile(marker)
    graph = schedule.graph
    nodes = {evil if name == "arg0" else name:
             replace(node, name=evil if name == "arg0" else name,
                     inputs=tuple(evil if i == "arg0" else i for i in node.inputs))
             for name, node in graph.nodes.items()}
    hostile = Graph(nodes, [evil], list(graph.outputs), {})
    parameter = "x'); __import__('os').system('touch " + str(marker) + "'); ('"
    bypassed = replace(schedule, graph=hostile, parameters=(parameter,), products=None)
    compiled = stax.build(bypassed)
    assert "system(" not in compiled.kernel_source and "stax_probe" not in compiled.wrapper_source
    assert repr(parameter) in compiled.wrapper_source  # a parameter reaches the wrapper only as a string literal
    np.testing.assert_allclose(compiled(X), evaluate(hostile, X)[0], rtol=1e-6)
    with pytest.raises(stax.CallError):
        compiled(np.zeros((2, 2), np.float32))  # the error path names the parameter without running it
    assert not marker.exists()


def test_the_code_generator_refuses_to_paste_a_hostile_name():
    evil = 'k() {} __attribute__((constructor)) void f() { system("id"); } void g'
    for kernel in (Kernel(evil, ["op0"], ["buf0"], ["buf0"], "", "vector"),
                   Kernel("cpp_fused_op0", ["op0\n#include </etc/passwd>"], ["buf0"], ["buf0"], "", "vector"),
                   Kernel("cpp_fused_op0", ["op0"], ["buf0"], ["buf0\n"], "", "vector")):
        with pytest.raises(StaxError, match="refusing to"):
            python_entry_points([kernel])


@pytest.mark.parametrize("label", ["exp@model.py:12", "op3", "cpp_fused_op0_op1", "a.b-c:1"])
def test_an_op_label_is_accepted_in_a_comment(label):
    assert comment_label(label) == label


@pytest.mark.parametrize("label", ["op\n#include <x>", "a */ b", 'a"b', "a\\", "", "x y", "é"])
def test_anything_else_is_refused_in_a_comment(label):
    with pytest.raises(StaxError, match="refusing to put"):
        comment_label(label)
    with pytest.raises(StaxError, match="refusing to generate code"):
        source_name(label)


def test_free_text_in_a_comment_cannot_end_it():
    assert comment_text("a\nb\\\r\x00c") == "a?b???c"
