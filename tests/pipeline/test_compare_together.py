"""A comparison's cells of one method that differ only in their seed train together as one stacked model
where the method fits several together, and each cell's run is the one it writes fitted alone (issue 51,
item 1); cells that cannot train together are fitted one at a time."""

import json

import pytest

from bayesprune.cli import main
from bayesprune.methods import get_method
from bayesprune.pipeline.compare import compare, comparison_cells, load_comparison
from bayesprune.pipeline.compare.cells import together_key
from bayesprune.pipeline.compare.engines import Progress, _tasks
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import run
from helpers import TINY, assert_close

pytestmark = pytest.mark.usefixtures("cells_in_this_process")

COMPARED = ("test_error", "baseline_test_error", "train_epochs", "train_steps", "pruning_curve")
SEEDS = [0, 1, 2]


def _comparison(out, *settings):
    return compare(None, out, methods=["sbnn"], sparsities=[0.5, 0.9], seeds=SEEDS, overrides=[*TINY, *settings])


def _fitted_alone(monkeypatch):
    """Every method's ``fit`` of one network records the cell it fitted (a stacked fit never calls it)."""
    alone = []
    for name in ("sbnn", "magnitude"):
        method = type(get_method(name))
        fit = method.fit

        def recorded(self, net, data, options, ctx, fit=fit):
            alone.append((self.name, ctx.seed))
            return fit(self, net, data, options, ctx)

        monkeypatch.setattr(method, "fit", recorded)
    return alone


def test_cells_that_differ_only_in_seed_train_together_each_as_its_run_alone(tmp_path, monkeypatch):
    alone = _fitted_alone(monkeypatch)
    rows = _comparison(tmp_path / "cmp")
    assert alone == [] and not any(row.get("failed") for row in rows)
    for folder in sorted((tmp_path / "cmp" / "cells").iterdir()):
        together = json.loads((folder / "metrics.json").read_text())
        want = run(load_config(str(folder / "config.toml")), tmp_path / "alone" / folder.name)  # the oracle
        for key in COMPARED:
            if key in want:
                assert_close(together[key], want[key], (folder.name, key))


def test_cells_that_cannot_train_together_are_fitted_one_at_a_time(tmp_path, monkeypatch, capsys):
    """Two chains a run (the stack holds one fit of a run): every cell fitted alone, each chain from its seed."""
    alone = _fitted_alone(monkeypatch)
    rows = _comparison(tmp_path / "cmp", "chains=2")
    assert not any(row.get("failed") for row in rows)
    assert sorted(alone) == sorted(
        (name, seed + chain) for name in ("sbnn", "magnitude") for seed in SEEDS for chain in (0, 1)
    )


def test_alone_fits_every_cell_alone(tmp_path, monkeypatch):
    alone = _fitted_alone(monkeypatch)
    argv = ["compare", "--out", str(tmp_path / "cmp"), "--methods", "sbnn", "--sparsities", "0.5", "--seeds", "0", "1"]
    assert main([*argv, "--alone", *(flag for item in TINY for flag in ("--set", item))]) == 0
    assert sorted(alone) == sorted((name, seed) for name in ("sbnn", "magnitude") for seed in (0, 1))


def test_the_tasks_of_a_grid(tmp_path):
    """Cells of one method and config but the seed are one task; a begun cell, and a method that fits one
    network at a time, are tasks alone."""
    raw, options = load_comparison(None, [*TINY, f"compare.seeds={SEEDS}"])
    cells = [
        cell
        for cell in comparison_cells(raw, options)
        if cell.method in ("sbnn", "pbp") and cell.sparsity in (None, 0.5)
    ]
    folders = [tmp_path / cell.name for cell in cells]
    begun = next(index for index, cell in enumerate(cells) if cell.method == "sbnn" and cell.seed == 1)
    folders[begun].mkdir()
    (folders[begun] / "config.toml").write_text(cells[begun].run_config().to_toml())
    tasks = _tasks(list(zip(range(len(cells)), cells, folders)))
    names = [[cell.name for _, cell, _ in task] for task in tasks]
    sbnn = [cell.name for cell in cells if cell.method == "sbnn"]
    assert [sbnn[0], sbnn[2]] in names and [sbnn[1]] in names
    assert all(len(task) == 1 for task in names if task[0].startswith("pbp"))
    assert together_key(cells[begun], folders[begun]) is None
    assert all(len(task) == 1 for task in _tasks(list(zip(range(len(cells)), cells, folders)), alone=True))


def test_progress_names_every_cell_of_the_tasks_running():
    """With 2 workers the pool marks 3 tasks running (one queued): the line names the 2 tasks' cells."""
    raw, options = load_comparison(None, [*TINY, f"compare.seeds={SEEDS}"])
    sbnn = [cell for cell in comparison_cells(raw, options) if cell.method == "sbnn"]
    pbp = [cell for cell in comparison_cells(raw, options) if cell.method == "pbp"][:2]
    lines = []
    progress = Progress([*sbnn, *pbp], lines.append, workers=2)
    progress.running([[(k, cell, "") for k, cell in enumerate(sbnn)], [(3, pbp[0], "")], [(4, pbp[1], "")]])
    assert lines == [f"bayesprune: [0/5] fitting {', '.join(cell.name for cell in [*sbnn, pbp[0]])}"]
