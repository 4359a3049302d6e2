"""The code-generation knobs are ``Options`` fields: the environment is read once, when the options
are made, and the thresholds (``stax.Tuning``) reach the code generator and a saved Schedule."""
from __future__ import annotations

import json

import numpy as np
import pytest

import stax
from instances.programs import PROGRAMS
from stax.compiler import Options, schedule_graph
from stax.errors import InstanceFormatError, StaxError
from stax.decisions import Schedule


def test_unset_options_take_the_environment_when_made(monkeypatch):
    monkeypatch.setenv("STAX_ISA", "none")
    monkeypatch.setenv("STAX_THREADS", "3")
    monkeypatch.setenv("STAX_CACHING_ALLOCATOR", "0")
    options = Options()
    assert (options.isa.name, options.threads, options.caching_allocator) == ("none", 3, False)
    assert Options(isa="avx2", threads=1, caching_allocator=True).caching_allocator is True


def test_code_generation_reads_no_environment_after_the_options_are_made(monkeypatch):
    """Options made first, then an environment that would fail or change every choice: the
    schedule is the one the options ask for."""
    program = PROGRAMS["softmax"]
    graph = stax.trace(program.fn, *program.inputs(16))
    options = Options(isa="avx2", threads=2)
    expected = schedule_graph(graph, options)
    monkeypatch.setenv("STAX_ISA", "sse9")
    monkeypatch.setenv("STAX_THREADS", "two")
    again = schedule_graph(graph, options)
    assert (again.options.isa, again.options.threads) == ("avx2", 2) and again.kernels == expected.kernels


def test_a_tuning_value_changes_the_code_and_travels_in_the_schedule(tmp_path):
    """A split reduction needs SPLIT_MIN_ROWS rows: lowered to 8 a column sum of 64 rows splits;
    the schedule saves the thresholds it was made with and builds the same C++ from them."""
    x = np.random.default_rng(0).standard_normal((64, 21)).astype(np.float32)
    default = stax.schedule(lambda a: a.sum(0), x, isa="avx2", threads=2)
    tuning = stax.Tuning(split_min_rows=8)
    tuned = stax.schedule(lambda a: a.sum(0), x, isa="avx2", threads=2, tuning=tuning)
    assert [k.form for k in default.kernels] == ["outer-vector"]
    assert [k.form for k in tuned.kernels] == ["split-reduction"]
    tuned.save(tmp_path / "s.json")
    loaded = Schedule.load(tmp_path / "s.json")
    assert loaded.tuning == tuning and loaded.to_dict()["tuning"]["SPLIT_MIN_ROWS"] == 8
    compiled = stax.build(loaded)
    assert compiled.source == stax.build(tuned).source
    np.testing.assert_allclose(compiled(x), x.sum(0), rtol=1e-5)


def test_bad_knobs_are_named():
    with pytest.raises(StaxError, match="tuning must be a stax.Tuning"):
        Options(tuning={"SPLIT_MIN_ROWS": 8})
    with pytest.raises(StaxError, match="caching_allocator='no'"):
        Options(caching_allocator="no")
    program = PROGRAMS["softmax"]
    data = stax.schedule(program.fn, *program.inputs(8)).to_dict()
    data["tuning"].pop("TILE")
    with pytest.raises(InstanceFormatError, match="s.json: field 'tuning': expected a whole number for each of"):
        Schedule.from_dict(json.loads(json.dumps(data)), "s.json")
