"""Would two identical sweeps time their cells alike?  The timed cells of a sweep config (the
main job's by default) are run as a sweep runs them (experiments.sweep.measure.run_cell: compile, then
stax.measure.timing.measure), in passes one after the other, each pass a process of its own; the script
prints the fraction of cells whose medians in two passes agree within 0.8-1.25x, overall and
split by what may explain the rest: the noisy flag, the load average, the time per call, and
the same fraction for the passes' fastest batch instead of their median.  Beside every cell it
times a yardstick, a fixed numpy workload, by the same protocol: the yardstick's own agreement
is how far the machine's speed moved between the passes, the floor under any protocol's.  A
benchmark, not a test.

    python -m experiments.studies.timing_agreement [--config PATH] [--orders original] [--passes 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from experiments.report.compare import AGREE as BAND, within
from stax.measure.timing import measure

MAIN = Path(__file__).parent.parent / "configs" / "main.toml"


def yardstick() -> Callable[[], object]:
    """The fixed workload timed beside every cell: numpy doubling 2^16 floats into a second
    array (512 KiB in all, within a core's L2; tens of microseconds, like the cells)."""
    source = np.arange(1 << 16, dtype=np.float32)
    target = np.empty_like(source)
    return lambda: np.multiply(source, 2.0, out=target)


def one_pass(config: Path, orders: list[str] | None) -> list[dict]:
    """Every timed program cell of ``config`` (of ``orders`` only, when given), run in this
    process, each followed by the yardstick's timing."""
    from experiments.sweep.cells import plan
    from experiments.sweep.config import load_config
    from experiments.sweep.measure import run_cell
    cells = [c for c in plan(load_config(config), "agreement")
             if c.kind == "program" and "kernel_time" in c.measures and (not orders or c.order.name in orders)]
    rows, reference = [], yardstick()
    for cell in cells:
        metrics, _ = run_cell(cell)
        rows.append({"yardstick": measure(reference, 1, "numpy").median,"instance": cell.instance, "fusion": cell.fusion.label, "order": cell.order.label,
                     "median": metrics["kernel_time_median"], "best": metrics["kernel_time_best"],
                     "noisy": metrics["kernel_time_noisy"], "repeats": metrics["kernel_time_repeats"],
                     "load": metrics["load_average"]})
    return rows


def agreement(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Per cell, the two passes side by side with the ratio of their medians and of their best batches."""
    both = first.merge(second, on=["instance", "fusion", "order"], suffixes=("_a", "_b"))
    return both.assign(ratio=both["median_b"] / both["median_a"], best_ratio=both["best_b"] / both["best_a"],
                       drift=both["yardstick_b"] / both["yardstick_a"],
                       noisy=both["noisy_a"] | both["noisy_b"], load=(both["load_a"] + both["load_b"]) / 2)


def summary(both: pd.DataFrame) -> list[str]:
    """The fractions within the band: overall, by noisy flag, by load and by time per call."""
    lines = [f"{len(both)} cells: medians within {BAND[0]}-{BAND[1]}x {within(both['ratio']):.0%}, "
             f"fastest batches {within(both['best_ratio']):.0%}; median ratio spread "
             f"{both['ratio'].quantile(0.05):.2f}-{both['ratio'].quantile(0.95):.2f} (5-95%)",
             f"  the yardstick beside each cell: within {within(both['drift']):.0%} (spread "
             f"{both['drift'].quantile(0.05):.2f}-{both['drift'].quantile(0.95):.2f})"]
    for name, groups in (("noisy in a pass", both.groupby("noisy")),
                         ("load average", both.groupby(pd.cut(both["load"], [0, 2, 4, 8, 1e9]), observed=True)),
                         ("time per call", both.groupby(pd.cut(both["median_a"] * 1e6, [0, 10, 100, 1000, 1e9]),
                                                        observed=True))):
        for key, group in groups:
            lines.append(f"  {name} {key}: {len(group)} cells, medians {within(group['ratio']):.0%}, "
                         f"fastest batches {within(group['best_ratio']):.0%}")
    return lines


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=MAIN, help="a sweep config (default: the main job's)")
    parser.add_argument("--orders", nargs="+", help="order strategies to keep (default: every one of the config)")
    parser.add_argument("--passes", type=int, default=2, help="passes, each compared with the first (default 2)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a pass's process writes its rows here
    args = parser.parse_args(argv)
    if args.one:
        args.one.write_text(json.dumps(one_pass(args.config, args.orders)))
        return pd.DataFrame()
    passes = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.passes):
            out = Path(folder) / f"pass{i}.json"
            print(f"pass {i + 1} of {args.passes}, load average {os.getloadavg()[0]:.2f}", flush=True)
            subprocess.run([sys.executable, "-m", "experiments.studies.timing_agreement", "--config", str(args.config),
                            "--one", str(out), *(["--orders", *args.orders] if args.orders else [])], check=True)
            passes.append(pd.DataFrame(json.loads(out.read_text())))
    print(f"load average after the passes {os.getloadavg()[0]:.2f}")
    tables = [agreement(passes[0], later) for later in passes[1:]]
    for i, both in enumerate(tables, start=2):
        print(f"pass 1 against pass {i}:")
        print("\n".join(summary(both)))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


if __name__ == "__main__":
    main()
