"""A sweep comparing the parallel and sequential dependence rules on the shifted-read family."""
from __future__ import annotations

import re

import pytest

from experiments.sweep.cells import plan
from experiments.sweep.config import ConfigError, load_config
from experiments.sweep.run import run_sweep

TINY = """
name = "tiny-dependence"
seeds = 2
measures = ["traffic", "optimum"]
fusion = ["none", "greedy", "cpsat"]
order = ["original"]
{dependence}
[reference]
time_limit = 5
[[families]]
name = "shift_1d"
sizes = [64]
[[families]]
name = "stencil_5pt"
sizes = [64]
[[families]]
name = "random_shifted"
sizes = [64]
[[families]]
name = "layered"
sizes = [6]
"""
BOTH = 'dependence = ["parallel", "sequential"]'


def config(tmp_path, dependence: str = BOTH):
    path = tmp_path / "dependence.toml"
    path.write_text(TINY.format(dependence=dependence))
    return load_config(path)


def test_sequential_rule_never_costs_more_and_rows_carry_the_rule(tmp_path):
    table = run_sweep(config(tmp_path), tmp_path / "out", raise_errors=True, progress=False, echo=lambda _: None).table
    assert (table["status"] == "ok").all()
    assert set(table.loc[table["kind"] == "program", "dependence"]) == {"parallel", "sequential"}
    assert table.loc[table["kind"] != "program", "dependence"].isna().all()  # null: no dependence rule
    programs = table[table["kind"] == "program"]
    # each cell's reference is CP-SAT's optimum under the cell's own rule
    assert (programs["traffic_ref_status"] == "optimal").all()
    assert (programs["traffic"] >= programs["traffic_ref"]).all()
    assert (programs.loc[programs["fusion"] == "cpsat", "traffic_gap_abs"] == 0).all()
    by_rule = programs.pivot_table(index=["instance", "fusion"], columns="dependence",
                                   values=["traffic", "traffic_ref"], aggfunc="first")
    assert len(by_rule) == programs["instance"].nunique() * 3 and not by_rule.isna().any().any()
    for value in ("traffic", "traffic_ref"):
        assert (by_rule[value, "sequential"] <= by_rule[value, "parallel"]).all()
    shift = by_rule.loc[("shift_1d/64", "greedy")]
    assert shift["traffic", "sequential"] < shift["traffic", "parallel"]  # the rule fuses across the shift


def test_absent_rule_keeps_the_keys_of_the_parallel_rule(tmp_path):
    default = {c.key for c in plan(config(tmp_path, ""), "v")}
    assert default == {c.key for c in plan(config(tmp_path, 'dependence = ["parallel"]'), "v")}
    both = plan(config(tmp_path), "v")
    assert default == {c.key for c in both if c.dependence != "sequential"}
    assert len({c.key for c in both}) == len(both)


def test_unknown_rule_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("dependence.toml: field 'dependence'")):
        config(tmp_path, 'dependence = ["wavefront"]')
