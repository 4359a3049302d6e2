"""Sweep references with the stronger solvers and bounds, and the traffic-peak Pareto front as a
sweep measure (experiments/sweep/measure.py, plots.py, report.py)."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.sweep.config import load_config
from experiments.sweep.measure import problem_bound
from experiments.report.html import write_report
from experiments.sweep.run import run_sweep
from instances import store

CONFIG = """
name = "tiny"
seed = 5
seeds = {seeds}
cell_timeout = 60
measures = {measures}
fusion = {fusion}
order = {order}
files = ["data/torch/mlp_forward.fusion", "data/torch/mlp_forward.order"]
[reference]
time_limit = {limit}
order = "dp"
pareto_nodes = 12
[[families]]
name = "layered"
sizes = {sizes}
"""


def sweep(tmp_path: Path, measures: str, limit: float, sizes: str, fusion: str, order: str, seeds: int = 1):
    path = tmp_path / "sweep.toml"
    path.write_text(CONFIG.format(measures=measures, limit=limit, sizes=sizes, fusion=fusion, order=order, seeds=seeds))
    return run_sweep(load_config(path), tmp_path / "out", workers=2, progress=False, echo=lambda _: None).table


def dominates(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def test_every_reference_bound_is_valid_and_at_least_the_problem_bound(tmp_path):
    # 0.05 s leaves some layered references of 40 nodes unproven: their bounds must still hold
    table = sweep(tmp_path, '["traffic", "peak", "optimum"]', 0.05, "[40]", '["greedy", "mwc"]', '["best"]', seeds=2)
    assert (table["status"] == "ok").all()
    assert set(table["peak_ref_status"].dropna()) <= {"optimal", "bounded", "heuristic"}
    for measure in ("traffic", "peak"):
        rows = table.dropna(subset=[measure])
        bound = rows[f"{measure}_ref_bound"]
        assert (bound <= rows[measure]).all() and (bound <= rows[f"{measure}_best"]).all()
        assert (bound <= rows[f"{measure}_ref"].fillna(float("inf"))).all()
        assert (rows[f"{measure}_best"] <= rows[measure]).all()
        proven = rows[f"{measure}_ref_status"] == "optimal"
        assert (bound[proven] == rows.loc[proven, f"{measure}_ref"]).all()
        for ratio in (f"{measure}_gap_best", f"{measure}_gap_bound"):
            assert rows[ratio].notna().all() and (rows[ratio] >= 0).all(), ratio
    for _, row in table.dropna(subset=["traffic"]).drop_duplicates("traffic_problem").iterrows():
        inst = store.load(row["file"]) if row["file"] else store.instance(row["family"], row["size"], row["seed"])
        assert row["traffic_ref_bound"] >= problem_bound(inst.fusion)  # compulsory traffic at least


def test_pareto_front_is_a_sweep_measure_with_a_plot(tmp_path):
    table = sweep(tmp_path, '["traffic", "peak", "pareto"]', 5, "[8, 40]", '["none", "greedy", "cpsat"]',
                  '["original", "best"]')
    assert (table["status"] == "ok").all()
    measured = table.dropna(subset=["pareto_front"])
    # the 40-node layered problem is beyond pareto_nodes, the order file has no fusion side
    assert set(measured["instance"]) == {"data/torch/mlp_forward.fusion",
                                         *table.loc[table["size"] == 8, "instance"]}
    assert len(list((tmp_path / "out" / "refs").glob("pareto-*.json"))) == measured["pareto_problem"].nunique()
    for _, rows in measured.groupby("pareto_problem"):
        assert rows["pareto_front"].nunique() == 1  # one front per problem, shared by its cells
        front = [tuple(p) for p in json.loads(rows["pareto_front"].iloc[0])]
        assert front and not any(dominates(a, b) for a in front for b in front)
        assert rows["pareto_proven"].all()
        for traffic, peak in zip(rows["traffic"], rows["point_peak"]):
            mine = (int(traffic), int(peak))
            assert not any(dominates(mine, point) for point in front)
            assert any(p[0] <= mine[0] and p[1] <= mine[1] for p in front)  # the exact front covers every cell
    report = write_report(table, tmp_path / "out")
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 10_000
    assert "Pareto front" in report.read_text() and "alt='pareto'" in report.read_text()
