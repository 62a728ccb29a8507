"""Relative file and folder names in a config file are read from the config file's folder, as most tools
do; where the file is not there, from the current folder (as before); a ``--set`` value is the shell's,
read from the current folder. Each is stored absolute, so that a run folder reads its data from any folder."""

import os

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
    assert config.data.options["path"] == os.path.abspath("../configs/table.csv")
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
    assert config.data.options["path"] == os.path.abspath("table.csv") and loaded_rows(config) == 20


def test_a_set_value_is_read_from_the_current_folder(folders):
    work, configs = folders
    table(configs / "other.csv", 20)
    table(work / "other.csv", 10)
    config = load_config("../configs/run.toml", ["data.path=other.csv"])
    assert config.data.options["path"] == os.path.abspath("other.csv") and loaded_rows(config) == 10


def test_compare_reads_a_relative_path_from_the_config_files_folder(folders):
    """The reported case: ``bayesprune compare sub/k.toml`` with ``data.path = "d.csv"`` beside the config
    refused every cell ("no such file") where ``run`` read the same config: each cell's config loads the
    file beside the comparison's config (its 20 rows, not the current folder's 10)."""
    from bayesprune.pipeline.compare import comparison_cells, load_comparison
    from bayesprune.pipeline.config import RunConfig

    work, configs = folders
    table(configs / "table.csv", 20)
    table(work / "table.csv", 10)
    (configs / "k.toml").write_text(
        CONFIG.replace('method = "sparse-vd"\n', "") + '[compare]\nmethods = ["sparse-vd"]\n'
    )
    raw, options = load_comparison("../configs/k.toml")
    cells = comparison_cells(raw, options)
    assert cells and {loaded_rows(RunConfig.from_dict(cell.config)) for cell in cells} == {20}


def test_a_run_folder_reads_its_data_from_another_folder_and_once_moved(folders, tmp_path, monkeypatch, capsys):
    """The reported case: a run folder stored ``data.path`` relative to where it was started, so ``export``
    from another folder was refused. A run of ``../configs/run.toml`` exports from its parent folder and,
    moved elsewhere, from there."""
    from bayesprune.cli import main

    work, configs = folders
    table(configs / "table.csv", 30)
    quick = ["--quiet", "--set", "train.epochs=1", "--set", "baseline.enabled=false", "--set", "prune.sparsities=[0.0]"]
    assert main(["run", "../configs/run.toml", "--out", "run", *quick]) == 0, capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert main(["export", "work/run", "--out", "net.pt2"]) == 0, capsys.readouterr().err
    (work / "run").rename(tmp_path / "moved")
    monkeypatch.chdir(configs)
    assert main(["export", "../moved", "--out", "../moved.pt2"]) == 0, capsys.readouterr().err
    assert (tmp_path / "net.pt2").is_file() and (tmp_path / "moved.pt2").is_file()


def test_a_column_added_to_the_table_after_the_fit_is_blamed_on_the_file(folders, capsys):
    """The reported case: a CSV column added after the fit was blamed on the checkpoint's preprocessing
    ("checkpoint.pt: preprocessing input_mean must be ... of shape (2,)"). The one line names the data
    file and the column; nothing is written."""
    from bayesprune.cli import main

    work, configs = folders
    table(configs / "table.csv", 30)
    quick = ["--quiet", "--set", "train.epochs=1", "--set", "baseline.enabled=false", "--set", "prune.sparsities=[0.0]"]
    assert main(["run", "../configs/run.toml", "--out", "run", *quick]) == 0, capsys.readouterr().err
    capsys.readouterr()
    (configs / "table.csv").write_text("x,z,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(30)))
    before = sorted(path.name for path in work.rglob("*"))
    assert main(["export", "run", "--out", "net.pt2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "table.csv" in err and "column 'z' added" in err, err
    assert sorted(path.name for path in work.rglob("*")) == before
