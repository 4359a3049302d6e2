"""Replays every shrunk fuzz failure in ``tests/regressions/`` (written by ``experiments.fuzz.run``):
each must now compile, run and match the reference (or pass the solver cross-checks)."""
from __future__ import annotations

import json

import pytest

from experiments.fuzz.check import Combo, cross_check, run_case
from instances.random_programs import FuzzProgram
from stax.target import ISA_LEVELS, native_isa, runs_here
from tests.helpers import ROOT

FILES = sorted((ROOT / "tests" / "regressions").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_regression_passes(path):
    record = json.loads(path.read_text())
    program = FuzzProgram.from_dict(record["program"])
    if record["combo"] is None:
        assert cross_check(program)[0] == [], record["listing"]
    else:
        combo = Combo.from_dict(record["combo"])
        if not runs_here(ISA_LEVELS[combo.isa]):
            pytest.skip(f"{path.name} was found at isa={combo.isa}, which this CPU lacks (its widest is {native_isa().name})")
        assert run_case(program, combo, record["data_seed"]) == [], record["listing"]
