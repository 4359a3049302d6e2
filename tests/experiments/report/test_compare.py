"""`stax compare A B`: timed cells matched by what they run, ratios B / A, significance from the
recorded intervals (experiments/report/compare.py)."""
import math

import pandas as pd
from click.testing import CliRunner

from experiments.report.compare import compare, format_comparison
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
    assert lines[0].startswith("+ B significantly slower, - B significantly faster (ratio of medians B / A beyond "
                               "1.1x and their intervals disjoint); ~ beyond 1.1x but the intervals overlap")
    assert not any("softmax/64 greedy" in line for line in lines)  # unchanged: listed with --all only
    everything = CliRunner().invoke(main, ["compare", "--all", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert any("softmax/64 greedy" in line for line in everything.output.splitlines())
    bad = CliRunner().invoke(main, ["compare", "--factor", "0.5", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert bad.exit_code != 0 and "0.5" in bad.output


def test_the_fastest_batches_agreement_is_reported_where_both_tables_have_them(tmp_path):
    """With kernel_time_best in both tables, the summary adds the share of cells whose fastest
    batches lie within 0.8-1.25x of each other; without it in one table, nothing is added."""
    a = A.assign(kernel_time_best=[9e-6, 18e-6, 7e-6, 4e-6])
    b = B.assign(kernel_time_best=[9.5e-6, 20e-6, 10e-6, 3e-6])  # ratios 1.06, 1.11 and 1.43
    result = compare(a, b)
    assert result.best_agreeing == 2 / 3 and result.agreeing == 1 / 3
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    out = CliRunner().invoke(main, ["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")])
    assert out.output.splitlines()[-1].endswith("33% within 0.8-1.25x (fastest batches: 67%)")
    assert "fastest" not in format_comparison(compare(A, b)) and math.isnan(compare(A, b).best_agreeing)
