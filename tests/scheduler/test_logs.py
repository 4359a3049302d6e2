"""STAX_LOGS (stax.util.logs) and the user's op names (stax.scheduler.labels): the README's softmax
logs its fusion decisions and order naming amax, exp and sum with their source lines; the same
names reach f.fusion_log, kernel comments and saved schedules; a wrong channel is one line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import stax
from stax.errors import InstanceFormatError, StaxError
from stax.scheduler.labels import OP_LABEL, op_label
from stax.decisions import Schedule
from tests.helpers import ROOT


DOC = (ROOT / "docs" / "logging.md").read_text()
#: docs/logging.md's example: the README's first compile example as a user's file, and what
#: STAX_LOGS=fusion,order writes for it
SOFTMAX, LOGGED = re.findall(r"```(?:python)?\n(.*?)```", DOC, re.S)[:2]


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


LINE = softmax.__code__.co_firstlineno  # its def line; the two ops' lines follow
X = np.random.default_rng(0).random((8, 16), dtype=np.float32)


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "STAX_LOGS"} | env
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    return subprocess.run(args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)


def test_stax_logs_fusion_order_names_the_readme_softmax_ops_and_lines(tmp_path):
    (tmp_path / "softmax.py").write_text(SOFTMAX)
    done = _run([sys.executable, "softmax.py"], tmp_path, STAX_LOGS="fusion,order")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith(("[stax.fusion] ", "[stax.order] ")) for line in lines), lines
    assert done.stderr == LOGGED  # as docs/logging.md shows it
    amax, exp, total = "amax@softmax.py:5", "exp@softmax.py:5", "sum@softmax.py:6"
    fusion = [line for line in lines if line.startswith("[stax.fusion] ")]
    assert f"[stax.fusion] fused {amax} with {exp}: vertical, score (same type 0, shared 33024 B in 2 buffers, " \
           "distance 1)" in fusion
    assert any(line.startswith("[stax.fusion] not fused ") and ": would create a cycle" in line for line in fusion)
    assert any(f"with {total}+div@softmax.py:6" in line for line in fusion)
    order = [line for line in lines if line.startswith("[stax.order] ")]
    assert order[0].startswith("[stax.order] strategy best: ")
    assert order[-1] == f"[stax.order] step 0: cpp_fused_op0_op1_op2_op3 ({amax}+{exp}+{total}+div@softmax.py:6)"
    silent = _run([sys.executable, "softmax.py"], tmp_path)
    assert silent.returncode == 0 and silent.stderr == ""  # off unless asked for


def test_compile_explain_prints_what_stax_logs_fusion_order_does(tmp_path):
    (tmp_path / "model.py").write_text(SOFTMAX.split("\nx = ")[0] + "\n")  # the function alone
    command = [sys.executable, "-m", "experiments.cli", "compile", "model.py:softmax", "--shapes", "8x16", "--no-log"]
    explained = _run([*command, "--explain"], tmp_path)
    logged = _run(command, tmp_path, STAX_LOGS="fusion,order")
    assert explained.returncode == logged.returncode == 0, explained.stderr
    assert explained.stderr == logged.stderr and "[stax.fusion] fused amax@model.py:5 with exp@model.py:5" \
        in explained.stderr
    saved = _run([sys.executable, "-m", "experiments.cli", "schedule", "model.py:softmax", "--shapes", "8x16",
                  "-o", "s.json"], tmp_path)
    assert saved.returncode == 0, saved.stderr
    replayed = _run([*command[:5], "--no-log", "--schedule", "s.json", "--explain"], tmp_path)
    assert replayed.returncode == 0 and replayed.stderr == explained.stderr  # a saved schedule's decisions


def test_an_unknown_channel_is_one_line_with_the_closest(monkeypatch):
    monkeypatch.setenv("STAX_LOGS", "fusion,oder")
    with pytest.raises(StaxError, match=r"^STAX_LOGS='fusion,oder': there is no channel 'oder'; "
                                        r"did you mean 'order'\? the channels are fusion, order, memory"):
        stax.schedule(softmax, X)
    monkeypatch.delenv("STAX_LOGS")
    stax.schedule(softmax, X)  # read again at the next schedule: unset, it is off


def test_every_channel_writes_through_logging(monkeypatch, capsys):
    monkeypatch.setenv("STAX_LOGS", "all")
    stax.compile(softmax, X)
    channels = {re.match(r"\[stax\.(\w+)\]", line).group(1) for line in capsys.readouterr().err.splitlines()}
    assert channels == {"fusion", "order", "memory", "kernels", "schedule", "timing"}
    monkeypatch.setenv("STAX_LOGS", "memory")
    stax.schedule(softmax, X)
    assert {line.split("]")[0] for line in capsys.readouterr().err.splitlines()} == {"[stax.memory"}
    monkeypatch.delenv("STAX_LOGS")
    stax.schedule(softmax, X)
    assert capsys.readouterr().err == ""


def test_labels_reach_the_fusion_log_kernel_comments_and_saved_schedules(tmp_path):
    f = stax.compile(softmax, X)
    here = Path(__file__).name
    amax, exp = f"amax@{here}:{LINE + 1}", f"exp@{here}:{LINE + 1}"
    assert f"fusing {amax} with {exp} (vertical, shared data 544 bytes)" in f.fusion_log.splitlines()
    assert f"// op0 {amax}: buf0 = reduction" in f.kernel_source
    assert f.schedule.labels == {"op0": amax, "op1": exp, "op2": f"sum@{here}:{LINE + 2}",
                                 "op3": f"div@{here}:{LINE + 2}"}
    f.schedule.save(tmp_path / "s.json")
    loaded = Schedule.load(tmp_path / "s.json")
    assert loaded.labels == f.schedule.labels and stax.build(loaded).kernel_source == f.kernel_source
    data = json.loads((tmp_path / "s.json").read_text())
    del data["labels"]  # a schedule saved before labels: loads, and names ops as the scheduler does
    old = Schedule.from_dict(data)
    assert old.labels == {} and "fusing op0 with op1" in stax.build(old).fusion_log
    data["labels"] = {"op0": "exp */ int x; /*"}
    with pytest.raises(InstanceFormatError, match="field 'labels': labels must read kind@file:line"):
        Schedule.from_dict(data)
    data["labels"] = {"op9": "exp"}
    with pytest.raises(InstanceFormatError, match=r"labels name nodes the fusion problem does not have: \['op9'\]"):
        Schedule.from_dict(data)


def test_a_label_is_safe_in_a_cpp_comment_whatever_the_file_is_called():
    assert op_label("exp", ("/home/u/my model*/x.py", 12)) == "exp@x.py:12"
    assert op_label("exp", ("/home/u/my model*.py", 12)) == "exp@my_model_.py:12"
    assert op_label("exp", ("C:/x/we ird-name.v2.py", 3)) == "exp@we_ird-name.v2.py:3"
    assert op_label("exp", ("", 0)) == "exp"  # no line of the user's (an output's copy)
    assert op_label("not an op", ("a.py", 1)) == "op@a.py:1"
    for label in ("exp@my_model_.py:12", "exp@we_ird-name.v2.py:3", "exp"):
        assert OP_LABEL.fullmatch(label) and "*/" not in label


def updated_in_place(x, y):
    x.add_(y ** 2)
    return (x * 3).sum(-1)


def test_an_update_in_place_is_named_apart_from_the_value_it_stores():
    line = updated_in_place.__code__.co_firstlineno + 1
    labels = stax.schedule(updated_in_place, X.copy(), X).labels
    here = Path(__file__).name
    assert sorted(labels.values()) == [f"add@{here}:{line}", f"add_@{here}:{line}", f"sum@{here}:{line + 1}"]
