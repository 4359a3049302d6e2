"""Kendall tau between modeled traffic and measured time (experiments/rank_correlation.py):
tau-b against a count of pairs written from its definition, and the per-family summary."""
import itertools
import math

import numpy as np
import pandas as pd
from hypothesis import given, strategies as st

from experiments.rank_correlation import kendall_tau, per_family, per_instance


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


def test_families_summarize_their_instances():
    rows = []
    for instance, times in (("softmax/64", [1, 2, 3]), ("softmax/1024", [3, 2, 1]), ("layernorm/64", [1, 3, 2])):
        for traffic, t, fusion in zip([10, 20, 30], times, ["cpsat", "greedy", "none"]):
            rows.append({"family": instance.split("/")[0], "instance": instance, "fusion": fusion, "status": "ok",
                         "traffic": traffic, "kernel_time_median": t * 1e-6})
    rows.append({"family": "layered", "instance": "layered/8/0", "fusion": "greedy", "status": "ok",
                 "traffic": 5, "kernel_time_median": None})  # abstract: not timed
    table = pd.DataFrame(rows)
    assert list(per_instance(table)["tau"]) == [1 / 3, -1.0, 1.0]  # instances sorted by family, name
    summary = per_family(table).set_index("family")
    assert summary.loc["softmax", "instances"] == 2 and summary.loc["softmax", "mean_tau"] == 0
    assert summary.loc["softmax", "positive"] == 0.5 and summary.loc["layernorm", "median_tau"] == 1 / 3
    assert "layered" not in summary.index
