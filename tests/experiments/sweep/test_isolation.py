"""A sweep cell's process: its time limit kills its whole tree, so does the death of the process that
asked for it; timing cells run alone on a machine."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from experiments.sweep.isolate import call_with_limit
from experiments.sweep.machine_lock import machine_share
from tests.helpers import ROOT


def running(argument: str) -> list[str]:
    """Pids of processes whose command line has ``argument``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(cmdline.parent.name)
        except OSError:
            pass
    return found


def test_time_limit_kills_the_cells_whole_process_tree():
    marker = f"{time.time() % 1000 + 100:.6f}"  # a sleep no other process runs
    status, message = call_with_limit(subprocess.run, (["sleep", marker],), 1.0)
    assert status == "timeout" and "killed" in message
    assert wait_until(lambda: not running(marker), 5), "the cell's child process outlived the cell"


def wait_until(condition, seconds: float) -> bool:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_cell_dies_with_the_process_that_asked_for_it():
    # a Dask worker or a sweep killed with SIGKILL leaves no cell running
    marker = f"{time.time() % 1000 + 1100:.6f}"
    asker = subprocess.Popen([sys.executable, "-c", "import subprocess\nfrom experiments.sweep.isolate import call_with_limit\n"
                              f"call_with_limit(subprocess.run, (['sleep', '{marker}'],), 600)"],
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             start_new_session=True)
    try:
        assert wait_until(lambda: running(marker), 60), "the cell never started"
        os.kill(asker.pid, signal.SIGKILL)
        asker.wait()
        assert wait_until(lambda: not running(marker), 5), "the cell outlived the process that asked for it"
    finally:
        os.killpg(asker.pid, signal.SIGKILL)
        asker.wait()


def test_cell_outcomes_come_back():
    assert call_with_limit(divmod, (7, 2), 10) == ("ok", (3, 1))
    status, message = call_with_limit(int, ("seven",), 10)
    assert status == "error" and "ValueError" in message


def test_a_timing_cell_waits_for_the_machine_and_holds_it_alone():
    events: list[str] = []
    shared_held, exclusive_waiting = threading.Event(), threading.Event()

    def timing_cell():
        exclusive_waiting.set()
        with machine_share(exclusive=True):
            events.append("timing starts")
            time.sleep(0.2)
            events.append("timing ends")

    def late_cell():
        with machine_share(exclusive=False):
            events.append("late cell")

    with machine_share(exclusive=False):
        shared_held.set()
        timing = threading.Thread(target=timing_cell)
        timing.start()
        exclusive_waiting.wait()
        time.sleep(0.2)
        late = threading.Thread(target=late_cell)  # arrives while the timing cell waits: must not overtake it
        late.start()
        time.sleep(0.2)
        events.append("first cell ends")
    timing.join(10)
    late.join(10)
    assert events == ["first cell ends", "timing starts", "timing ends", "late cell"]
