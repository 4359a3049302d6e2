"""The benchmark scripts stay runnable: one small row of the suite benchmark, its fraction of
STREAM taken pair by pair, no page faults on repeated calls, the region benchmark's two runtimes,
the transposed-add candidates' results, a row of the narrow GEMM benchmark (the speed figures
themselves are the benchmarks' to print, not a test's)."""
import math
import os

import numpy as np
import pytest

from experiments.bench.bandwidth import Stream
from experiments.bench.regions import best_seconds
from experiments.bench.transposed import kernels as transposed_candidates
from experiments.bench.suite import PAIRS, measure, measure_idiom
from stax.runtime import build as runtime


def test_a_suite_row_pairs_its_timings_with_stream_runs(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # Stream sets it when unset; the test leaves it as it was
    stream = Stream(1 << 16, 1)
    calls = {"stream": 0}
    best = stream.best

    def counted(repeat: int = 1) -> float:
        calls["stream"] += 1
        return best(repeat)
    monkeypatch.setattr(stream, "best", counted)
    row = measure("softmax", (64, 128), stream, inductor=False)
    assert calls["stream"] == PAIRS
    assert row["kernels greedy"] == 1 and row["faults/call"] == 0
    assert row["size"] == "64x128" and row["modeled MB"] == 2 * 64 * 128 * 4 / 1e6
    assert row["stax us"] > 0 and math.isfinite(row["of STREAM"]) and row["of STREAM"] > 0
    assert math.isclose(row["GB/s"], row["modeled MB"] * 1e6 / (row["stax us"] * 1e-6) / 1e9)


def test_an_idiom_row_times_the_idiom_beside_its_hand_expanded_form():
    row = measure_idiom("polynomial_pow", (16, 32), inductor=False, threads=1)
    assert row["hand-expanded"] == "polynomial" and not row["vector pow"]
    assert row["idiom us"] > 0 and row["hand us"] > 0
    assert math.isclose(row["idiom/hand"], row["idiom us"] / row["hand us"])


def test_the_region_benchmark_times_each_runtime_it_names(no_straggler_rule):
    """bench_regions' two builds of one loop: the pool's counts its regions on the pool, and
    libgomp's leaves the pool's count alone."""
    pooled = runtime.parallel_stats()["pooled"]
    assert best_seconds("pool", 64, threads=2, batches=1) > 0
    after_pool = runtime.parallel_stats()["pooled"]
    assert after_pool > pooled
    assert best_seconds("libgomp", 64, threads=2, batches=1) > 0
    assert runtime.parallel_stats()["pooled"] == after_pool


def test_the_transposed_add_candidates_compute_numpys_result():
    """bench_transposed's hand-written layouts and the generated kernel, at 1024 x 1024; of the
    parts of the strips' work, the reads sum what phase 1 loads (y, every element once) and
    phase 1 writes only its buffers."""
    rng = np.random.default_rng(3)
    x, y = (rng.random((1024, 1024), dtype=np.float32) for _ in range(2))
    for label, fn in transposed_candidates(1024).items():
        out = np.full_like(x, np.nan)
        result = fn(x, y, out)
        if label == "strips 256 reads":
            np.testing.assert_allclose(result[0, 0], y.sum(dtype=np.float64), rtol=1e-4)
        elif label == "strips 256 phase 1":  # the buffers only: out stays as it was
            assert np.isnan(result).all()
        else:
            np.testing.assert_array_equal(result, x + y if label == "stream x + y" else x + y.T, err_msg=label)


def test_the_contention_benchmark_prints_quiet_and_loaded_percentiles(capsys):
    """bench_contention on a tiny softmax, briefly: a row per thread count, each with p50 <= p99
    in every condition and the goal judged from them."""
    from experiments.bench.contention import CONDITIONS, main
    rows = main(["--sizes", "16x32", "--programs", "softmax", "--seconds", "0.02", "--no-inductor"])
    assert [r["runtime"] for r in rows] == ["stax 1 thread", "stax 2 threads"]
    for row in rows:
        for condition in CONDITIONS:
            assert 0 < row[f"{condition} p50"] <= row[f"{condition} p99"] < 1e6
        assert row["goal"] == ("met" if row["worst p50/1t"] <= 1.3 and row["worst p99/1t"] <= 2 else "missed")
    assert rows[0]["worst p99/1t p99"] == 1.0 and rows[0]["excess slow %"] == 0  # one thread against itself
    assert -100 <= rows[1]["excess slow %"] <= 100
    assert "pool" not in rows[0] and rows[1]["pool"].startswith("quiet: ") and "stragglers" in rows[1]["pool"]
    printed = capsys.readouterr().out
    for row in rows:  # each runtime's summary: its one row, met or not, at the one size
        met = int(row["goal"] == "met")
        assert f"{row['runtime']}: goal met on {met} of 1 rows (16x32 {met}/1)" in printed


def test_the_contention_benchmark_times_a_zoo_models_training_step():
    """--models: a row per runtime for the model's training step, quiet only here, with stax's
    pool use; the suite programs are left out."""
    pytest.importorskip("torch", reason="--models needs torch: pip install 'stax[torch]'")
    from experiments.bench.contention import main
    rows = main(["--models", "gru_cell", "--small-models", "--seconds", "0.02", "--conditions", "quiet"])
    assert [(r["program"], r["size"], r["runtime"]) for r in rows] == [
        ("gru_cell", "training step", label) for label in
        ("stax 1 thread", "stax 2 threads", "inductor 1 thread", "inductor 2 threads")]
    assert all(0 < r["quiet p50"] <= r["quiet p99"] for r in rows)
    assert "regions" in rows[1]["pool"]


def test_the_contention_benchmark_times_its_runtimes_in_turns_and_in_the_conditions_asked():
    """per_call gives each function its turns (blocks of calls, none left behind), and a quiet
    run shows quiet columns only."""
    from experiments.bench.contention import main, per_call
    calls = {"a": 0, "b": 0}

    def count(label):
        def call():
            calls[label] += 1
        return call
    figures = per_call({"a": count("a"), "b": count("b")}, seconds=0.01, least=20, block=5)
    assert figures["a"].calls == figures["b"].calls >= 20 and calls["a"] == calls["b"] == figures["a"].calls + 3
    rows = main(["--sizes", "16x32", "--programs", "softmax", "--seconds", "0.01", "--no-inductor",
                 "--conditions", "quiet"])
    assert not [column for column in rows[0] if "nice" in column]


def test_the_co_runner_is_a_busy_loop_on_one_core_at_its_nice_level():
    from experiments.bench.contention import co_runner
    with co_runner("quiet") as none:
        assert none is None
    with co_runner("nice 19") as busy:
        status = open(f"/proc/{busy.pid}/stat").read().rsplit(")", 1)[1].split()
        allowed = open(f"/proc/{busy.pid}/status").read().split("Cpus_allowed_list:")[1].split()[0]
        assert int(status[16]) == 19 and allowed == str(max(os.sched_getaffinity(0)))
    assert busy.poll() is not None  # stopped


def test_the_timing_agreement_compares_cells_pass_by_pass():
    """timing_agreement pairs the passes' cells by instance and strategies, and counts a cell as
    agreeing when the ratio of its medians (or of its fastest batches) lies in 0.8-1.25."""
    import pandas as pd
    from experiments.studies.timing_agreement import agreement, summary
    first = pd.DataFrame({"instance": ["a", "b", "c"], "fusion": "greedy", "order": "original",
                          "median": [1.0, 1.0, 1.0], "best": [0.9, 0.9, 0.9], "noisy": [False, True, False],
                          "repeats": 7, "load": [1.0, 3.0, 9.0], "yardstick": 1.0})
    second = first.iloc[::-1].assign(median=[3.0, 1.2, 0.79], best=[0.95, 0.9, 0.5],  # rows in another order
                                     yardstick=[1.5, 1.0, 1.0])
    both = agreement(first, second).set_index("instance")
    assert both["ratio"].round(6).to_dict() == {"a": 0.79, "b": 1.2, "c": 3.0}
    assert both["drift"].round(6).to_dict() == {"a": 1.0, "b": 1.0, "c": 1.5}  # the machine ran 1.5x slower at c
    assert both["best_ratio"].round(6).to_dict() == {"a": round(0.5 / 0.9, 6), "b": 1.0, "c": round(0.95 / 0.9, 6)}
    assert both["noisy"].to_dict() == {"a": False, "b": True, "c": False}
    lines = summary(both.reset_index())
    assert lines[0].startswith("3 cells: medians within 0.8-1.25x 33%, fastest batches 67%")
    assert lines[1].startswith("  the yardstick beside each cell: within 67% (spread")
    assert "  noisy in a pass True: 1 cells, medians 100%, fastest batches 100%" in lines


def test_the_tuning_benchmark_times_a_threshold_that_changes_the_code():
    """The split-reduction threshold on a tall column sum: never splitting generates other C++,
    timed against the default in the same rounds."""
    from experiments.bench.tuning import CASES, measure
    case = next(c for c in CASES if c.threshold == "split_min_rows" and c.shapes == ((65536, 32),))
    [row] = measure(case, rounds=1, scale=0.05)
    assert row["value"] == "never" and row["default"] == 256
    assert isinstance(row["over default"], float) and math.isfinite(row["over default"]) and row["default us"] > 0


def test_the_narrow_gemm_benchmark_times_both_products_ours_and_the_blas():
    """One small row: a rate for each of the four calls (the speeds are the benchmark's to print)."""
    from experiments.bench.narrow_gemm import row
    rates = row("16x32x512", threads=1, rounds=1)
    assert set(rates) == {"forward ours", "forward blas", "gradient ours", "gradient blas"}
    assert all(math.isfinite(r) and r > 0 for r in rates.values()), rates


def test_the_zoo_judges_its_goal_by_the_ratios_interval():
    from experiments.models.inductor_timing import goal_verdict
    assert goal_verdict(0.9, (0.85, 0.97)) == "met"
    assert goal_verdict(0.95, (0.9, 1.0)) == "met"  # at most 1.0: the bound counts
    assert goal_verdict(1.1, (1.02, 1.2)) == "missed"
    assert goal_verdict(0.98, (0.9, 1.05)) == "open<=1"
    assert goal_verdict(1.03, (0.97, 1.1)) == "open>1"
