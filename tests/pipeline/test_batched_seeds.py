"""A run of several seeds of a method that fits them together (``Method.fits_together``: magnitude
pruning's plain network) trains them as one stacked model, and each seed's metrics are those of the
same seed run alone (issue 51, item 1)."""

import json

import pytest

from bayesprune.methods import get_method
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import run

pytestmark = pytest.mark.usefixtures("single_thread")

SHORT = ["train.epochs=4", "prune.finetune_epochs=1", "prune.droprates=[0.0, 0.9]"]
COMPARED = ("test_error", "baseline_test_error", "train_epochs", "train_steps", "pruning_curve")


@pytest.mark.parametrize("validation", [0.0, 0.25])
def test_seeds_trained_together_give_each_seeds_own_run(validation, tmp_path, monkeypatch):
    method = type(get_method("magnitude"))
    settings = [*SHORT, f"train.validation={validation}"]
    alone = {}
    for seed in (1, 2, 3):
        run(load_config("magnitude-digits", [*settings, f"seed={seed}"]), tmp_path / f"alone-{seed}")
        alone[seed] = json.loads((tmp_path / f"alone-{seed}" / "metrics.json").read_text())

    def refuse(*args, **kwargs):
        raise AssertionError("a seed was fitted alone")

    monkeypatch.setattr(method, "fit", refuse)
    run(load_config("magnitude-digits", [*settings, "seeds=[1, 2, 3]"]), tmp_path / "together")
    for seed in (1, 2, 3):
        together = json.loads((tmp_path / "together" / "seeds" / f"seed-{seed}.json").read_text())
        for key in COMPARED:
            assert together[key] == pytest.approx(alone[seed][key], rel=1e-5, abs=1e-9), (seed, key)
        assert together.get("best_epoch") == alone[seed].get("best_epoch")
