"""Relative file and folder names in a config file are read from the config file's folder, as most tools
do; where the file is not there, from the current folder (as before); a ``--set`` value is the shell's,
read from the current folder."""

import pytest

from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import load_config

CONFIG = """method = "sparse-vd"
[data]
dataset = "csv"
path = "table.csv"
target = "y"
"""


def table(path, rows: int):
    """A CSV of ``rows`` rows (how many were read tells the files apart)."""
    path.write_text("x,y\n" + "".join(f"{i},{i % 2}\n" for i in range(rows)))


@pytest.fixture
def folders(tmp_path, monkeypatch):
    work, configs = tmp_path / "work", tmp_path / "configs"
    work.mkdir(), configs.mkdir()
    (configs / "run.toml").write_text(CONFIG)
    monkeypatch.chdir(work)
    return work, configs


def loaded_rows(config) -> int:
    data = load_datasets(config)[0]
    return data.num_train + len(data.y_test)


def test_a_relative_path_is_read_from_the_config_files_folder(folders):
    work, configs = folders
    table(configs / "table.csv", 20)
    config = load_config("../configs/run.toml")
    assert config.data.options["path"] == "../configs/table.csv"
    assert loaded_rows(config) == 20


def test_the_config_files_folder_wins_over_the_current_one(folders):
    work, configs = folders
    table(configs / "table.csv", 20)
    table(work / "table.csv", 10)
    assert loaded_rows(load_config("../configs/run.toml")) == 20


def test_a_file_only_in_the_current_folder_is_still_read(folders):
    work, _ = folders
    table(work / "table.csv", 20)
    config = load_config("../configs/run.toml")
    assert config.data.options["path"] == "table.csv" and loaded_rows(config) == 20


def test_a_set_value_is_read_from_the_current_folder(folders):
    work, configs = folders
    table(configs / "other.csv", 20)
    table(work / "other.csv", 10)
    config = load_config("../configs/run.toml", ["data.path=other.csv"])
    assert config.data.options["path"] == "other.csv" and loaded_rows(config) == 10
