"""The local engine's worker processes: jobs that give the same numbers, a cell failing in its worker
(Ray: test_compare_ray.py; signals: test_compare_signals.py)."""

import contextlib
import csv
import json

import pytest

from bayesprune.cli import main
from bayesprune.pipeline.compare.sweep import sweep
from helpers import PBP_TINY, TINY, cells_here


def _metrics(out, name):
    return json.loads((out / "cells" / name / "metrics.json").read_text())


def test_a_sweep_counts_the_grid_for_pbp_and_jobs_do_not_change_numbers(tmp_path):
    """One job's cells run in this process (the oracle), two jobs' in two workers (seed 0's two cells, one a
    worker): the same numbers in each cell. (One worker of the real pool: the failing-cell test below.)"""
    results = {}
    for jobs, seeds in ((1, [0, 1]), (2, [0])):
        with cells_here() if jobs == 1 else contextlib.nullcontext():
            results[jobs] = sweep(
                "pbp-digits",
                ["pbp.alpha=0.5,0.7"],
                tmp_path / f"jobs{jobs}",
                seeds=seeds,
                jobs=jobs,
                overrides=PBP_TINY,
                report=lambda *a: None,
            )
    cells = sorted((tmp_path / "jobs1" / "cells").iterdir())
    assert [cell.name for cell in cells] == [
        "pbp.alpha=0.5-seed0",
        "pbp.alpha=0.5-seed1",
        "pbp.alpha=0.7-seed0",
        "pbp.alpha=0.7-seed1",
    ]
    for cell in cells:
        metrics = json.loads((cell / "metrics.json").read_text())
        assert metrics["grid_size"] == 2 and "grid_size = 2" in (cell / "config.toml").read_text()
    rows = results[1]
    assert [row["pbp.alpha"] for row in rows] == [0.5, 0.7] and all(row["seeds"] == 2 for row in rows)
    errors = [
        json.loads((tmp_path / "jobs1" / "cells" / f"pbp.alpha=0.5-seed{k}" / "metrics.json").read_text())["test_error"]
        for k in (0, 1)
    ]
    assert rows[0]["test_error"] == pytest.approx(sum(errors) / 2) and rows[0]["test_error_std"] == pytest.approx(
        abs(errors[0] - errors[1]) / 2**0.5
    )
    for name in ("pbp.alpha=0.5-seed0", "pbp.alpha=0.7-seed0"):
        in_workers, here = _metrics(tmp_path / "jobs2", name), _metrics(tmp_path / "jobs1", name)
        for key in ("test_error", "bound", "empirical_risk"):
            assert in_workers[key] == here[key], (name, key)
    assert "pbp.alpha" in (tmp_path / "jobs1" / "summary.md").read_text()
    assert (tmp_path / "jobs1" / "summary.csv").is_file()
    # --resume rebuilds the grid from sweep.toml alone: the same cells, read back, none refitted
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "jobs1" / "cells").rglob("*")}
    assert sweep(None, None, tmp_path / "jobs1", resume=True, report=lambda *a: None) == rows
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "jobs1" / "cells").rglob("*")} == before


FLAKY = '''
import math

import torch
from torch import nn


class Flaky(nn.Sequential):
    """Fails while training when built from seed 1 (a user's network that breaks mid-fit)."""

    def forward(self, x):
        if self.training and self.fails:
            raise RuntimeError("the network of seed 1 fails while training")
        return super().forward(x)


def net(input_shape, output_dim, hidden=(16,)):
    network = Flaky(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden[0]), nn.ReLU(), nn.Linear(hidden[0], output_dim))
    network.fails = torch.initial_seed() == 1
    return network
'''


def test_a_cell_failing_mid_fit_leaves_a_complete_leaderboard_and_progress_is_reported(tmp_path, monkeypatch, capsys):
    """Seed 1's network raises while training (after passing every check, as a fit that breaks does): its
    two cells are recorded as failed with the reason, seed 0's fill the rows, the command exits 1; stderr
    reports each cell started and finished, cells done of 4 and the time left."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flaky.py").write_text(FLAKY)
    status = main(
        [
            "compare",
            "--out",
            "cmp",
            "--methods",
            "sbnn",
            "--sparsities",
            "0.5",
            "--seeds",
            "0",
            "1",
            "--set",
            "model.factory='flaky:net'",
            *(flag for item in TINY for flag in ("--set", item)),
        ]
    )
    err = capsys.readouterr().err.splitlines()
    assert status == 1, err
    with open(tmp_path / "cmp" / "leaderboard.csv") as handle:
        rows = {row["method"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"magnitude", "sbnn"}
    sbnn, magnitude = _metrics(tmp_path / "cmp", "sbnn-seed0"), _metrics(tmp_path / "cmp", "magnitude-seed0")
    assert float(rows["sbnn"]["test_error"]) == next(
        r["test_error"] for r in sbnn["pruning_curve"] if r["droprate"] == 0.5
    )
    assert float(rows["magnitude"]["plain_test_error"]) == magnitude["baseline_test_error"]
    for method in ("magnitude", "sbnn"):
        assert rows[method]["seeds"] == "1" and rows[method]["cells"] == f"cells/{method}-seed0 cells/{method}-seed1"
        assert rows[method]["failed"].startswith(
            f"{method}-seed1: RuntimeError: the network of seed 1 fails while training"
        )
    assert not (tmp_path / "cmp" / "cells" / "sbnn-seed1" / "metrics.json").exists()
    assert "failed" in (tmp_path / "cmp" / "leaderboard.md").read_text()
    # progress: the start, each cell fitting and finished in order of completion, the time left, the end
    progress = [line for line in err if line.startswith("bayesprune: ") and "error" not in line]
    assert progress[0] == "bayesprune: 4 cells, 0 finished earlier (read back), 4 to fit"
    finished = [line for line in progress if " done (" in line or " failed: " in line]
    assert [line.split("]")[0] for line in finished] == [f"bayesprune: [{k}/4" for k in range(1, 5)]
    assert all("left)" in line for line in finished[:-1]) and finished[-1].endswith("all done)")
    assert sum(" failed: RuntimeError" in line for line in finished) == 2
    names = {"magnitude-seed0", "magnitude-seed1", "sbnn-seed0", "sbnn-seed1"}
    assert {line.split("] ")[1].split()[0] for line in finished} == names
    fitting = {line.rsplit(" ", 1)[-1] for line in progress if "] fitting " in line}  # seen every half second
    assert fitting and fitting <= names
    assert "rows have a failed cell" in err[-1]
