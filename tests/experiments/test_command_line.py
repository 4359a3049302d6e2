"""The command line as a researcher meets it: version, strategies, help naming the valid values,
aligned tables, complete script help."""
import ast
import subprocess
import sys
from importlib.metadata import version

from click.testing import CliRunner

import stax
from stax.scheduler.catalog import entries
from experiments.cli import main
from stax.scheduler.strategies import fusion_strategies, order_strategies
from experiments.textable import text_table
from tests.helpers import ROOT



def test_version_comes_from_the_package_metadata():
    assert stax.__version__ == version("stax")
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"stax {version('stax')}\n"


def test_strategies_lists_every_name_with_parameters_and_its_own_doc():
    result = CliRunner().invoke(main, ["strategies"])
    assert result.exit_code == 0
    listed = {(e.kind, e.name): e for e in entries()}
    assert {n for k, n in listed if k == "fusion"} == set(fusion_strategies.names())
    assert {n for k, n in listed if k == "order"} == set(order_strategies.names())
    assert "time_limit=10.0" in listed["fusion", "cpsat"].parameters
    assert listed["fusion", "greedy"].doc.startswith("Algorithm 7.1")
    # a heuristic order documents itself by its order function's docstring
    assert listed["order", "lpmf"].doc.startswith("Each step runs the ready task")
    for entry in listed.values():
        assert entry.doc and entry.name in result.output


def test_strategy_options_list_the_valid_names_in_help():
    result = CliRunner().invoke(main, ["compile", "--help"])
    flat = " ".join(result.output.split())
    assert "Fusion strategy: " + ", ".join(fusion_strategies.names()) in flat
    assert "Order strategy: " + ", ".join(order_strategies.names()) in flat


def test_instances_list_is_aligned_on_long_names():
    lines = CliRunner().invoke(main, ["instances", "list"]).output.splitlines()
    kind_column = lines[0].index("kind")
    assert any(len(line.split()[0]) > 30 for line in lines[2:])  # long shipped file names
    for line in lines[2:]:
        assert line[kind_column - 2:kind_column] == "  " and line[kind_column] != " "


def test_text_table_right_aligns_numbers():
    table = text_table(("name", "n"), [("a", 5), ("long name", 123)], right=("n",))
    assert table.splitlines() == ["name         n", "---------  ---", "a            5", "long name  123"]


def test_experiment_scripts_describe_themselves_in_whole_sentences():
    scripts = [p for p in sorted((ROOT / "experiments").rglob("*.py")) if "ArgumentParser(" in p.read_text()]
    assert len(scripts) >= 10
    for path in scripts:
        source = path.read_text()
        first = ast.get_docstring(ast.parse(source), clean=False).split("\n\n")[0].strip()
        assert 'ArgumentParser(description=__doc__.split("\\n\\n")[0])' in source, path.name
        assert first.endswith((".", ")")), (path.name, first[-30:])
    help_text = subprocess.run([sys.executable, "-m", "experiments.studies.order_table", "--help"], capture_output=True,
                               text=True, cwd=ROOT, check=True).stdout
    assert "how often each wins." in " ".join(help_text.split())
