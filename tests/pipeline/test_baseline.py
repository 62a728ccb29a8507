"""The references beside every result: the plain network keeps the epoch its validation curve says is
best (on a part of the training rows when the run holds out none), and regression runs report the
least-squares linear model, against numpy's lstsq."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from bayesprune.cli import main
from bayesprune.core.tasks import network_metric
from bayesprune.data import load_dataset
from bayesprune.data.registry import Dataset
from bayesprune.pipeline.baseline import least_squares_test_rmse, train_plain
from bayesprune.pipeline.config import RunConfig


def regression(seed=0, n_train=120, n_test=60, d=4, noise=0.3, target_std=2.5):
    """A linear problem with an intercept, targets standardised as the loaders store them."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, d, generator=generator)
    y = x @ torch.linspace(-1, 1, d) + 0.7 + noise * torch.randn(n_train + n_test, generator=generator)
    return Dataset(
        "toy",
        "regression",
        x[:n_train],
        y[:n_train],
        x[n_train:],
        y[n_train:],
        (d,),
        None,
        target_mean=0.0,
        target_std=target_std,
    )


def test_the_linear_models_rmse_is_numpys_least_squares_on_the_same_split():
    data = regression(d=6)

    def design(x):
        return np.hstack([x.numpy().astype(np.float64), np.ones((len(x), 1))])

    weights, *_ = np.linalg.lstsq(design(data.x_train), data.y_train.numpy().astype(np.float64), rcond=None)
    residual = design(data.x_test) @ weights - data.y_test.numpy()
    expected = data.target_std * np.sqrt(np.mean(residual**2))  # in the target's units
    assert least_squares_test_rmse(data) == pytest.approx(expected, rel=1e-6)


def test_the_linear_model_of_image_shaped_inputs_flattens_them():
    data = regression(d=12)
    images = Dataset(
        "toy",
        "regression",
        data.x_train.reshape(-1, 3, 2, 2),
        data.y_train,
        data.x_test.reshape(-1, 3, 2, 2),
        data.y_test,
        (3, 2, 2),
        None,
        target_std=data.target_std,
    )
    assert least_squares_test_rmse(images) == pytest.approx(least_squares_test_rmse(data), rel=1e-9)


def small_net(d, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1))


def test_the_kept_epoch_is_the_argmin_of_the_recorded_validation_curve():
    data = regression(noise=1.0, n_train=60)  # few noisy rows and many epochs: the curve turns up
    net = small_net(4)
    result = train_plain(net, data, epochs=60, lr=0.03, batch_size=16, seed=1, hold=0.25)
    curve = result["validation_curve"]
    assert len(curve) == 60 and result["n_validation"] == 15
    assert result["best_epoch"] == int(np.argmin(curve)) and result["best_epoch"] < 59
    # the network handed back is that epoch's: scored again on the same held-out rows (hold_out at the seed)
    from bayesprune.core.early_stopping import hold_out

    _, x_val, y_val = hold_out(data, 0.25, seed=1)
    assert network_metric(net, x_val, y_val, "regression") == pytest.approx(min(curve), rel=1e-5)
    assert result["test"] == pytest.approx(network_metric(net, data.x_test, data.y_test, "regression", target_std=2.5))


def test_the_runs_own_validation_part_is_used_instead_of_a_new_one():
    data = regression()
    given = data.x_train[:30], data.y_train[:30]
    result = train_plain(small_net(4), data, epochs=3, lr=0.01, batch_size=16, validation=given, hold=0.2)
    assert result["n_validation"] == 30 and len(result["validation_curve"]) == 3


def test_a_fraction_of_its_own_beside_the_runs_validation_part_is_refused():
    from bayesprune.core.errors import ConfigError
    from bayesprune.pipeline.config import load_config

    assert (
        load_config("default").baseline.held_out == 0.2
        and load_config("default", ["baseline.validation=0"]).baseline.held_out == 0
    )
    with pytest.raises(ConfigError, match="baseline.validation"):
        load_config("default", ["train.validation=0.2", "baseline.validation=0.1"])


def test_without_a_held_out_part_the_last_epoch_is_kept_and_no_curve_reported():
    result = train_plain(small_net(4), regression(), epochs=3, lr=0.01, batch_size=16, hold=0.0)
    assert set(result) == {"test"}


def test_on_an_exactly_linear_problem_the_plain_network_beats_predicting_the_mean():
    data = regression(noise=0.0, n_train=200)
    result = train_plain(small_net(4), data, epochs=60, lr=0.01, batch_size=32, hold=0.2)
    mean_rmse = data.target_std * (data.y_test - data.y_train.mean()).pow(2).mean().sqrt().item()
    assert result["test"] < 0.2 * mean_rmse
    assert least_squares_test_rmse(data) < 1e-4 * mean_rmse  # exact: the linear model has no error


def test_a_regression_run_reports_both_references(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "default",
                "--out",
                str(out),
                "--quiet",
                "--set",
                "data.dataset=linear-regression",
                "--set",
                "data.n=200",
                "--set",
                "train.epochs=4",
                "--set",
                "prune.sparsities=[0.0]",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    data = load_dataset("linear-regression", n=200)
    assert metrics["baseline_linear_test_rmse"] == pytest.approx(least_squares_test_rmse(data), rel=1e-6)
    curve = metrics["baseline_validation_curve"]
    assert len(curve) == 4 and metrics["baseline_best_epoch"] == int(np.argmin(curve))
    assert metrics["baseline_n_validation"] == round(0.2 * data.num_train)
    report = (out / "report.md").read_text()
    assert f"| test_rmse, linear model (least squares) | {metrics['baseline_linear_test_rmse']:.4g} |" in report


def test_the_magnitude_methods_plain_network_is_the_runners(tmp_path):
    """The ``magnitude`` method's fit (the plain network a comparison's ``plain_test_error`` reads) follows the
    runner's rule (:func:`train_plain` with the runner's arguments): same network, same held-out rows, same
    kept epoch, the same test error, reported as its ``baseline_test_error`` without training another."""
    from bayesprune.models import new_net
    from bayesprune.pipeline.checks import load_datasets
    from bayesprune.pipeline.config import load_config
    from bayesprune.pipeline.runner import run

    config = load_config("default", ["train.epochs=3"])
    data = load_datasets(config)[0]
    lr = config.baseline.lr or config.optim.lr
    plain = train_plain(
        new_net(config, data.input_shape, data.output_dim, seed=0),
        data,
        epochs=3,
        lr=lr,
        batch_size=config.data.batch_size,
        seed=0,
        hold=config.baseline.held_out,
    )
    raw = {key: value for key, value in config.to_dict().items() if key not in ("sbnn", "optim")}
    magnitude = RunConfig.from_dict(
        {
            **raw,
            "method": "magnitude",
            "optim": {"lr": lr},
            "baseline": {"enabled": False},
            "prune": {"sparsities": [0.0]},
        }
    )
    metrics = run(magnitude, tmp_path / "run")
    assert metrics["baseline_test_error"] == metrics["test_error"] == plain["test"]
