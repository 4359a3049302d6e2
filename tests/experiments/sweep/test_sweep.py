"""Sweeps: resume after a kill, failures recorded, time limits, config errors, one reference per problem
(on a real Dask cluster: test_cluster.py)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.sweep.cells import plan
from experiments.sweep.config import ConfigError, load_config
from experiments.sweep.results import ResultDir, load_results
from experiments.sweep.run import run_sweep

CHEAP = """
name = "cheap"
seed = 3
seeds = {seeds}
cell_timeout = {timeout}
measures = ["traffic", "peak", "optimum"]
fusion = {fusion}
order = ["original", "best"]
[reference]
time_limit = {limit}
[[families]]
name = "layered"
sizes = {sizes}
[[families]]
name = "vsep_tree"
sizes = [6]
"""


def write_config(tmp_path: Path, seeds: int = 1, timeout: float = 60, fusion: str = '["none", "greedy"]',
                 limit: float = 5, sizes: str = "[8]") -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(CHEAP.format(seeds=seeds, timeout=timeout, fusion=fusion, limit=limit, sizes=sizes))
    return path


def sweep(config: Path, out: Path, **kwargs):
    return run_sweep(load_config(config), out, progress=False, echo=lambda _: None, **kwargs)


def test_killed_sweep_resumes_with_every_cell_once(tmp_path):
    config = write_config(tmp_path, seeds=4, sizes="[8, 10]")
    total = len(plan(load_config(config), "v"))
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(config), "--out", str(out),
                                "--workers", "1"], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((out / "cells").glob("*.json"))) < 3:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done = len(list((out / "cells").glob("*.json")))
    assert 3 <= done < total, "the kill should land in the middle of the sweep"
    summary = sweep(config, out, workers=2)
    assert summary.skipped == done
    table = load_results(out)
    assert len(table) == total and table["cell"].is_unique and (table["status"] == "ok").all()
    assert not list(out.glob("**/*.tmp"))


def test_failing_cell_is_recorded_and_retried(tmp_path):
    # a parameter of the right name whose value fails only when the strategy runs
    config = write_config(tmp_path, fusion='["greedy", {name = "greedy", params = {max_rounds = "ten"}}]')
    out = tmp_path / "out"
    first = sweep(config, out, workers=2)
    table = first.table
    bad = table[table["fusion"] == "greedy(max_rounds=ten)"]
    assert len(bad) == 2 and (bad["status"] == "error").all()
    assert bad["error"].str.contains("TypeError").all()
    assert (table.loc[table["fusion"] != "greedy(max_rounds=ten)", "status"] == "ok").all()
    second = sweep(config, out, workers=2)
    assert second.skipped == len(table) - 2 and second.failed == 2  # failures are not cached as done
    with pytest.raises(TypeError, match="str"):
        sweep(config, out, raise_errors=True)


def test_cell_over_its_time_limit_is_killed(tmp_path):
    config = write_config(tmp_path, timeout=1.5, fusion='[{name = "cpsat", params = {time_limit = 60}}]', limit=60,
                          sizes="[150]")
    start = time.time()
    table = sweep(config, tmp_path / "out", workers=2).table
    layered = table[table["family"] == "layered"]
    assert (layered["status"] == "timeout").all() and layered["error"].str.contains("killed").all()
    assert (table.loc[table["family"] == "vsep_tree", "status"] == "ok").all()
    assert time.time() - start < 30


def test_cells_are_keyed_by_content_not_position(tmp_path):
    config = load_config(write_config(tmp_path, seeds=2))
    reordered = type(config)(**{**config.__dict__, "families": config.families[::-1], "order": config.order[::-1]})
    assert {c.key for c in plan(config, "v")} == {c.key for c in plan(reordered, "v")}
    assert {c.seed for c in plan(config, "v")} == {c.seed for c in plan(config, "v")}
    assert {c.key for c in plan(config, "v")}.isdisjoint({c.key for c in plan(config, "w")})


@pytest.mark.parametrize("text, field", [
    ("name = 3", "name"),
    ("fusion = ['greedy']\norder = ['best']\n[[families]]\nname = 'layered'\nsizes = [0]", "families[0].sizes"),
    ("fusion = ['nosuch']\norder = ['best']\n[[families]]\nname = 'layered'\nsizes = [8]", "fusion[0].name"),
    ("fusion = ['greedy']\norder = ['best']\nseedz = 2\n[[families]]\nname = 'layered'\nsizes = [8]", "seedz"),
    ("fusion = ['greedy']\norder = ['best']\n[[families]]\nname = 'nosuch'\nsizes = [8]", "families[0].name"),
    ("fusion = ['greedy']\norder = ['best']\n[reference]\ntime_limit = -1\n[[families]]\nname = 'layered'\n"
     "sizes = [8]", "reference.time_limit"),
    ("fusion = [{name = 'greedy', params = {bogus = 1}}]\norder = ['best']\n[[families]]\nname = 'layered'\n"
     "sizes = [8]", "fusion[0]': params ['bogus'] do not fit fusion strategy 'greedy"),
])
def test_malformed_config_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"bad.toml: field '{field}'")):
        load_config(path)


def test_config_that_is_not_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(path)


def test_cells_of_one_problem_share_one_reference_and_no_ratio_is_blank(tmp_path):
    # 0.01 s is too short for CP-SAT to prove these: references are bounded or heuristic
    config = write_config(tmp_path, seeds=2, fusion='["none", "greedy", {name = "mwc", params = {time_limit = 0.2}}]',
                          limit=0.01, sizes="[30]")
    out = tmp_path / "out"
    table = sweep(config, out, workers=2).table
    assert (table["status"] == "ok").all()
    for measure in ("traffic", "peak"):
        rows = table.dropna(subset=[measure])
        assert not rows[f"{measure}_ref_status"].eq("optimal").all(), "the time limit should leave some unproven"
        assert rows[f"{measure}_ref_status"].isin(["optimal", "bounded", "heuristic"]).all()
        per_problem = rows.groupby(f"{measure}_problem")
        for suffix in ("ref", "ref_bound", "ref_status", "ref_seconds", "best"):  # seconds: solved once
            assert (per_problem[f"{measure}_{suffix}"].nunique(dropna=False) == 1).all(), suffix
        best = per_problem[measure].transform("min").clip(upper=rows[f"{measure}_ref"])
        assert (rows[f"{measure}_best"] == best).all()
        assert (rows[f"{measure}_ref_bound"] <= rows[f"{measure}_best"]).all()
        for ratio in (f"{measure}_gap_best", f"{measure}_gap_bound"):
            assert rows[ratio].notna().all() and (rows[ratio] >= 0).all(), ratio
    problems = table["traffic_problem"].nunique() + table["peak_problem"].nunique()
    assert len(list((out / "refs").glob("*.json"))) == problems  # one reference each, solved once


def test_a_reference_the_solver_cannot_answer_in_time_still_bounds_its_rows(tmp_path):
    # the reference (CP-SAT for 60 s) outlives the cells' limit: it is killed, the rows stay done
    config = write_config(tmp_path, timeout=4, fusion='["greedy"]', limit=60, sizes="[80]")
    table = sweep(config, tmp_path / "out", workers=2).table
    layered = table[table["family"] == "layered"]
    assert (layered["status"] == "ok").all() and (layered["traffic_ref_status"] == "heuristic").all()
    assert layered["traffic_ref"].isna().all() and (layered["traffic_best"] == layered["traffic"]).all()
    assert layered["traffic_gap_bound"].notna().all() and (layered["traffic_ref_bound"] > 0).all()


def test_a_resumed_sweep_removes_the_temporary_files_of_killed_writers_only(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process of this host that has exited
    cells = ResultDir(tmp_path).cells
    here = socket.gethostname()
    orphan, live, remote = (cells / f".abc.json@{host}@{pid}@x1y2.tmp"
                            for host, pid in ((here, gone.pid), (here, os.getpid()), ("another-host", gone.pid)))
    for path in (orphan, live, remote):
        path.write_text("{")
    ResultDir(tmp_path)
    assert not orphan.exists() and live.exists() and remote.exists()
