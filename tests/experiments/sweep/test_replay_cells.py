"""Every sweep row keeps its decisions (issue 27): a program cell's Schedule rebuilds its kernels,
and an abstract cell's partition and order give the row's traffic and peak again."""
from __future__ import annotations

import numpy as np

import stax
from experiments.sweep.config import load_config
from experiments.sweep.results import ResultDir, load_results
from experiments.sweep.run import run_sweep
from instances import store
from stax.reference import evaluate
from stax.decisions import Schedule

CONFIG = """
name = "replayable"
seed = 5
measures = ["traffic", "peak", "measured_peak"]
fusion = ["none", "greedy"]
order = ["best"]
[[families]]
name = "softmax"
sizes = [16]
[[families]]
name = "layered"
sizes = [8]
"""


def test_every_cell_can_be_replayed_from_its_row(tmp_path):
    config = tmp_path / "replayable.toml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    run_sweep(load_config(config), out, workers=2, progress=False, echo=lambda _: None)
    table, results = load_results(out), ResultDir(out)
    assert len(table) == 4 and (table["status"] == "ok").all()
    for row in table.itertuples():
        decision = results.decision(row.decision)
        inst = store.instance(row.family, row.size, row.seed)
        if row.kind == "program":
            schedule = Schedule.from_dict(decision)
            assert len(schedule.partition) == row.kernels and schedule.order.peak == row.peak
            rebuilt = stax.build(schedule)
            arrays = inst.program.inputs(row.size, row.seed)
            got = rebuilt(*[a.copy() for a in arrays])
            want = evaluate(rebuilt.graph, *[a.copy() for a in arrays])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            partition = [tuple(block) for block in decision["partition"]]
            assert inst.fusion.cost(partition) == row.traffic
            assert inst.order_problem(partition).peak(decision["order"]) == row.peak
