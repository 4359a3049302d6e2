"""The command line: ``stax compile`` (a function from a file compiled with the chosen strategies,
parameters, threads and vector level, run on random inputs and checked against the numpy
reference) and ``stax plot``/``report`` on what is not a results table; bad arguments are named."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from click.testing import CliRunner

from experiments.cli import main
from stax.target import ISA_LEVELS, runs_here

PROGRAM = '''
def bias_gelu(x, b):
    y = x + b
    return y * 0.5 * (1 + (y * 0.7071067811865476).erf())
'''


@pytest.fixture
def target(tmp_path) -> str:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return f"{path}:bias_gelu"


def _compile(*args: str):
    return CliRunner().invoke(main, ["compile", *args], catch_exceptions=False)


def _max_difference(output: str) -> float:
    return float(re.search(r"max abs difference from the numpy reference (\S+)", output).group(1))


@pytest.mark.parametrize("options", [[], ["--fusion", "cpsat", "--fusion-param", "time_limit=5",
                                          "--fusion-param", "workers=1"],
                                     ["--order", "dp", "--order-param", "max_states=1000", "--threads", "1",
                                      "--isa", "none", "--show-code"]])
def test_a_function_compiles_runs_and_matches_the_reference(target, options):
    result = _compile(target, "--shapes", "64x128,128", *options)
    assert result.exit_code == 0, result.output
    assert _max_difference(result.output) < 1e-5
    assert re.search(r"1 kernel in 1 call, modeled traffic 66048 B, median time \S+ us", result.output)
    if "cpsat" in options:
        assert "strategy cpsat: optimal" in result.output
    if "--show-code" in options:
        assert "extern \"C\" void cpp_fused_op0(" in result.output and "stax::vload" not in result.output  # scalar


@pytest.mark.parametrize("args,message", [
    (["--fusion", "cpsat", "--fusion-param", "time_limt=5"],
     "--fusion-param \\['time_limt'\\] do not fit fusion strategy 'cpsat'.*did you mean 'time_limit'\\? it takes time_limit"),
    (["--fusion-param", "5"], "'5' is not KEY=VALUE"),
    (["--isa", "sse"], "isa='sse' is not a level; use one of avx512, avx2, none"),
    (["--threads", "0"], "0 is not in the range x>=1"),
    (["--fusion", "fastest"], "no fusion strategy named 'fastest'"),
])
def test_bad_options_are_named(target, args, message):
    result = _compile(target, "--shapes", "64x128,128", *args)
    assert result.exit_code != 0
    assert re.search(message, result.output), result.output


def test_bad_targets_and_shapes_are_named(target, tmp_path):
    assert "no such file" in _compile(f"{tmp_path}/missing.py:f", "--shapes", "4").output
    assert "defines no function 'gelu'" in _compile(target.replace("bias_gelu", "gelu"), "--shapes", "4").output
    assert "expected FILE.py:FUNCTION" in _compile("program.py", "--shapes", "4").output
    assert "expected shapes like 64x128" in _compile(target, "--shapes", "64by128").output


def test_a_level_this_cpu_lacks_compiles_but_does_not_run(target):
    """An AVX-512 build on a CPU without AVX-512 is refused at its call, not by an illegal
    instruction ending the process; where the CPU has it, it runs."""
    result = _compile(target, "--shapes", "64x128,128", "--isa", "avx512")
    if runs_here(ISA_LEVELS["avx512"]):
        assert result.exit_code == 0 and _max_difference(result.output) < 1e-5
    else:
        assert result.exit_code != 0
        assert "compiled for avx512, which this CPU does not have" in result.output


def test_the_refusal_of_a_level_the_cpu_lacks_is_printed(target, cpu_without_avx512):
    result = _compile(target, "--shapes", "64x128,128", "--isa", "avx512")
    assert result.exit_code != 0
    assert "compiled for avx512, which this CPU does not have (its widest level is avx2)" in result.output


@pytest.mark.parametrize("command", ["plot", "report"])
def test_plot_and_report_name_what_is_not_a_results_table(tmp_path, command):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    pd.DataFrame({"a": [1], "b": [2]}).to_csv(tmp_path / "other.csv", index=False)
    for path, message in ((tmp_path / "empty", "no results table here; run `stax sweep CONFIG --out DIR` first"),
                          (tmp_path / "notes.txt", "a results table is a results directory, a .parquet or a .csv file"),
                          (tmp_path / "broken.parquet", "not a readable table"),
                          (tmp_path / "other.csv", "not a sweep's results table \\(no column cell, family, kind")):
        result = CliRunner().invoke(main, [command, str(path)])
        assert result.exit_code == 1, result.output  # a command-line error, not a traceback
        assert re.search(f"Error: .*{message}", result.output), result.output


def test_a_report_of_a_small_table_counts_its_cells_and_shows_its_failures(tmp_path):
    rows = {"cell": ["c0", "c1"], "family": ["layered"] * 2, "kind": ["fusion"] * 2, "instance": ["a", "b"],
            "fusion": ["greedy"] * 2, "order": ["best"] * 2, "status": ["ok", "failed"],
            "error": [None, "Traceback (most recent call last):\nValueError: boom"], "date": ["2026-12-01"] * 2}
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    result = CliRunner().invoke(main, ["report", str(tmp_path / "results.csv")], catch_exceptions=False)
    page = (tmp_path / "report.html").read_text()
    assert result.output.strip() == str(tmp_path / "report.html")
    assert "2 cells: 1 ok, 1 failed" in page and "ValueError: boom" in page
