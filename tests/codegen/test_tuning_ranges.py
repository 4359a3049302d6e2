"""Tuning is range-checked in ``Tuning`` itself (issue 51): every threshold at either end of its
range gives the reference's results, and a value outside it (zero counts, a 2^40-byte stack
array, a cache line that is not a power of two) is one StaxError naming the field, through the
API and in a schedule file."""
from __future__ import annotations

import json
from dataclasses import fields, replace

import numpy as np
import pytest

import stax
from stax.codegen.tuning import TUNING_MAX, TUNING_RANGES, Tuning
from stax.errors import InstanceFormatError, StaxError
from tests.helpers import run_check

RNG = np.random.default_rng(51)
X = RNG.standard_normal((40, 70)).astype(np.float32)
Y = RNG.standard_normal((70, 40)).astype(np.float32)


def _at(end: str) -> Tuning:
    """Every threshold at the low or the high end of its range."""
    pick = 0 if end == "low" else 1
    return Tuning(**{f.name: TUNING_RANGES.get(f.name, (0, TUNING_MAX, False))[pick] for f in fields(Tuning)})


PROGRAMS = {
    "softmax": (lambda x: (x - x.amax(-1, keepdim=True)).exp() / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True), (X,)),
    "transposed add": (lambda x, y: x * 2 + y.t(), (X, Y)),
    "column sum": (lambda x: x.sum(0), (X,)),
    "whole sum and variance": (lambda x: (x.sum(), x.var()), (X,)),
    "cumsum": (lambda x: x.cumsum(-1), (X,)),
}


@pytest.mark.parametrize("end", ["low", "high"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_every_threshold_at_an_end_of_its_range_agrees_with_the_reference(end, program):
    fn, inputs = PROGRAMS[program]
    run_check(fn, *inputs, threads=2, tuning=_at(end), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, value, message", [
    ("chunks_per_thread", 0, "Tuning.chunks_per_thread = 0: give a whole number from 1 to 1024"),
    ("accumulators", 0, "Tuning.accumulators = 0"),
    ("cache_line", 0, "Tuning.cache_line = 0: give a power of two from 64"),
    ("cache_line", 96, "Tuning.cache_line = 96: give a power of two"),
    ("strip_rows", 8, "Tuning.strip_rows = 8: give a power of two from 16"),
    ("tile", 0, "Tuning.tile = 0"),
    ("sum_block", 0, "Tuning.sum_block = 0"),
    ("split_row_step", 0, "Tuning.split_row_step = 0"),
    ("stack_array_max_bytes", 2**40, "Tuning.stack_array_max_bytes = 1099511627776: give a whole number from 0 to "
                                     "1048576"),
    ("parallel_min_work", -1, "Tuning.parallel_min_work = -1"),
    ("stream_min_bytes", 2**70, "Tuning.stream_min_bytes"),
    ("wide_sum_min", 1.5, "Tuning.wide_sum_min = 1.5: give a whole number"),
    ("vector_tail_min", True, "Tuning.vector_tail_min = True"),
])
def test_a_value_out_of_range_is_named(name, value, message):
    with pytest.raises(StaxError, match=message.replace("(", r"\(")):
        Tuning(**{name: value})


def test_a_schedule_with_an_out_of_range_tuning_is_refused_when_loaded(tmp_path):
    schedule = stax.schedule(lambda x: x.sum(-1), X, isa="none", threads=1)
    for name, value in (("STACK_ARRAY_MAX_BYTES", 2**40), ("CHUNKS_PER_THREAD", 0), ("CACHE_LINE", 0)):
        data = schedule.to_dict()
        data["tuning"][name] = value
        path = tmp_path / "s.json"
        path.write_text(json.dumps(data))
        with pytest.raises(InstanceFormatError, match=rf"s\.json: field 'tuning': Tuning\.{name.lower()} = "):
            stax.Schedule.load(path)


def test_a_tuning_in_range_survives_a_schedule_round_trip(tmp_path):
    tuning = replace(Tuning(), accumulators=1, chunks_per_thread=1, stack_array_max_bytes=0)
    schedule = stax.schedule(lambda x: x.sum(0), X, isa="none", threads=2, tuning=tuning)
    schedule.save(tmp_path / "s.json")
    assert stax.Schedule.load(tmp_path / "s.json").tuning == tuning
