"""The user's own network: ``model.factory`` from a config, and ``bayesprune.fit_method`` from Python."""

import json

import pytest
import torch
from torch import nn

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.data import load_dataset
from bayesprune.methods import available_methods
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import load_run

FACTORY = """
import math

from torch import nn


def tiny(input_shape, output_dim, hidden=16):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(), nn.Linear(hidden, output_dim))


def raises(input_shape, output_dim, **options):
    raise RuntimeError("no such layer")


def not_a_module(input_shape, output_dim, **options):
    return "a string"


def wrong_width(input_shape, output_dim, **options):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), output_dim + 1))
"""


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    (tmp_path / "usernets.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_a_factory_network_runs_and_its_run_directory_rebuilds_it(user_folder, short_config):
    out = user_folder / "run"
    assert (
        main(
            [
                "run",
                "sbnn-digits",
                "--out",
                str(out),
                "--quiet",
                "--set",
                "model.factory='usernets:tiny'",
                "--set",
                "model.hidden=7",
                "--set",
                "train.epochs=2",
                "--set",
                "baseline.enabled=false",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["architecture"] == "usernets:tiny" and metrics["n_weights"] == 64 * 7 + 7 + 7 * 10 + 10
    config, _, fitted = load_run(out)
    assert config.model.factory == "usernets:tiny" and fitted.net[1].weight.shape == (7, 64)


@pytest.mark.parametrize(
    "factory, message",
    [
        ("nowhere:tiny", "model.factory: cannot import module 'nowhere'"),
        ("usernets:absent", "model.factory: module 'usernets' has no callable 'absent'"),
        ("usernets:raises", "model.factory: usernets:raises((1, 8, 8), 10) raised RuntimeError: no such layer"),
        ("usernets:not_a_module", "model.factory: usernets:not_a_module returned a str, not a torch.nn.Module"),
        ("usernets:wrong_width", "model: the network's output per example is [11]; the data need [10]"),
        ("not a path", "model.factory must be 'module:callable'"),
    ],
)
def test_a_bad_factory_is_one_line_and_writes_nothing(user_folder, capsys, factory, message):
    out = user_folder / "run"
    status = main(["run", "sbnn-digits", "--out", str(out), "--quiet", "--set", f"model.factory='{factory}'"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_a_factory_beside_an_architecture_is_refused():
    with pytest.raises(ConfigError, match="model.architecture must not be given beside model.factory"):
        load_config("sbnn-digits", ["model.factory='usernets:tiny'", "model.architecture='lenet-300-100'"])


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_fit_method_fits_every_method_on_a_users_network_from_tensors(method):
    """Every method from Python on a network and tensors of the user's: scores for every site the pruning
    reads, and a point estimate that beats chance on digits (10 classes) after a few epochs."""
    data = load_dataset("digits")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    short = {
        "pft": {"pretrain_epochs": 3, "finetune_epochs": 1, "start_masks": ["magnitude"], "perturbation_draws": 1},
        "pbp": {"prior_epochs": 3, "prior_mask_epochs": 1, "mc_samples": 10, "prior_samples": 2, "sparsity": 0.5},
        "probmask": {"t1": 1, "t2": 2, "finetune_epochs": 1, "sparsity": 0.5},
        "saliency": {"stages": [1], "penalties": [0.0], "finetune_epochs": 1, "sparsity": 0.5},
        "unit-gates": {"finetune_epochs": 1},
    }.get(method, {})
    optim = (
        {"name": "sgd", "lr": 0.05, "momentum": 0.9}
        if method in ("pft", "pbp", "probmask", "saliency")
        else {"lr": 0.01}
    )
    fitted = bp.fit_method(
        method,
        net,
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        options=short,
        epochs=3,
        optim=optim,
        device="cpu",
    )
    scores = fitted.scores()
    assert scores and all(site in dict(fitted.net.named_parameters()) or site.endswith(".gate") for site in scores)
    error = 100 * (fitted.predict(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert error < 60, error


def test_fit_method_reads_dataloaders_and_refuses_what_the_method_does_not_support():
    data = load_dataset("digits")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data.x_train, data.y_train), batch_size=100)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    fitted = bp.fit_method("sbnn", net, loader, epochs=1, device="cpu")
    assert set(fitted.scores()) == {"1.weight", "1.bias"}
    with pytest.raises(ConfigError, match="^validation is not supported by method 'probmask'"):
        bp.fit_method("probmask", net, loader, epochs=1, validation=(data.x_test, data.y_test), device="cpu")
    with pytest.raises(bp.DataError, match="^train: give"):
        bp.fit_method("sbnn", net, data.x_train, epochs=1)
