"""The sweeps' timing protocol (stax.measure.timing.measure): the median's confidence interval covers the
true median as often as it claims, a steady call stops early with a narrow interval, and an
erratic one is flagged noisy at the time cap."""
import itertools
import time

import numpy as np

from stax.measure.timing import measure, median_interval


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(29)
    for n in (7, 30, 200):
        covered = 0
        for _ in range(2000):
            low, high = median_interval(rng.exponential(size=n))
            covered += low <= np.log(2) <= high  # the exponential's median
        assert 0.93 <= covered / 2000 <= 0.995, (n, covered / 2000)


def test_a_steady_call_gives_a_narrow_interval_and_stops_early():
    t = measure(lambda: time.sleep(0.0002), threads=1, isa="avx2", min_repeats=5, batch_seconds=0.002, time_cap=5,
                rel_ci=0.1)
    assert not t.noisy and t.relative_ci <= 0.1 and t.repeats < 500
    assert 0.0002 <= t.median < 0.002 and t.ci_low <= t.median <= t.ci_high and t.iqr >= 0
    assert (t.threads, t.isa) == (1, "avx2") and t.load_average >= 0 and t.number >= 1


def test_an_erratic_call_is_flagged_noisy_at_the_time_cap():
    pauses = itertools.cycle([0.0001, 0.0001, 0.003, 0.0001, 0.002])  # batches of one call: spread kept
    start = time.perf_counter()
    t = measure(lambda: time.sleep(next(pauses)), threads=2, isa="none", min_repeats=5, batch_seconds=0,
                time_cap=0.1, warmup_seconds=0)
    assert t.noisy and t.relative_ci > 0.05 and t.number == 1
    assert time.perf_counter() - start < 1.0


def test_a_sweeps_timed_cell_records_the_protocols_columns(tmp_path):
    """A program cell measuring kernel time carries the median with its interval and spread, the
    repeats, threads, ISA, load average and the noisy flag."""
    from experiments.sweep.config import load_config
    from experiments.sweep.run import run_sweep
    config = tmp_path / "timed.toml"
    config.write_text('name = "timed"\nseed = 1\nseeds = 1\nmeasures = ["traffic", "kernel_time"]\n'
                      'fusion = ["greedy"]\norder = ["original"]\n[timing]\nrepeat = 5\nthreads = 1\n'
                      '[[families]]\nname = "softmax"\nsizes = [16]\n')
    table = run_sweep(load_config(config), tmp_path / "out", progress=False, echo=lambda _: None).table
    row = table.iloc[0]
    assert row["status"] == "ok", row.to_dict()
    assert row["kernel_time_best"] <= row["kernel_time_min"] <= row["kernel_time_median"] <= row["kernel_time_max"]
    assert row["kernel_time_repeats"] >= 5 and row["kernel_time_threads"] == 1 and row["kernel_time_iqr"] >= 0
    assert row["kernel_time_isa"] in ("avx512", "avx2", "none") and row["load_average"] >= 0
    assert row["kernel_time_noisy"] in (True, False)
