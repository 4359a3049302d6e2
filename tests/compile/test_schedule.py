"""The Schedule: ``stax.schedule`` stops before gcc, and ``build(load(save(schedule(...))))`` gives
byte-identical C++ and equal outputs to ``compile(...)``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stax
from instances.programs import PROGRAMS
from instances.random_programs import random_program
from stax.errors import InstanceFormatError, InvalidScheduleError
from stax.decisions import Schedule, diff
from tests.helpers import ROOT, strided_copy



def outputs(f, arrays):
    got = f(*[strided_copy(a) for a in arrays])
    return got if isinstance(got, tuple) else (got,)


def assert_replays(tmp_path, fn, arrays, **options):
    compiled = stax.compile(fn, *arrays, **options)
    path = tmp_path / "s.json"
    stax.schedule(fn, *arrays, **options).save(path)
    rebuilt = stax.build(Schedule.load(path))
    assert rebuilt.source == compiled.source
    assert rebuilt.fusion_log == compiled.fusion_log and rebuilt.fusion.info == compiled.fusion.info
    for got, want in zip(outputs(rebuilt, arrays), outputs(compiled, arrays)):
        np.testing.assert_array_equal(got, want)
    return rebuilt


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_saved_schedule_of_every_suite_program_builds_the_same_code(tmp_path, name):
    program = PROGRAMS[name]
    assert_replays(tmp_path, program.fn, program.inputs(16))


@pytest.mark.parametrize("seed, options", [
    (0, {}), (1, {"fusion": "none"}), (2, {"isa": "avx2", "threads": 1}), (3, {"memory_plan": "pool"}),
    (4, {"group_kernels": False, "order": "original"}), (5, {"rule": "cpu", "dependence": "sequential"}),
])
def test_a_saved_schedule_of_a_random_program_builds_the_same_code(tmp_path, seed, options):
    program = random_program(seed)
    assert_replays(tmp_path, program.fn, program.inputs(1, seed), **options)


def test_a_schedule_loaded_in_another_process_builds_the_same_code_and_outputs(tmp_path):
    program = PROGRAMS["transformer_block"]
    arrays = program.inputs(16)
    compiled = stax.compile(program.fn, *arrays)
    compiled.schedule.save(tmp_path / "s.json")
    np.savez(tmp_path / "in.npz", *arrays)
    script = ("import sys, numpy as np, stax\n"
              "f = stax.build(stax.Schedule.load(sys.argv[1]))\n"
              "data = np.load(sys.argv[2]); out = f(*[data[k] for k in data.files])\n"
              "np.savez(sys.argv[3], *(out if isinstance(out, tuple) else (out,)))\n"
              "open(sys.argv[4], 'w').write(f.source)\n")
    subprocess.run([sys.executable, "-c", script, tmp_path / "s.json", tmp_path / "in.npz", tmp_path / "out.npz",
                    tmp_path / "source.txt"], check=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert (tmp_path / "source.txt").read_text() == compiled.source
    there = np.load(tmp_path / "out.npz")
    for got, want in zip([there[k] for k in there.files], outputs(compiled, arrays)):
        np.testing.assert_array_equal(got, want)


def test_schedule_runs_with_no_compiler_on_the_path(tmp_path):
    script = ("import shutil, sys, stax\n"
              "from instances.programs import PROGRAMS\n"
              "assert shutil.which('g++') is None and shutil.which('gcc') is None\n"
              "p = PROGRAMS['softmax']\n"
              "s = stax.schedule(p.fn, *p.inputs(16), fusion='greedy')\n"
              "s.save(sys.argv[1])\n"
              "try:\n    stax.build(s)\nexcept stax.BuildError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script, tmp_path / "s.json"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": str(tmp_path), "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/")})
    assert done.returncode == 0, done.stderr
    assert "no g++ on PATH" in done.stdout
    assert Schedule.load(tmp_path / "s.json").kernels


def test_compile_keeps_its_schedule_and_the_passes_results_are_new_values():
    program = PROGRAMS["softmax"]
    reversed_blocks = lambda problem: [(n,) for n in reversed(problem.nodes)]  # noqa: E731 (out of node order)
    f = stax.compile(program.fn, *program.inputs(16), fusion=reversed_blocks)
    assert f.schedule.partition == f.fusion.partition == tuple((n,) for n in f.fusion_problem.nodes)
    assert f.schedule.options.fusion == "<lambda>" and f.schedule.options.isa == f.isa.name
    assert [k.name for k in f.schedule.kernels] == list(f.order.order)


def test_a_damaged_schedule_file_is_named_by_its_field(tmp_path):
    program = PROGRAMS["layernorm"]
    data = stax.schedule(program.fn, *program.inputs(16), fusion="none").to_dict()
    for change, field in [(lambda d: d.update(version=99), "version"),
                          (lambda d: d["fusion"].update(partition=[[d["fusion_problem"]["nodes"][0]]]),
                           "fusion.partition"),
                          (lambda d: d["options"].update(isa="sse9"), "options"),
                          (lambda d: d["kernels"].pop(), "kernels"),
                          (lambda d: d["memory"]["storage"].popitem(), "memory.storage"),
                          (lambda d: d.update(spans=[[0, 0]]), "spans")]:
        damaged = json.loads(json.dumps(data))
        change(damaged)
        with pytest.raises(InstanceFormatError, match=f"field '{field}"):
            Schedule.from_dict(damaged, "s.json")


def test_a_schedule_whose_kernel_choices_this_stax_does_not_make_is_refused():
    program = PROGRAMS["softmax"]
    data = stax.schedule(program.fn, *program.inputs(16)).to_dict()
    data["kernels"][0]["form"] = "tiled"
    with pytest.raises(InstanceFormatError, match="^s.json: kernel .*the schedule chose"):
        Schedule.from_dict(data, "s.json")


def test_diff_names_the_blocks_two_strategies_chose():
    program = PROGRAMS["example_7_1"]
    greedy = stax.schedule(program.fn, *program.inputs(16), fusion="greedy")
    none = stax.schedule(program.fn, *program.inputs(16), fusion="none")
    assert diff(greedy, greedy) == ""
    text = diff(greedy, none, ("greedy", "none"))
    assert "fusion: 'greedy' vs 'none'" in text
    assert f"blocks only in greedy: {' '.join(greedy.partition[0])}" in text
    assert "blocks only in none:" in text


def test_the_replay_strategies_rebuild_a_saved_partition_and_order(tmp_path):
    program = PROGRAMS["layernorm"]
    arrays = program.inputs(16)
    saved = stax.schedule(program.fn, *arrays, fusion="none", order="dfs")
    saved.save(tmp_path / "s.json")
    replayed = stax.schedule(program.fn, *arrays, fusion="replay", order="replay",
                             fusion_params={"schedule": str(tmp_path / "s.json")},
                             order_params={"schedule": str(tmp_path / "s.json")})
    assert diff(saved, replayed).splitlines() == ["options:", "  fusion: 'none' vs 'replay'",
                                                  "  order: 'dfs' vs 'replay'",
                                                  f"  fusion_params: {{}} vs {{'schedule': '{tmp_path / 's.json'}'}}",
                                                  f"  order_params: {{}} vs {{'schedule': '{tmp_path / 's.json'}'}}"]
    given = stax.schedule(program.fn, *arrays, fusion="replay", fusion_params={"partition": saved.partition})
    assert given.partition == saved.partition and given.fusion.status == "heuristic"
    with pytest.raises(InvalidScheduleError):
        stax.schedule(program.fn, *arrays, fusion="replay", fusion_params={"partition": saved.partition[1:]})


def test_the_command_line_saves_builds_and_compares_schedules(tmp_path):
    from click.testing import CliRunner

    from experiments.cli import main
    (tmp_path / "p.py").write_text("def f(x):\n    return (x - x.amax(-1, keepdim=True)).exp().sum(-1)\n")
    target, run = f"{tmp_path / 'p.py'}:f", CliRunner().invoke
    for fusion in ("greedy", "none"):
        done = run(main, ["schedule", target, "--shapes", "8x64", "--fusion", fusion, "-o", str(tmp_path / f"{fusion}.json")])
        assert done.exit_code == 0 and "saved to" in done.output, done.output
    done = run(main, ["compile", target, "--schedule", str(tmp_path / "none.json")])
    assert done.exit_code == 0 and "strategy none" in done.output, done.output
    done = run(main, ["diff", str(tmp_path / "greedy.json"), str(tmp_path / "none.json")])
    assert "blocks only in" in done.output and "fusion: 'greedy' vs 'none'" in done.output
    done = run(main, ["compile", target, "--schedule", str(tmp_path / "none.json"), "--fusion", "none"])
    assert done.exit_code == 2 and "drop --fusion" in done.output
    (tmp_path / "q.py").write_text("def f(x):\n    return x.exp().sum(-1)\n")
    done = run(main, ["compile", f"{tmp_path / 'q.py'}:f", "--schedule", str(tmp_path / "none.json")])
    assert done.exit_code == 1 and "a schedule of another program" in done.output


def test_a_loaded_memory_plan_must_keep_live_buffers_apart():
    program = PROGRAMS["softmax"]
    sched = stax.schedule(program.fn, *program.inputs(16), fusion="none")
    life = sched.order_problem.lifetimes(sched.order.order)
    size = {b.name: b.size for b in sched.order_problem.buffers}
    a, b = next((a, b) for a in life for b in life if a < b and size[a] == size[b]
                and life[a][0] <= life[b][1] and life[b][0] <= life[a][1])
    data = sched.to_dict()
    data["memory"]["storage"][b] = {"name": b, "kind": "reuse", "source": a, "offset": 0}
    with pytest.raises(InstanceFormatError, match=f"field 'memory'.*share a storage while both are live"):
        Schedule.from_dict(data)
    pooled = stax.schedule(program.fn, *program.inputs(16), fusion="none", memory_plan="pool").to_dict()
    for where in pooled["memory"]["storage"].values():
        where["offset"] = 0
    with pytest.raises(InstanceFormatError, match="overlap in the pool while both are live"):
        Schedule.from_dict(pooled)
