"""Training length that adapts to the data: step budgets, held-out validation, early stopping."""

import math

import pytest
import torch

from bayesprune.core.early_stopping import EarlyStopping, epochs_for_steps, hold_out
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import TensorBatches, train
from bayesprune.data import Dataset
from bayesprune.pipeline.config import RunConfig, load_config
from bayesprune.pipeline.runner import run


@pytest.mark.parametrize(
    "steps, n, batch", [(1, 10, 32), (100, 455, 32), (20000, 455, 32), (7, 64, 8), (8, 64, 8), (9, 64, 8)]
)
def test_epochs_for_steps_is_the_first_epoch_count_reaching_the_budget(steps, n, batch):
    per_epoch = len(TensorBatches(torch.zeros(n, 1), torch.zeros(n), batch_size=batch))
    epochs = next(e for e in range(1, steps + 2) if e * per_epoch >= steps)
    assert epochs_for_steps(steps, n, batch) == epochs


@pytest.mark.parametrize("n, expected", [(100, 32), (3200, 32), (3201, 33), (36000, 360)])
def test_auto_batch_size_is_a_hundredth_of_the_rows_at_least_32(n, expected):
    assert RunConfig.from_dict({"data": {"batch_size": "auto"}}).data.batch_size_for(n) == expected
    config = RunConfig.from_dict({"data": {"batch_size": "auto"}, "train": {"steps": 1000}}).for_data(n)
    assert config.data.batch_size == expected and config.train.steps is None
    assert config.train.epochs * math.ceil(n / expected) >= 1000 > (config.train.epochs - 1) * math.ceil(n / expected)


def test_hold_out_splits_the_training_part_only():
    x, y = torch.arange(50.0).unsqueeze(1), torch.arange(50.0)
    dataset = Dataset("toy", "regression", x, y, x[:5] + 100, y[:5] + 100, (1,), None)
    rest, x_val, y_val = hold_out(dataset, 0.2, seed=3)
    assert len(y_val) == 10 and rest.num_train == 40
    assert sorted(torch.cat([rest.y_train, y_val]).tolist()) == y.tolist()
    assert torch.equal(rest.x_test, dataset.x_test) and torch.equal(x_val.squeeze(1), y_val)
    assert torch.equal(hold_out(dataset, 0.2, seed=3)[2], y_val) and not torch.equal(
        hold_out(dataset, 0.2, seed=4)[2], y_val
    )


@pytest.mark.parametrize("patience, trained", [(None, 8), (2, 6), (10, 8)])
def test_early_stopping_restores_the_best_epoch(patience, trained):
    """A scripted validation curve with its minimum at epoch 3 (0-based): the parameter value saved
    there comes back, and patience ends training that many epochs after it."""
    curve = [5.0, 4.0, 3.5, 1.0, 2.0, 1.5, 3.0, 4.0]
    weight = torch.nn.Parameter(torch.zeros(()))
    epoch_of = {"now": -1}

    def step(x, y, index, num_batches):
        with torch.no_grad():
            weight.add_(1.0)  # the parameter counts epochs (one batch per epoch)
        return torch.zeros(())

    def score():
        epoch_of["now"] += 1
        return curve[epoch_of["now"]]

    stopping = EarlyStopping(
        score,
        lambda: {"w": weight.detach()},
        lambda state: weight.data.copy_(state["w"]),
        epochs=len(curve),
        patience=patience,
    )
    history = train(
        step, TensorBatches(torch.zeros(4, 1), torch.zeros(4), batch_size=4), epochs=len(curve), callbacks=[stopping]
    )
    assert len(history.epoch_losses) == trained
    assert stopping.best_epoch == 3 and stopping.best_score == 1.0 and weight.item() == 4.0


@pytest.mark.parametrize(
    "train_table, field",
    [
        ({"steps": 0}, "train.steps"),
        ({"epochs": 0}, "train.epochs"),
        ({"validation": 1.0}, "train.validation"),
        ({"patience": 5}, "train.patience"),
    ],
)
def test_bad_training_length_names_the_field(train_table, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        RunConfig.from_dict({"train": train_table})


def test_a_run_with_a_step_budget_and_validation(tmp_path):
    config = load_config(
        "default",
        [
            "train.steps=30",
            "train.validation=0.2",
            "train.patience=3",
            "data.batch_size='auto'",
            "device='cpu'",
            "prune.sparsities=[0.5]",
        ],
    )
    metrics = run(config, tmp_path / "run")
    # digits: 1437 training rows, 287 held out; batch max(32, ceil(1150 / 100)) = 32, 36 steps per epoch
    assert metrics["n_validation"] == 287 and metrics["epochs"] == 1
    assert (tmp_path / "run" / "config.toml").read_text().count("steps = 30") == 1
