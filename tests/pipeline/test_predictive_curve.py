"""``prune.predictive``: where the pruning curve evaluates the Monte-Carlo predictive. The oracle is the
curve evaluated at every sparsity, from the same saved fit."""

import csv
import json

import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.pipeline.evaluation import pruning_curve
from bayesprune.pipeline.rundir import load_run
from bayesprune.pipeline.sections import PREDICTIVE_CURVE_WEIGHTS, PruneConfig


def test_auto_draws_the_predictive_at_every_sparsity_up_to_its_size_and_a_bad_value_is_refused():
    assert PruneConfig().predictive_at(PREDICTIVE_CURVE_WEIGHTS) == "every"
    assert PruneConfig().predictive_at(PREDICTIVE_CURVE_WEIGHTS + 1) == "unpruned"
    assert PruneConfig(predictive="every").predictive_at(10**9) == "every"
    with pytest.raises(ConfigError, match="prune.predictive"):
        PruneConfig(predictive="some")


def test_a_curve_with_the_predictive_at_the_unpruned_model_only_is_the_full_curve_without_it(tmp_path):
    out = tmp_path / "run"
    settings = [
        "train.epochs=2",
        "prune.sparsities=[0.5, 0.9]",
        "sbnn.predictive_samples=4",
        "prune.predictive='unpruned'",
    ]
    assert main(["run", "default", "--out", str(out), "--quiet", *[a for s in settings for a in ("--set", s)]]) == 0
    rows = json.loads((out / "metrics.json").read_text())["pruning_curve"]
    config, dataset, fitted = load_run(out)
    torch.manual_seed(0)
    full = pruning_curve(fitted, dataset, sparsities=[0.0, 0.5, 0.9], budget=config.prune.budget)
    assert [row["test_error"] for row in rows] == pytest.approx([row["test_error"] for row in full], abs=1e-9)
    assert rows[0]["test_error_mc"] is not None and [row["test_error_mc"] for row in rows[1:]] == [None, None]
    with open(out / "pruning_curve.csv") as handle:
        assert [row["test_error_mc"] for row in csv.DictReader(handle)][1:] == ["", ""]
    assert "evaluated on the unpruned model only" in (out / "report.md").read_text()
