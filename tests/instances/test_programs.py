"""The program suite, the random program generator and the instance store."""
from __future__ import annotations

import json

import numpy as np
import pytest

import stax
from instances import store
from instances.programs import PROGRAMS, get_program
from instances.random_programs import random_program
from stax.reference import evaluate
from stax.scheduler.strategies import run_fusion


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_suite_program_compiles_and_matches_the_reference(name, check):
    program = PROGRAMS[name]
    compiled = check(program.fn, *program.inputs(16), fusion="greedy", rtol=1e-4, atol=1e-5)
    assert compiled.kernels


def test_adam_updates_its_inputs_in_place():
    graph = stax.trace(get_program("adam_step").fn, *get_program("adam_step").inputs(4))
    assert set(graph.mutations) == set(graph.inputs) - {graph.inputs[1]}  # param, m, v; not grad


def test_two_hundred_random_programs_trace_and_evaluate():
    ranks_seen, outputs_seen = set(), set()
    for seed in range(200):
        program = random_program(seed)
        arrays = program.inputs(1, seed)
        outputs = evaluate(stax.trace(program.fn, *arrays), *arrays)
        assert all(np.isfinite(o.astype(np.float64)).all() for o in outputs), seed
        ranks_seen.update(a.ndim for a in arrays)
        outputs_seen.add(len(outputs))
    assert {1, 2, 3} <= ranks_seen and {1, 2, 3} <= outputs_seen
    assert "floordiv" not in {s.op for seed in range(200) for s in random_program(seed).fn.steps}


def test_random_programs_are_reproducible():
    assert random_program(7).fn == random_program(7).fn
    assert random_program(7).fn != random_program(8).fn


@pytest.mark.parametrize("name", ["layered/10/1", "series_parallel/12/0", "mwc_grid/6/0", "vsep_tree/6/2",
                                  "softmax/32", "random_program/5/4", "data/layered-12-0", "data/vsep_tree-6-0"])
def test_store_loads_every_kind(name):
    inst = store.load(name)
    order = inst.order_problem()
    assert order.validate(order.tasks)
    assert store.load(name).content_hash() == inst.content_hash()
    assert inst.name in store.describe(inst)


SHIPPED = {"layered-12-0": "layered/12/0", "mwc_grid-9-0": "mwc_grid/9/0", "vsep_tree-6-0": "vsep_tree/6/0",
           "example_7_2-64": "example_7_2/64", "transformer_block-16": "transformer_block/16"}


def test_every_shipped_file_has_a_generator():
    assert sorted(p.stem for p in store.DATA_DIR.glob("*.json")) == sorted(SHIPPED)


@pytest.mark.parametrize("stem", SHIPPED)
def test_shipped_files_match_their_generators(stem):
    """Each file is what ``stax instances show NAME --save`` writes today: program files under
    ``DEFAULT_FUSION_RULE`` (see instances/README.md to rebuild them)."""
    shipped, fresh = store.load(f"data/{stem}"), store.load(SHIPPED[stem])
    assert (shipped.fusion, shipped.order) == (fresh.fusion, fresh.order)


def test_shipped_example_7_2_is_one_pass_under_the_default_rule():
    """Under "cpu-split" nothing in example 7.2 is forbidden (the spec's "cpu" forbade op0 with op1
    and op2, outer_loops_differ), so greedy fusion makes one kernel of its three nodes."""
    problem = store.load("data/example_7_2-64").fusion
    assert problem.forbidden == () and len(problem.nodes) == 3
    assert len(run_fusion("greedy", problem).partition) == 1


def test_unknown_names_say_what_exists():
    with pytest.raises(stax.StaxError, match="known: .*softmax"):
        store.load("nosuch/3")
    with pytest.raises(stax.StaxError, match="FAMILY/SIZE/SEED"):
        store.load("layered/x")


def test_malformed_instance_file_names_file_and_field(tmp_path):
    data = store.load("layered/8/0").fusion.to_dict()
    data["buffers"][2]["size"] = "big"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(stax.InstanceFormatError, match=r"bad\.json: field 'buffers\[2\]\.size'"):
        store.load(str(path))
    path.write_text(json.dumps(data | {"format": "something"}))
    with pytest.raises(stax.InstanceFormatError, match=r"bad\.json: field 'format'"):
        store.load(str(path))
