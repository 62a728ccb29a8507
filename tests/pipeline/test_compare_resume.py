"""A comparison or sweep resumed with a method or a seed added, or after SIGTERM: finished cells read back,
never fitted again; only the new or unfinished cells are fitted. The cells of the calls made here run in
this process (``cells_in_this_process``); the compare stopped by SIGTERM is a command of its own."""

import csv
import json
import tomllib

import pytest

from bayesprune.cli import main
from bayesprune.pipeline.compare import compare
from bayesprune.pipeline.compare.sweep import sweep
from helpers import TINY, start_compare

pytestmark = pytest.mark.usefixtures("cells_in_this_process")


def test_resume_with_a_method_added_or_dropped_fits_only_the_new_cells(tmp_path):
    """--resume with other --methods: the cells already finished are read back (their files untouched), only
    the new method's cell is fitted; dropping a method leaves its folder and drops its rows. Under
    compare.budget_epochs every cell trains the same epochs (the leaderboard's train_epochs, counted by the fit)."""
    lines = []
    grid = dict(sparsities=[0.5], seeds=[0], report=None, status=lines.append)
    compare(None, tmp_path / "cmp", methods=["sbnn"], overrides=[*TINY, "compare.budget_epochs=3"], **grid)
    files = sorted((tmp_path / "cmp" / "cells").rglob("*"))
    before = {path: path.stat().st_mtime_ns for path in files}
    lines.clear()
    rows = compare(out=tmp_path / "cmp", resume=True, methods=["sbnn", "sparse-vd"], **grid)
    assert lines[0] == "bayesprune: 3 cells, 2 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in files} == before
    assert sorted(path.name for path in (tmp_path / "cmp" / "cells").iterdir()) == [
        "magnitude-seed0",
        "sbnn-seed0",
        "sparse-vd-seed0",
    ]
    assert {row["method"] for row in rows} == {"magnitude", "sbnn", "sparse-vd"}
    assert {row["method"]: row["train_epochs"] for row in rows} == {"magnitude": 3, "sbnn": 3, "sparse-vd": 3}
    assert all(row["train_steps"] == 3 * 12 for row in rows)  # 1,437 digits in batches of 128: 12 steps an epoch
    held = tomllib.loads((tmp_path / "cmp" / "comparison.toml").read_text())
    assert held["compare"]["methods"] == ["sbnn", "sparse-vd"] and held["compare"]["budget_epochs"] == 3
    lines.clear()
    rows = compare(out=tmp_path / "cmp", resume=True, methods=["sparse-vd"], **grid)
    assert lines[0] == "bayesprune: 2 cells, 2 finished earlier (read back), 0 to fit"
    assert {row["method"] for row in rows} == {"magnitude", "sparse-vd"} and (
        tmp_path / "cmp" / "cells" / "sbnn-seed0"
    ).is_dir()
    assert {path: path.stat().st_mtime_ns for path in files} == before


def test_sweep_resume_with_a_seed_added_fits_only_its_cells(tmp_path):
    quick = ["train.epochs=1", "baseline.enabled=false", "sbnn.predictive_samples=1"]
    lines = []
    sweep("default", ["optim.lr=0.01"], tmp_path / "swp", seeds=[0], overrides=quick, status=lines.append)
    first = tmp_path / "swp" / "cells" / "optim.lr=0.01-seed0"
    before = {path: path.stat().st_mtime_ns for path in first.iterdir()}
    lines.clear()
    rows = sweep(None, None, tmp_path / "swp", seeds=[0, 1], resume=True, status=lines.append)
    assert lines[0] == "bayesprune: 2 cells, 1 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in first.iterdir()} == before
    errors = [
        json.loads((tmp_path / "swp" / "cells" / f"optim.lr=0.01-seed{k}" / "metrics.json").read_text())["test_error"]
        for k in (0, 1)
    ]
    assert (
        rows[0]["seeds"] == 2 and rows[0]["test_error"] == pytest.approx(sum(errors) / 2) and rows[0]["failed"] is None
    )
    assert tomllib.loads((tmp_path / "swp" / "sweep.toml").read_text())["seeds"] == [0, 1]


def test_sigterm_then_resume_continues_without_touching_finished_cells(tmp_path):
    import signal
    import time

    out = tmp_path / "cmp"
    process = start_compare(out, tmp_path, "--methods", "sbnn", "--sparsities", "0.5", settings=["train.epochs=40"])
    deadline = time.time() + 120
    while not (out / "cells" / "magnitude-seed0" / "metrics.json").exists() and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, error = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, error
    assert "interrupted" in error and not (out / "leaderboard.csv").exists()
    finished = {path: path.stat().st_mtime_ns for path in (out / "cells" / "magnitude-seed0").iterdir()}
    assert not (out / "cells" / "sbnn-seed0" / "metrics.json").exists()
    assert main(["compare", "--resume", str(out)]) == 0
    assert {path: path.stat().st_mtime_ns for path in (out / "cells" / "magnitude-seed0").iterdir()} == finished
    with open(out / "leaderboard.csv") as handle:
        assert {row["method"] for row in csv.DictReader(handle)} == {"magnitude", "sbnn"}
