"""`stax compare A B`: timed cells matched by what they run, ratios B / A, significance from the
recorded intervals (experiments/compare.py)."""
import pandas as pd
from click.testing import CliRunner

from experiments.compare import compare
from experiments.cli import main


def table(rows: list[tuple[str, str, float, float, float]]) -> pd.DataFrame:
    """Rows of (instance, fusion, median, interval low, interval high) in seconds."""
    return pd.DataFrame([{"cell": f"{i}-{f}-{len(rows)}", "family": i.split("/")[0], "kind": "program", "instance": i,
                          "fusion": f, "order": "best", "status": "ok", "error": None, "date": "2026-12-02",
                          "kernel_time_median": m, "kernel_time_min": lo, "kernel_time_max": hi}
                         for i, f, m, lo, hi in rows])


A = table([("softmax/64", "greedy", 10e-6, 9.8e-6, 10.2e-6), ("softmax/64", "none", 20e-6, 19e-6, 21e-6),
           ("layernorm/64", "greedy", 8e-6, 7e-6, 9e-6), ("rmsnorm/64", "greedy", 5e-6, 4.9e-6, 5.1e-6)])
B = table([("softmax/64", "greedy", 10.1e-6, 9.9e-6, 10.3e-6), ("softmax/64", "none", 40e-6, 39e-6, 41e-6),
           ("layernorm/64", "greedy", 12e-6, 8.5e-6, 15e-6), ("bias_gelu/64", "greedy", 3e-6, 2.9e-6, 3.1e-6)])


def test_cells_are_matched_and_marked_by_ratio_and_interval():
    result = compare(A, B)
    marks = {(r.instance, r.fusion): (round(r.ratio, 3), r.mark, r.significant) for r in result.cells.itertuples()}
    assert marks == {("softmax/64", "greedy"): (1.01, "", False),      # within the factor
                     ("softmax/64", "none"): (2.0, "+", True),         # slower, intervals apart
                     ("layernorm/64", "greedy"): (1.5, "~", False)}    # slower, intervals overlap
    assert (result.only_a, result.only_b) == (1, 1)
    assert result.agreeing == 1 / 3
    assert compare(B, A).cells.set_index("fusion").loc["none", "mark"] == "-"


def test_the_compare_command_prints_the_changed_cells_and_a_summary(tmp_path):
    A.to_csv(tmp_path / "a.csv", index=False)
    B.to_csv(tmp_path / "b.csv", index=False)
    out = CliRunner().invoke(main, ["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[-1].startswith("3 timed cells in both (1 only in A, 1 only in B); 1 significantly different; 33%")
    assert any(line.startswith("+") and "softmax/64 none" in line for line in lines)
    assert not any("softmax/64 greedy" in line for line in lines)  # unchanged: listed with --all only
    everything = CliRunner().invoke(main, ["compare", "--all", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert any("softmax/64 greedy" in line for line in everything.output.splitlines())
    bad = CliRunner().invoke(main, ["compare", "--factor", "0.5", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert bad.exit_code != 0 and "0.5" in bad.output
