"""The end of a sweep as a researcher sees it: a summary per strategy, a failing exit when cells
failed, a resume line on Ctrl-C, --dry-run, stale cells explained and kept on request, and the
provenance every row and the results directory carry."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from experiments.sweep import provenance
from experiments.sweep.config import load_config
from experiments.sweep.results import load_results
from experiments.report.summary import format_summary, strategy_summary
from experiments.cli import main

CONFIG = """
name = "tiny"
seed = 3
cell_timeout = 60
measures = ["traffic", "peak", "optimum"]
fusion = ["none", "greedy"]
order = ["original", "best"]
[reference]
time_limit = {limit}
[[families]]
name = "layered"
sizes = [8]
[[families]]
name = "vsep_tree"
sizes = [6]
"""
CELLS = 2 * 2 + 2  # layered: fusion x order; vsep_tree (orders only): one per order


def write(tmp_path: Path, limit: float = 5) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG.format(limit=limit))
    return path


def run(*args: str):
    return CliRunner().invoke(main, [*args, "--workers", "2"], catch_exceptions=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    config, out = write(tmp), tmp / "out"
    result = run("sweep", str(config), "--out", str(out))
    return config, out, result


def test_summary_table_per_strategy_ends_the_sweep(finished):
    _, out, result = finished
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("strategy"))
    assert lines[header].split()[:3] == ["strategy", "cells", "failed"]
    body = {" ".join(line.split()[:2]): line.split() for line in lines[header + 2:header + 6]}
    assert set(body) == {"fusion none", "fusion greedy", "order original", "order best"}
    assert body["fusion none"][2:4] == ["2", "0"]  # two cells (one per order), no failure
    assert body["order best"][2:4] == ["3", "0"]  # one layered cell per fusion, one vsep_tree cell


def test_a_sweep_without_report_names_the_report_command(finished):
    _, out, result = finished
    assert f"stax report {out}" in result.output and "report.html" not in result.output


def test_summary_figures_agree_with_the_table(finished):
    _, out, _ = finished
    summary = strategy_summary(load_results(out)).set_index(["kind", "name"])
    table = load_results(out)
    best = table[table["order"] == "best"]
    ratios = best["peak"] / best["peak_ref"]
    expected = math.exp(ratios.map(math.log).mean()) - 1
    assert summary.loc[("order", "best"), "geo-mean gap"] == pytest.approx(expected)
    assert summary.loc[("order", "best"), "worst gap"] == pytest.approx(ratios.max() - 1)
    proven = best["peak_ref_status"] == "optimal"
    assert summary.loc[("order", "best"), "at optimum"] == ((best["peak"] == best["peak_ref"]) & proven).sum()
    assert "at optimum" in format_summary(summary.reset_index())


def test_rows_record_their_settings_and_the_directory_its_config(finished):
    config, out, _ = finished
    table = load_results(out)
    assert (out / "config.toml").read_text() == config.read_text()
    row = table.iloc[0]
    assert row["reference_time_limit"] == 5 and row["cell_timeout"] == 60 and row["timing_repeat"] == 5
    assert row["timing_threads"] == 1 and row["isa"] in ("avx512", "avx2", "none")
    assert row["gcc_version"].startswith("g++") and row["machine"]
    assert json.loads(row["code_parts"]).keys() == {"stax", "solvers", "instances", "experiments"}


def test_missing_values_are_null_in_both_tables(finished):
    _, out, _ = finished
    for table in (load_results(out / "results.parquet"), load_results(out / "results.csv")):
        tree = table[table["family"] == "vsep_tree"]
        assert tree["fusion"].isna().all() and tree["dependence"].isna().all() and table["file"].isna().all()
        assert not table.isin(["-", ""]).any().any()


def test_dry_run_lists_cells_and_counts_the_done(finished, tmp_path):
    config, out, _ = finished
    result = run("sweep", str(config), "--out", str(out), "--dry-run")
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == f"{CELLS} cells: {CELLS} already done, 0 stale, 0 new"
    fresh = run("sweep", str(config), "--out", str(tmp_path / "none"), "--dry-run")
    assert fresh.output.splitlines()[-1] == f"{CELLS} cells: 0 already done, 0 stale, {CELLS} new"
    assert fresh.output.count("to run") == CELLS and not (tmp_path / "none").exists()


def test_stale_cells_are_explained_and_kept_on_request(finished, tmp_path, monkeypatch):
    config, out, _ = finished
    parts = {**provenance.code_parts(), "stax": "edited"}
    monkeypatch.setattr(provenance, "code_parts", lambda: parts)
    monkeypatch.setattr(provenance, "code_version", lambda: "0-edited")
    dry = run("sweep", str(config), "--out", str(out), "--dry-run")
    assert dry.output.splitlines()[-1] == f"{CELLS} cells: 0 already done, {CELLS} stale, 0 new"
    assert "stale (stax changed)" in dry.output
    kept = run("sweep", str(config), "--out", str(out), "--keep-stale")
    assert f"stax changed: {CELLS} cells kept (--keep-stale)" in kept.output and kept.exit_code == 0
    table = load_results(out)
    assert len(table) == CELLS and table["reused_from"].notna().all()
    assert (table["code_version"] != "0-edited").all()  # a reused row keeps the version that computed it


def test_an_edit_outside_the_computing_modules_keeps_the_key():
    names = {p.name for p in provenance.cell_modules()}
    assert {"measure.py", "cells.py", "config.py"} <= names
    assert not names & {"plots.py", "report.py", "sweep.py", "summary.py"}


def test_failed_cells_fail_the_command_unless_allowed(tmp_path):
    # a replayed partition naming no node of the instance fails every cell in its validator,
    # whatever the machine's speed (a tiny time limit did not: a cell can finish within it)
    config = write(tmp_path)
    text = config.read_text().replace('fusion = ["none", "greedy"]',
                                      'fusion = [{name = "replay", params = {partition = [["no_such_node"]]}}]')
    config.write_text(text.replace('[[families]]\nname = "vsep_tree"\nsizes = [6]\n', ""))
    result = run("sweep", str(config), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: 2 of 2 cells failed or timed out") and "--allow-failures" in last
    allowed = run("sweep", str(config), "--out", str(tmp_path / "out"), "--allow-failures")
    assert allowed.exit_code == 0
    plot = CliRunner().invoke(main, ["plot", str(tmp_path / "out")])
    assert plot.exit_code == 1 and "no figure to draw: 0 of 2 cells finished" in plot.output


def test_ctrl_c_says_what_is_saved_and_how_to_resume(tmp_path):
    config, out = write(tmp_path, limit=2), tmp_path / "out"
    config.write_text(config.read_text().replace("sizes = [8]", "sizes = [8, 10, 12, 14]"))
    process = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(config), "--out", str(out),
                                "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((out / "cells").glob("*.json"))) < 2:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: interrupted: the ") and f"saved in {out / 'cells'}" in last
    assert f"`stax sweep {config} --out {out}` resumes" in last
    saved = int(last.split("the ")[1].split()[0])
    assert saved == len(list((out / "cells").glob("*.json")))
