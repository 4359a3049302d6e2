"""docs/config.md documents every key the sweep config reader accepts (experiments.sweep.config.KEYS),
with defaults that are the reader's, and an example it accepts; docs/results.md documents every
column a sweep writes, and no other, taken from a small sweep with every kind of cell and every
measure (an abstract fusion family, an order-only family, a program, a fusion file, an order
file)."""
from __future__ import annotations

import re
import tomllib

import pytest

from experiments.sweep.config import KEYS, MEASURES, load_config, parse_config
from experiments.sweep.run import run_sweep
from tests.helpers import ROOT

DOCS = ROOT / "docs"

EVERY_KIND = f"""
name = "columns"
cell_timeout = 60
measures = {list(MEASURES)}
fusion = ["greedy"]
order = ["best"]
files = ["data/example_7_2-64", "data/torch/mlp_forward.order"]
[reference]
time_limit = 2.0
[timing]
repeat = 1
[[families]]
name = "layered"
sizes = [6]
[[families]]
name = "vsep_tree"
sizes = [6]
[[families]]
name = "softmax"
sizes = [8]
"""


def _documented(page: str) -> dict[str, str]:
    """The names in the first cell of each table row of ``page``, each with its row."""
    rows = [line for line in (DOCS / page).read_text().splitlines() if line.startswith("| `")]
    return {name: row for row in rows for name in re.findall(r"`([\w.\[\]]+)`", row.split("|")[1])}


def _config_keys() -> set[str]:
    return {f"{table}.{key}" if table else key for table, keys in KEYS.items() for key in keys}


def test_every_config_key_is_documented():
    missing = _config_keys() - set(_documented("config.md"))
    assert not missing, f"config keys the reader accepts but docs/config.md does not list: {sorted(missing)}"


def test_documented_defaults_are_the_readers():
    minimal = parse_config({"fusion": ["greedy"], "order": ["best"], "families": [{"name": "layered", "sizes": [4]}]},
                           "minimal.toml")
    checked = 0
    for key, row in _documented("config.md").items():
        default = row.split("|")[3].strip()
        if "[]" in key or not re.fullmatch(r"`[^`]+`", default):
            continue
        table, _, field = key.rpartition(".")
        value = getattr(getattr(minimal, table) if table else minimal, field)
        expected = tomllib.loads(f"v = {default.strip('`')}")["v"]
        assert (list(value) if isinstance(value, tuple) else value) == expected, key
        checked += 1
    assert checked >= 10


def test_the_complete_example_is_accepted(tmp_path):
    example = re.search(r"```toml\n(.*?)```", (DOCS / "config.md").read_text(), re.S).group(1)
    path = tmp_path / "demo.toml"
    path.write_text(example)
    config = load_config(path)
    assert config.name == "demo" and len(config.families) == 2 and config.files


@pytest.fixture(scope="module")
def columns(tmp_path_factory) -> set[str]:
    tmp = tmp_path_factory.mktemp("columns")
    (tmp / "columns.toml").write_text(EVERY_KIND)
    summary = run_sweep(load_config(tmp / "columns.toml"), tmp / "out", workers=1, raise_errors=True,
                        progress=False, echo=lambda message: None)
    assert (summary.table["status"] == "ok").all() and set(summary.table["kind"]) == {"fusion", "order", "program"}
    return set(summary.table.columns)


def test_every_column_a_sweep_writes_is_documented(columns):
    missing = columns - set(_documented("results.md"))
    assert not missing, f"columns a sweep writes but docs/results.md does not describe: {sorted(missing)}"


def test_every_documented_column_is_written(columns):
    stale = set(_documented("results.md")) - columns
    assert not stale, f"docs/results.md describes columns no sweep writes: {sorted(stale)}"
