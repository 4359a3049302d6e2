"""Kendall tau between modeled traffic and measured time (experiments/report/rank_correlation.py):
tau-b against a count of pairs written from its definition, the per-family summary, and the sweep
measure: each timed row's ``time_tau`` in the results table, and the report's figure and table."""
import itertools
import math

import numpy as np
import pandas as pd
from hypothesis import given, strategies as st

from experiments.report.rank_correlation import per_family
from experiments.sweep.time_tau import kendall_tau, per_instance, with_time_tau
from experiments.report.html import write_report
from experiments.sweep.results import ResultDir, load_results


def tau_b_by_definition(x, y):
    """(n_c - n_d) / sqrt((n0 - n1)(n0 - n2)) with n1, n2 the pairs tied in x, in y."""
    pairs = list(itertools.combinations(range(len(x)), 2))
    sign = [np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in pairs]
    n1 = sum(x[i] == x[j] for i, j in pairs)
    n2 = sum(y[i] == y[j] for i, j in pairs)
    denominator = math.sqrt((len(pairs) - n1) * (len(pairs) - n2))
    return sum(sign) / denominator if denominator else float("nan")


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=9))
def test_tau_b_matches_its_definition(points):
    x, y = [p[0] for p in points], [p[1] for p in points]
    got, want = kendall_tau(x, y), tau_b_by_definition(x, y)
    assert (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, abs_tol=1e-12)


def test_monotone_orders_give_plus_and_minus_one():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 35, 40]) == 1
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1


def timed_sweep() -> pd.DataFrame:
    """Three timed program instances of three strategies each (taus 1/3, -1 and 1) and an untimed
    abstract instance, as a sweep's rows."""
    rows = []
    for instance, times in (("softmax/64", [1, 2, 3]), ("softmax/1024", [3, 2, 1]), ("layernorm/64", [1, 3, 2])):
        for traffic, t, fusion in zip([10, 20, 30], times, ["cpsat", "greedy", "none"]):
            rows.append({"cell": f"{instance}-{fusion}", "family": instance.split("/")[0], "kind": "program",
                         "instance": instance, "fusion": fusion, "order": "original", "status": "ok",
                         "error": None, "date": "2026-12-02", "traffic": traffic, "kernel_time_median": t * 1e-6})
    rows.append({"cell": "layered/8/0-greedy", "family": "layered", "kind": "abstract", "instance": "layered/8/0",
                 "fusion": "greedy", "order": "original", "status": "ok", "error": None, "date": "2026-12-02",
                 "traffic": 5, "kernel_time_median": None})  # abstract: not timed
    return pd.DataFrame(rows)


def test_families_summarize_their_instances():
    table = timed_sweep()
    assert list(per_instance(table)["tau"]) == [1 / 3, -1.0, 1.0]  # instances sorted by family, name
    summary = per_family(table).set_index("family")
    assert summary.loc["softmax", "instances"] == 2 and summary.loc["softmax", "mean_tau"] == 0
    assert summary.loc["softmax", "positive"] == 0.5 and summary.loc["layernorm", "median_tau"] == 1 / 3
    assert "layered" not in summary.index


def test_each_timed_row_carries_its_instances_tau_in_the_results_table(tmp_path):
    """``time_tau`` is the tau of the row's instance (computed here pair by pair), on every timed
    row; the untimed row has none.  The results directory's table carries it."""
    table = timed_sweep()
    results = ResultDir(tmp_path)
    for row in table.to_dict("records"):
        results.record(row)
    results.write_table(table["cell"])
    for got in (with_time_tau(table), load_results(tmp_path)):
        got = got.set_index("cell")
        for instance, rows in table[table["kernel_time_median"].notna()].groupby("instance"):
            want = tau_b_by_definition(list(rows["traffic"]), list(rows["kernel_time_median"]))
            assert np.allclose(got.loc[rows["cell"], "time_tau"], want)
        assert np.isnan(got.loc["layered/8/0-greedy", "time_tau"])


def test_the_report_shows_the_tau_per_family_with_a_figure(tmp_path):
    page = write_report(timed_sweep(), tmp_path).read_text()
    assert (tmp_path / "time_tau.png").stat().st_size > 10_000 and "alt='time_tau'" in page
    section = page[page.index("Kendall tau by family"):]
    cells = [c.split("</td>")[0] for c in section.split("<td>")[1:11]]
    assert cells == ["layernorm", "1", "+0.33", "+0.33", "100%", "softmax", "2", "+0.00", "+0.00", "50%"]
    assert "layered" not in section.split("</table>")[0]
