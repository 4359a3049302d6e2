"""Does a lower modeled cost make faster kernels?  For each instance of a sweep, the Kendall
rank correlation (tau-b) between Definition 7.3's modeled traffic and the measured kernel time
across the strategies that ran it; per family, how well the model predicts time on this machine.

    python -m experiments.report.rank_correlation RESULTS
"""
from __future__ import annotations

import argparse

import pandas as pd

from experiments.sweep.results import load_results
from experiments.sweep.time_tau import per_instance


def per_family(table: pd.DataFrame) -> pd.DataFrame:
    """Per family: instances with a defined tau, their mean and median tau, and the fraction
    where a higher modeled traffic ranks with a longer time (tau > 0)."""
    taus = per_instance(table).dropna(subset=["tau"])
    grouped = taus.groupby("family")["tau"]
    return pd.DataFrame({"instances": grouped.size(), "mean_tau": grouped.mean(), "median_tau": grouped.median(),
                         "positive": grouped.apply(lambda t: float((t > 0).mean()))}).reset_index()


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a results directory or table")
    table = per_family(load_results(parser.parse_args(argv).results))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return table


if __name__ == "__main__":
    main()
