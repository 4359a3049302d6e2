"""Sweeps on a real Dask cluster: `dask scheduler` and two `dask worker` processes (with nannies)
started through their command-line entry points on 127.0.0.1.

Same table as a local run, a cell's time limit on a worker, a worker killed mid-sweep, a
scheduler lost mid-sweep, mismatched workers refused, a wrong address failing fast.  Every test
is bounded by an alarm and every process started here is killed with its process group.
"""
from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from experiments.sweep.cells import plan
from experiments.sweep.cluster import ClusterError, connect
from experiments.sweep.config import load_config
from experiments.sweep.results import load_results
from experiments.sweep.run import run_sweep
from tests.helpers import ROOT

distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")

DASK = Path(sys.executable).parent / "dask"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
CONFIG = """
name = "cluster"
seed = 4
seeds = {seeds}
cell_timeout = {timeout}
measures = {measures}
fusion = {fusion}
order = ["original", "best"]
[reference]
time_limit = {limit}
[timing]
repeat = 3
[[families]]
name = "layered"
sizes = {sizes}
{more}
"""
SLOW_CELLS = dict(seeds=4, sizes="[30]", limit=0.2,
                  fusion='[{name = "cpsat", params = {time_limit = 0.4, workers = 1}}]')
DETERMINISTIC = ["cell", "instance", "fusion", "order", "status", "traffic", "traffic_ref", "traffic_ref_status",
                 "traffic_ref_bound", "traffic_best", "peak", "peak_ref", "peak_ref_status", "peak_ref_bound",
                 "peak_best", "kernels"]


@pytest.fixture(autouse=True)
def time_guard():
    """Fail a test that runs longer than 120 s (its fixtures then kill what it started)."""
    def expire(*_):
        raise TimeoutError("the test ran longer than its 120 s guard")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def write_config(folder: Path, seeds: int = 1, timeout: float = 60, fusion: str = '["none", "greedy"]',
                 sizes: str = "[8]", limit: float = 5, measures: str = '["traffic", "peak", "optimum"]',
                 more: str = "") -> Path:
    path = folder / "sweep.toml"
    path.write_text(CONFIG.format(seeds=seeds, timeout=timeout, fusion=fusion, sizes=sizes, limit=limit,
                                  measures=measures, more=more))
    return path


def sweep(config: Path, out: Path, **kwargs):
    return run_sweep(load_config(config), out, progress=False, echo=lambda _: None, **kwargs)


def start(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(DASK), *args], env=ENV, start_new_session=True,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


@contextmanager
def dask_cluster(folder: Path, workers: int):
    """A scheduler and ``workers`` single-threaded nanny workers; yields (address, processes)."""
    folder.mkdir(parents=True, exist_ok=True)
    scheduler_file = folder / "scheduler.json"
    processes = [start("scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                       "--scheduler-file", str(scheduler_file), log=folder / "scheduler.log")]
    try:
        deadline = time.time() + 60
        while not scheduler_file.exists() and time.time() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        processes += [start("worker", address, "--nthreads", "1", "--dashboard-address", ":0",
                            log=folder / f"worker{i}.log") for i in range(workers)]
        with distributed.Client(address, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=60)
        yield address, processes
    finally:
        stop(processes)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("cluster"), workers=2) as (address, _):
        yield address


def cli_sweep(config: Path, out: Path, address: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(config), "--out", str(out),
                             "--scheduler", address], env=ENV, start_new_session=True,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_for_cells(out: Path, count: int, process: subprocess.Popen) -> int:
    deadline = time.time() + 60
    while time.time() < deadline and process.poll() is None:
        done = len(list((out / "cells").glob("*.json")))
        if done >= count:
            return done
        time.sleep(0.05)
    raise AssertionError(f"the sweep did not record {count} cells (exit code {process.poll()})")


def test_cluster_gives_the_same_table_as_local(cluster, tmp_path):
    program = '[[families]]\nname = "softmax"\nsizes = [64]'
    config = write_config(tmp_path, seeds=2, measures='["traffic", "peak", "optimum", "kernel_time"]', more=program)
    local = sweep(config, tmp_path / "local", workers=2).table
    remote = sweep(config, tmp_path / "dask", scheduler=cluster).table
    assert (remote["status"] == "ok").all() and len(remote) == len(plan(load_config(config), "v"))
    key = ["cell"]
    pd.testing.assert_frame_equal(local[DETERMINISTIC].sort_values(key).reset_index(drop=True),
                                  remote[DETERMINISTIC].sort_values(key).reset_index(drop=True))
    timed = remote["kind"] == "program"
    assert (remote.loc[timed, "timed_on"] == platform.node()).all() and remote.loc[~timed, "timed_on"].isna().all()
    assert remote.loc[timed, "kernel_time_median"].gt(0).all()


def test_cell_over_its_time_limit_is_killed_on_a_worker(cluster, tmp_path):
    config = write_config(tmp_path, timeout=1.5, sizes="[150]",
                          fusion='[{name = "cpsat", params = {time_limit = 60, workers = 1}}]')
    table = sweep(config, tmp_path / "out", scheduler=cluster).table
    assert (table["status"] == "timeout").all() and table["error"].str.contains("killed").all()
    assert (table["cell_seconds"] < 10).all()


def test_worker_killed_mid_sweep_every_cell_once(cluster, tmp_path):
    config = write_config(tmp_path, **SLOW_CELLS)
    total = len(plan(load_config(config), "v"))
    out = tmp_path / "out"
    process = cli_sweep(config, out, cluster, tmp_path / "sweep.log")
    try:
        done = wait_for_cells(out, 2, process)
        with distributed.Client(cluster, set_as_default=False) as client:
            victim = next(iter(client.run(os.getpid).values()))
        os.kill(victim, signal.SIGKILL)  # its nanny starts a new worker; its cells run again
        assert process.wait(timeout=90) == 0, (tmp_path / "sweep.log").read_text()[-2000:]
    finally:
        stop([process])
    assert done < total, "the kill should land in the middle of the sweep"
    table = load_results(out)
    assert len(table) == total and table["cell"].is_unique and (table["status"] == "ok").all()
    assert sweep(config, out, workers=2).skipped == total  # nothing to redo


def test_lost_scheduler_keeps_finished_rows_and_resumes(tmp_path):
    config = write_config(tmp_path, **SLOW_CELLS)
    total = len(plan(load_config(config), "v"))
    out = tmp_path / "out"
    with dask_cluster(tmp_path / "cluster", workers=1) as (address, processes):
        process = cli_sweep(config, out, address, tmp_path / "sweep.log")
        try:
            wait_for_cells(out, 2, process)
            stop(processes[:1])
            assert process.wait(timeout=60) != 0
        finally:
            stop([process])
    message = (tmp_path / "sweep.log").read_text().strip().splitlines()[-1]
    assert "lost the Dask scheduler" in message and "rerun" in message
    done = len(list((out / "cells").glob("*.json")))
    assert 2 <= done < total
    summary = sweep(config, out, workers=2)
    assert summary.skipped == done and len(summary.table) == total and summary.table["cell"].is_unique


def test_workers_of_another_version_are_refused(cluster, monkeypatch):
    import experiments.sweep.cluster  # connect's own name for provenance.versions
    monkeypatch.setattr(experiments.sweep.cluster, "versions", lambda: {"stax": "0.0.0-other", "python": "2.7.18"})
    with pytest.raises(ClusterError, match=r"refusing the cluster: worker .* stax .* on Python .*, the sweep's "
                                           r"client stax 0\.0\.0-other on Python 2\.7\.18"):
        connect(cluster)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", [f"tcp://127.0.0.1:{free_port()}", "nonsense-address"])
def test_unusable_address_fails_in_one_line_within_5_s(tmp_path, address):
    config = write_config(tmp_path)
    start_time = time.time()
    result = subprocess.run([sys.executable, "-m", "experiments.cli", "sweep", str(config), "--out", str(tmp_path / "out"),
                             "--scheduler", address], env=ENV, capture_output=True, text=True, timeout=30)
    assert time.time() - start_time < 5
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and address in lines[0] and "dask scheduler" in lines[0], result.stderr
