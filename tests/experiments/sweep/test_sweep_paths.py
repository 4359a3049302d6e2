"""Sweep names and output paths (issue 51): a name is one directory name (no separator, no
``..``), an unwritable results directory is one line naming it and leaves no temporary file, and
``--scheduler`` warns about a plain-TCP address beyond this machine."""
from __future__ import annotations

import os
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from experiments.cli import main
from experiments.sweep.cluster import insecure
from experiments.sweep.config import ConfigError, load_config
from experiments.sweep.results import ResultDir, ResultsDirError

BODY = "fusion = ['none']\norder = ['original']\nmeasures = ['traffic']\n[[families]]\nname = 'layered'\nsizes = [6]\n"


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "a..b", ".hidden", "a\\b", "", "x" * 101, "a b"])
def test_a_sweep_name_that_is_not_one_directory_name_is_refused(tmp_path, name):
    path = tmp_path / "sweep.toml"
    path.write_text(f"name = {name!r}\n" + BODY)
    with pytest.raises(ConfigError, match=re.escape("sweep.toml: field 'name': expected a directory name")):
        load_config(path)


def test_a_config_file_whose_own_name_is_no_directory_name_needs_a_name(tmp_path):
    path = tmp_path / "my sweep.toml"
    path.write_text(BODY)
    with pytest.raises(ConfigError, match=r"field 'name': expected a name = \"...\" line"):
        load_config(path)
    path.write_text("name = 'mine-1.2'\n" + BODY)
    assert load_config(path).name == "mine-1.2"


def test_the_cli_refuses_a_traversing_name_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep.toml").write_text("name = '../../escaped'\n" + BODY)
    result = CliRunner().invoke(main, ["sweep", "sweep.toml"])
    assert result.exit_code == 1 and "field 'name': expected a directory name" in result.output
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "results").exists()


def test_a_results_directory_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("a file where the directory would go")
    with pytest.raises(ResultsDirError, match=r"taken: cannot write the results directory \(.*\); give another"):
        ResultDir(tmp_path / "taken")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_results_directory_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o500)
    try:
        with pytest.raises(ResultsDirError, match="out: cannot write the results directory"):
            ResultDir(out)
    finally:
        out.chmod(0o700)


def test_a_table_that_cannot_be_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    results = ResultDir(tmp_path / "out")

    def disk_full(self, path, **kwargs):
        open(path, "wb").write(b"half a table")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    with pytest.raises(ResultsDirError, match=r"out: cannot write the results directory \(No space left on device\)"):
        results.write_table([])
    assert sorted(p.name for p in results.out.iterdir()) == ["cells", "decisions", "failed", "refs"]


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "127.0.0.1:8786", "tcp://localhost:8786",
                                     "tcp://[::1]:8786", "tls://10.0.0.5:8786", "inproc://x"])
def test_no_warning_for_loopback_or_tls(address):
    assert insecure(address) is None


@pytest.mark.parametrize("address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "tcp://0.0.0.0:8786",
                                     "tcp://[2001:db8::1]:8786"])
def test_a_plain_tcp_address_beyond_this_machine_warns(address):
    assert "whoever can reach it can run code" in insecure(address)
