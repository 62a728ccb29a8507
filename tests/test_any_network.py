"""Any ``nn.Module`` for every weight-level method: sites are the parameters of the prunable layers,
batch norm stays a point estimate whose running statistics survive, skip connections just work."""

import json

import numpy as np
import pytest
import tomli_w
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.core.sites import site_names, weight_sites
from bayesprune.data import load_dataset
from bayesprune.methods import available_methods
from bayesprune.pipeline.runner import load_run
from helpers import shortest_of

#: The settings of each weight-level method that keep it short, read from the registry: its digits config at
#: its ``quick`` settings, every stage it declares one epoch (:func:`helpers.shortest_of`), on 256 digits.
SHORT = {name: shortest_of(name) for name, method in available_methods().items() if "weight" in method.prune_levels}


def resnet(input_shape=(1, 8, 8), output_dim=10):
    """A small residual CNN of torchvision's ResNet blocks: a stem, an identity BasicBlock and one with a
    1x1-convolution projection (batch norm throughout), global pooling, a linear head."""
    projection = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        BasicBlock(8, 8),
        BasicBlock(8, 16, stride=2, downsample=projection),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, output_dim),
    )


def test_sites_are_the_prunable_layers_and_the_user_can_expose_or_hide():
    net = resnet()
    names = [name for name, _ in net.named_parameters()]
    normalisation = {
        f"{path}.{kind}"
        for path, module in net.named_modules()
        if isinstance(module, nn.BatchNorm2d)
        for kind in ("weight", "bias")
    }
    convolutions_and_linear = [name for name in names if name not in normalisation]
    assert site_names(net) == convolutions_and_linear and "7.bias" in site_names(net) and len(normalisation) == 12
    assert weight_sites(net) == [name for name in convolutions_and_linear if name.endswith("weight")]
    assert set(site_names(net, expose=["BatchNorm2d"])) == set(names)
    assert site_names(net, hide=["4.*"]) == [name for name in convolutions_and_linear if not name.startswith("4.")]
    with pytest.raises(ConfigError, match="^model.expose: 'nothing.*' matches no parameter"):
        site_names(net, expose=["nothing.*"])


def test_a_shared_module_is_one_site():
    shared = nn.Linear(4, 4)
    net = nn.Sequential(shared, nn.ReLU(), shared)
    assert site_names(net) == ["0.weight", "0.bias"]


FACTORY = """
from torch import nn
from torchvision.models.resnet import BasicBlock


def resnet(input_shape, output_dim):
    projection = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    return nn.Sequential(nn.Conv2d(input_shape[0], 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         BasicBlock(8, 8), BasicBlock(8, 16, stride=2, downsample=projection),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, output_dim))
"""


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """A folder with the user's network factory and 128 + 100 digits as an .npz."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "mynets.py").write_text(FACTORY)
    data = load_dataset("digits")
    np.savez(
        folder / "digits.npz",
        x_train=data.x_train[:128].numpy(),
        y_train=data.y_train[:128].numpy(),
        x_test=data.x_test[:100].numpy(),
        y_test=data.y_test[:100].numpy(),
    )
    return folder


@pytest.mark.parametrize("method", sorted(SHORT))
def test_every_weight_level_method_runs_a_resnet_with_batch_norm_from_a_config(method, user_files, monkeypatch):
    """From a TOML config with model.factory and an .npz: scores cover the convolution and linear weights
    and no batch norm parameter, and the run directory's checkpoint rebuilds the network, batch norm's
    running statistics included, with the run's own test error."""
    monkeypatch.chdir(user_files)
    options, optim = SHORT[method]
    config = {
        "method": method,
        "device": "cpu",
        "data": {"dataset": "npz", "path": "digits.npz", "batch_size": 128},
        "model": {"factory": "mynets:resnet"},
        "optim": optim,
        "train": {"epochs": 1},
        method: options,
        "prune": {"sparsities": [0.0], "include_biases": False},
        "baseline": {"enabled": False},
    }
    (user_files / f"{method}.toml").write_text(tomli_w.dumps(config))
    out = user_files / f"run-{method}"
    assert main(["run", f"{method}.toml", "--out", str(out), "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    _, data, fitted = load_run(out)
    assert set(weight_sites(fitted.net)) <= set(fitted.scores()) <= set(site_names(fitted.net))
    normalisation = {f"{path}." for path, module in fitted.net.named_modules() if isinstance(module, nn.BatchNorm2d)}
    assert not any(site.startswith(tuple(normalisation)) for site in fitted.scores())
    error = 100 * (fitted.predict(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert error == pytest.approx(metrics["test_error"])
    statistics = [buffer for name, buffer in fitted.net.named_buffers() if name.endswith("running_var")]
    assert statistics and not all(torch.equal(buffer, torch.ones_like(buffer)) for buffer in statistics)


def test_fit_method_hands_over_a_network_with_the_fits_batch_norm_statistics():
    """The plain network of a fit from Python (point estimate and running statistics) predicts what the
    fit predicts."""
    data = load_dataset("digits")
    torch.manual_seed(0)
    options, optim = SHORT["sbnn"]
    fitted = bp.fit_method(
        "sbnn",
        resnet(),
        (data.x_train[:256], data.y_train[:256]),
        options=options,
        epochs=1,
        batch_size=128,
        optim=optim,
        device="cpu",
    )
    plain = fitted.network().eval()
    with torch.no_grad():
        expected = torch.softmax(plain(data.x_test[:50]), -1)
    assert torch.allclose(fitted.predict(data.x_test[:50]), expected, atol=1e-5)


def test_unit_gates_remove_the_resnets_coupled_channels_while_training_and_its_export_runs_with_torch_alone(
    user_files, monkeypatch, capsys, tmp_path
):
    """Unit gates on a residual CNN with batch norm (one gate per group of coupled channels): channels
    leave while it trains, the run's network is smaller, and the file ``bayesprune export`` writes runs with
    torch alone and has the test error the export prints. An sBNN run of the ResNet, pruned by a quarter
    of its channels through the dependency graph, likewise."""
    monkeypatch.chdir(user_files)
    config = {
        "device": "cpu",
        "data": {"dataset": "npz", "path": "digits.npz", "batch_size": 64},
        "model": {"factory": "mynets:resnet"},
        "train": {"epochs": 1},
        "prune": {"sparsities": [0.0]},
        "baseline": {"enabled": False},
    }
    gates = {
        **config,
        "method": "unit-gates",
        "data": {**config["data"], "batch_size": 32},
        "optim": {"lr": 0.05},
        "train": {"epochs": 3},
        "prune": {"level": "unit", "sparsities": [0.0]},
        "unit-gates": {"theta_init": 0.2, "log_gamma": -3.0, "finetune_epochs": 1},
    }
    (user_files / "gates.toml").write_text(tomli_w.dumps(gates))
    assert main(["run", "gates.toml", "--out", str(tmp_path / "gates"), "--quiet"]) == 0
    metrics = json.loads((tmp_path / "gates" / "metrics.json").read_text())
    alive = metrics["units_alive"]
    assert (
        metrics["starting_architecture"] == [8, 8, 16, 16] and alive == sorted(alive, reverse=True) and alive[-1] < 48
    )
    capsys.readouterr()
    assert main(["export", str(tmp_path / "gates"), "--out", str(tmp_path / "gates.pt2"), "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    program = torch.export.load(str(tmp_path / "gates.pt2")).module()
    data = load_dataset("npz", path=str(user_files / "digits.npz"))
    with torch.no_grad():
        error = 100 * (program(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert error == pytest.approx(reported["test_error"])
    assert sum(p.numel() for p in program.parameters()) < sum(p.numel() for p in resnet().parameters())
    (user_files / "sbnn-export.toml").write_text(tomli_w.dumps({**config, "method": "sbnn"}))
    assert main(["run", "sbnn-export.toml", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    capsys.readouterr()
    assert (
        main(
            ["export", str(tmp_path / "run"), "--out", str(tmp_path / "net.pt2"), "--budget", "sparsity=0.25", "--json"]
        )
        == 0
    )
    reported = json.loads(capsys.readouterr().out)
    program = torch.export.load(str(tmp_path / "net.pt2")).module()
    data = load_dataset("npz", path=str(user_files / "digits.npz"))
    with torch.no_grad():
        error = 100 * (program(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert error == pytest.approx(reported["test_error"]) and reported["input_shape"] == [1, 8, 8]
    assert sum(p.numel() for p in program.parameters()) < sum(p.numel() for p in resnet().parameters())
