"""Sweeps over instance files (``files = [...]`` in a config): planning, running, resuming, errors."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from experiments.sweep.cells import plan
from experiments.sweep.config import ConfigError, load_config
from experiments.sweep.run import run_sweep
from instances.store import DATA_DIR
from tests.helpers import ROOT

FILES = """
name = "files"
measures = ["traffic", "peak", "optimum"]
fusion = ["none", "greedy"]
order = ["original", "best"]
files = {files}
[reference]
time_limit = 5.0
order = "dp"
"""


def write_config(folder: Path, files: str) -> Path:
    path = folder / "sweep.toml"
    path.write_text(FILES.format(files=files))
    return path


def test_files_sweep_runs_each_problem_with_its_strategies_and_resumes(tmp_path):
    config = write_config(tmp_path, '["data/torch/mlp_forward.*"]')
    out = tmp_path / "out"
    first = run_sweep(load_config(config), out, workers=2, progress=False, echo=lambda _: None)
    table = first.table
    assert first.cells == 4 and first.failed == 0 and (table["status"] == "ok").all()
    assert set(table["family"]) == {"torch/mlp_forward"}
    assert set(table["file"]) == {"data/torch/mlp_forward.fusion", "data/torch/mlp_forward.order"}
    fusion, order = table[table["kind"] == "fusion"], table[table["kind"] == "order"]
    assert sorted(fusion["fusion"]) == ["greedy", "none"] and fusion["order"].isna().all()
    assert sorted(order["order"]) == ["best", "original"] and order["fusion"].isna().all()
    assert fusion["peak"].isna().all() and (fusion["traffic_ref_status"] == "optimal").all()
    assert (order["peak_ref_status"] == "optimal").all() and (order["peak"] >= order["peak_ref"]).all()
    unfused = fusion[fusion["fusion"] == "none"]
    assert (unfused["traffic"] > unfused["traffic_ref"]).all()
    again = run_sweep(load_config(config), out, workers=2, progress=False, echo=lambda _: None)
    assert again.skipped == 4 and len(again.table) == 4


def test_file_cells_are_keyed_by_content_not_path(tmp_path):
    shutil.copy(DATA_DIR / "torch" / "mlp_forward.order.json", tmp_path / "renamed.order.json")
    shipped = plan(load_config(write_config(tmp_path, '["data/torch/mlp_forward.order"]')), "v")
    copied = plan(load_config(write_config(tmp_path, '["renamed.order.json"]')), "v")
    assert [c.key for c in shipped] == [c.key for c in copied] and len(shipped) == 2
    assert copied[0].family == "renamed" and copied[0].file == str((tmp_path / "renamed.order.json").resolve())


def test_pattern_matching_nothing_names_the_field_and_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("sweep.toml: field 'files[1]': expected a pattern matching at "
                                                    "least one instance file: a shipped one as data/")) as info:
        load_config(write_config(tmp_path, '["data/torch/mlp_forward.order", "nosuch/*.json"]'))
    assert "nosuch/*.json" in str(info.value) and str(tmp_path) in str(info.value)


@pytest.mark.parametrize("text, problem", [("{not json", "not valid JSON"),
                                           ('{"format": "other", "version": 1}', "field 'format'")])
def test_malformed_file_names_the_file(tmp_path, text, problem):
    (tmp_path / "broken.json").write_text(text)
    with pytest.raises(ConfigError, match=r"field 'files\[0\]' \('\*\.json'\): .*broken\.json.*" + re.escape(problem)):
        load_config(write_config(tmp_path, '["*.json"]'))


def test_config_needs_families_or_files(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text("fusion = ['greedy']\norder = ['best']\n")
    with pytest.raises(ConfigError, match=r"field 'families': expected a non-empty array .* \(or a files list\)"):
        load_config(path)


def test_shipped_torch_config_plans_every_torch_file():
    config = load_config(ROOT / "experiments" / "configs" / "torch.toml")
    torch_files = sorted(p for p in DATA_DIR.glob("torch/*.json"))
    assert len(config.files) == len(torch_files) >= 12
    cells = plan(config, "v")
    fusions = sum(1 for name in config.files if name.endswith(".fusion"))
    assert len(cells) == fusions * len(config.fusion) + (len(config.files) - fusions) * len(config.order)
