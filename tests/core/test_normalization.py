"""Masked networks with batch norms are scored and exported with statistics of their own ("adaptive BN"):
checked against statistics and networks recalibrated by hand."""

import copy
import json
from tomllib import loads as tomllib_loads

import numpy as np
import pytest
import tomli_w
import torch
from torch import nn

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.normalization import DEFAULT_BATCHES, Calibration, has_running_stats, recalibrate
from bayesprune.core.pruning import Budget, prune
from bayesprune.data import load_dataset
from bayesprune.methods.base import NetworkFitted
from bayesprune.pipeline.evaluation import pruning_curve
from bayesprune.pipeline.runner import load_run

FACTORY = """
from torch import nn


def bn_cnn(input_shape, output_dim):
    return nn.Sequential(nn.Conv2d(input_shape[0], 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, output_dim))
"""


def bn_mlp():
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 12),
        nn.BatchNorm1d(12),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(12, 10),
        nn.BatchNorm1d(10),
    )


def masked(net, masks):
    """A copy of ``net`` with the masked parameters zeroed by hand."""
    net = copy.deepcopy(net)
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name in masks:
                param[~masks[name]] = 0.0
    return net


def recalibrated_by_hand(net, x):
    """``net`` whose batch norms hold the mean and unbiased variance of their inputs over all of ``x``, one
    batch: torch's batch norm with momentum 1 keeps the last batch's statistics as they are."""
    net = copy.deepcopy(net).eval()
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = 1.0
            module.train()
    with torch.no_grad():
        net(x)
    return net.eval()


def random_masks(net, fraction, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.rand(p.shape, generator=generator) >= fraction for name, p in net.named_parameters() if p.dim() > 1
    }


def test_the_statistics_are_the_mean_and_variance_of_the_masked_networks_activations():
    torch.manual_seed(0)
    net = masked(bn_mlp(), random_masks(bn_mlp(), 0.6)).eval()
    net[2].running_mean.fill_(5.0)
    x = torch.randn(96, 1, 8, 8)
    first = net[1](net[0](x))  # the masked layer's outputs: the first batch norm's inputs
    recalibrate(net, x, batches=4, batch_size=24)
    # equal batches: the mean of the batch means is the mean over every row, whatever their order
    assert torch.allclose(net[2].running_mean, first.mean(0), atol=1e-6)
    assert net[2].momentum == 0.1 and not net.training and not net[2].training and not net[4].training
    recalibrate(net, x, batches=1, batch_size=96)
    assert torch.allclose(net[2].running_var, first.var(0, unbiased=True), rtol=1e-5)
    # the second batch norm reads the first normalised by the batch's own statistics, with no dropout
    hidden = (first - first.mean(0)) / torch.sqrt(first.var(0, unbiased=False) + net[2].eps)
    second = net[5](torch.relu(hidden * net[2].weight + net[2].bias)).detach()
    assert torch.allclose(net[6].running_mean, second.mean(0), atol=1e-5)
    assert torch.allclose(net[6].running_var, second.var(0, unbiased=True), rtol=1e-4)


def test_the_default_batches_estimate_the_statistics_to_their_sampling_error_from_a_few_hundred_rows():
    """Each point of a pruning curve re-estimates its statistics: by default on 4 batches of 128 rows, not on
    all 1,437 training rows (a resnet18's curve spent 9 CPU s on them). Oracle: the closed-form mean and
    variance of a linear layer's outputs under standard normal inputs."""
    torch.manual_seed(0)
    layer = nn.Linear(20, 16)
    net = nn.Sequential(layer, nn.BatchNorm1d(16))
    rows = []
    layer.register_forward_pre_hook(lambda module, args: rows.append(len(args[0])))
    recalibrate(net, torch.randn(1437, 20), batch_size=128)
    read = sum(rows)
    assert read == DEFAULT_BATCHES * 128 == 512
    mean, variance = layer.bias.detach(), layer.weight.detach().pow(2).sum(1)  # of W x + b, x ~ N(0, I)
    assert ((net[1].running_mean - mean).abs() <= 4 * (variance / read).sqrt()).all()
    # the mean of the batches' unbiased variances: relative standard error sqrt(2 / degrees of freedom)
    assert ((net[1].running_var / variance - 1).abs() <= 4 * (2 / (read - DEFAULT_BATCHES)) ** 0.5).all()


@pytest.mark.parametrize("batch_size, rows", [(32, 128), (128, 128), (256, 256)])
def test_a_runs_calibration_batches_hold_at_least_128_rows(batch_size, rows):
    """A run's small ``data.batch_size`` does not shrink the rows the statistics are estimated on."""
    from bayesprune.pipeline.config import PruneConfig

    calibration = PruneConfig().calibration(torch.randn(2000, 3), batch_size=batch_size)
    assert calibration.batch_size == rows and calibration.batches == DEFAULT_BATCHES


def test_a_network_without_batch_norm_is_left_as_it_is():
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))
    state = copy.deepcopy(net.state_dict())
    assert not has_running_stats(net) and recalibrate(net, torch.randn(40, 1, 8, 8), batches=2, batch_size=20) is net
    assert all(torch.equal(state[name], value) for name, value in net.state_dict().items())
    x = torch.randn(30, 1, 8, 8)
    fitted = NetworkFitted(net)
    masks = random_masks(net, 0.5)
    stale = fitted.predict(x, masks=masks)
    fitted.calibration = Calibration(torch.randn(40, 1, 8, 8), batches=2, batch_size=20)
    assert torch.equal(fitted.predict(x, masks=masks), stale)


def test_a_masked_prediction_uses_statistics_estimated_for_the_masked_network_and_keeps_the_fits_own():
    torch.manual_seed(1)
    net = bn_mlp()
    x_train, x = torch.randn(64, 1, 8, 8), torch.randn(20, 1, 8, 8)
    recalibrate(net, x_train, batches=1, batch_size=64)  # the dense network's own statistics
    own = {name: value.clone() for name, value in net.named_buffers()}
    fitted = NetworkFitted(net)
    masks = random_masks(net, 0.7)
    stale = fitted.predict(x, masks=masks)
    expected = torch.softmax(masked(net, masks).eval()(x), -1)
    assert torch.allclose(stale, expected, atol=1e-6)  # no calibration: the fit's statistics
    fitted.calibration = Calibration(x_train, batches=1, batch_size=64)
    got = fitted.predict(x, masks=masks)
    with torch.no_grad():
        expected = torch.softmax(recalibrated_by_hand(masked(net, masks), x_train)(x), -1)
    assert torch.allclose(got, expected, atol=1e-5) and not torch.allclose(got, stale, atol=1e-2)
    assert all(torch.equal(own[name], value) for name, value in net.named_buffers())
    # a mask that removes nothing, or only weights that are zero already (a sparse method's), leaves the
    # network as it is: its statistics stay the fit's
    full = {name: torch.ones_like(mask) for name, mask in masks.items()}
    assert torch.equal(fitted.predict(x, masks=full), fitted.predict(x))
    sparse = NetworkFitted(masked(net, masks))
    sparse.calibration = fitted.calibration
    assert torch.equal(sparse.predict(x, masks=masks), sparse.predict(x))


def test_the_pruning_curve_scores_each_masked_network_of_a_fit_with_its_own_statistics():
    data = load_dataset("digits")
    x_train, y_train = data.x_train[:256], data.y_train[:256]
    torch.manual_seed(0)
    fitted = bp.fit_method(
        "sbnn",
        bn_mlp(),
        (x_train, y_train),
        (data.x_test, data.y_test),
        epochs=1,
        batch_size=128,
        optim={"lr": 1e-3},
        device="cpu",
    )
    assert fitted.calibration is not None and torch.equal(fitted.calibration.inputs, x_train)
    fitted.calibration = Calibration(x_train, batches=1, batch_size=256)
    curve = pruning_curve(fitted, data, sparsities=[0.0, 0.8])
    masks = prune(fitted.scores(), Budget(sparsity=0.8))
    hand = recalibrated_by_hand(masked(fitted.network(), masks), x_train)
    with torch.no_grad():
        error = 100 * (hand(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert curve[1]["test_error"] == pytest.approx(error, abs=1e-9)
    with torch.no_grad():
        full = 100 * (fitted.network().eval()(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    assert curve[0]["test_error"] == pytest.approx(full, abs=1e-9)


@pytest.fixture(scope="module")
def bn_run(tmp_path_factory):
    """An sBNN run of a batch-norm CNN from a factory and an .npz (128 training digits), curve at 0 and
    80% removed, its statistics estimated on one batch of all 128 training rows; and the same with
    ``prune.recalibrate = false``."""
    folder = tmp_path_factory.mktemp("bn")
    (folder / "bnnets.py").write_text(FACTORY)
    data = load_dataset("digits")
    np.savez(
        folder / "digits.npz",
        x_train=data.x_train[:128].numpy(),
        y_train=data.y_train[:128].numpy(),
        x_test=data.x_test[:150].numpy(),
        y_test=data.y_test[:150].numpy(),
    )
    config = {
        "method": "sbnn",
        "device": "cpu",
        "data": {"dataset": "npz", "path": str(folder / "digits.npz"), "batch_size": 128},
        "model": {"factory": "bnnets:bn_cnn"},
        "optim": {"lr": 3e-3},
        "train": {"epochs": 3},
        "prune": {"sparsities": [0.0, 0.8], "recalibrate_batches": 1},
        "baseline": {"enabled": False},
    }
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.syspath_prepend(str(folder))
        for name, recalibrate_option in (("fresh", True), ("stale", False)):
            config["prune"]["recalibrate"] = recalibrate_option
            (folder / f"{name}.toml").write_text(tomli_w.dumps(config))
            assert main(["run", f"{name}.toml", "--out", str(folder / name), "--quiet"]) == 0
            runs[name] = folder / name
    return runs


def _hand_error(run, *, fresh: bool, median_model: bool = False):
    """The test error of the run's network with 80% of its weights removed by score (and, as ``export``
    does, those of inclusion probability below 1/2 with ``median_model``), recalibrated by hand or not."""
    _, data, fitted = load_run(run)
    masks = prune(fitted.scores(), Budget(sparsity=0.8))
    if median_model:
        masks = {site: mask & (fitted.inclusion_probabilities()[site] >= 0.5) for site, mask in masks.items()}
    net = masked(fitted.network(), masks)
    net = recalibrated_by_hand(net, data.x_train) if fresh else net.eval()
    with torch.no_grad():
        return 100 * (net(data.x_test).argmax(-1) != data.y_test).float().mean().item(), net, data


def test_a_runs_curve_and_its_export_are_the_masked_network_with_statistics_recalibrated_by_hand(
    bn_run, capsys, tmp_path
):
    metrics = json.loads((bn_run["fresh"] / "metrics.json").read_text())
    error, hand, data = _hand_error(bn_run["fresh"], fresh=True)
    assert metrics["recalibrated_statistics"] is True
    assert metrics["pruning_curve"][1]["test_error"] == pytest.approx(error, abs=1e-9)
    assert "estimated again on training batches" in (bn_run["fresh"] / "report.md").read_text()
    error, hand, data = _hand_error(bn_run["fresh"], fresh=True, median_model=True)
    capsys.readouterr()
    assert (
        main(
            [
                "export",
                str(bn_run["fresh"]),
                "--out",
                str(tmp_path / "net.pt2"),
                "--budget",
                "sparsity=0.8",
                "--budget",
                "level=weight",
                "--budget",
                "min_keep=0",
                "--json",
            ]
        )
        == 0
    )
    reported = json.loads(capsys.readouterr().out)
    program = torch.export.load(str(tmp_path / "net.pt2")).module()
    with torch.no_grad():
        assert torch.allclose(program(data.x_test), hand(data.x_test), atol=1e-4)
    assert reported["recalibrated_statistics"] is True
    assert reported["test_error"] == pytest.approx(error, abs=1e-9) and reported["method_test_error"] == pytest.approx(
        error, abs=1e-9
    )


def test_prune_recalibrate_false_scores_the_masked_network_with_the_dense_networks_statistics(bn_run):
    metrics = json.loads((bn_run["stale"] / "metrics.json").read_text())
    stale, _, _ = _hand_error(bn_run["stale"], fresh=False)
    fresh, _, _ = _hand_error(bn_run["stale"], fresh=True)
    assert metrics["recalibrated_statistics"] is False and stale != fresh
    assert metrics["pruning_curve"][1]["test_error"] == pytest.approx(stale, abs=1e-9)
    assert "`prune.recalibrate = false`" in (bn_run["stale"] / "report.md").read_text()


@pytest.mark.parametrize(
    "value, message",
    [(0, "positive integer up to 1000"), (1001, "positive integer up to 1000"), (2.5, "positive integer")],
)
def test_recalibrate_batches_is_bounded(value, message):
    from bayesprune.core.errors import ConfigError
    from bayesprune.pipeline.config import PruneConfig

    with pytest.raises(ConfigError, match=f"^prune.recalibrate_batches must be a {message}"):
        PruneConfig(recalibrate_batches=value)


def test_a_magnitude_run_evaluates_each_pruned_network_with_its_own_statistics(bn_run, tmp_path, monkeypatch):
    """The magnitude baseline (a registered method, no fine-tuning): its curve's error at 80% removed is that of
    the plain network with its smallest weights zeroed and its statistics estimated again over the training rows."""
    folder = bn_run["fresh"].parent
    monkeypatch.syspath_prepend(str(folder))
    config = tomllib_loads((folder / "fresh.toml").read_text())
    config["method"] = "magnitude"
    (tmp_path / "magnitude.toml").write_text(tomli_w.dumps(config))
    assert main(["run", str(tmp_path / "magnitude.toml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    _, data, fitted = load_run(tmp_path / "run")
    net = fitted.network()
    params = dict(net.named_parameters())
    magnitudes = {site: params[site].detach().abs().double() for site in fitted.sites}
    masks = prune(magnitudes, Budget(sparsity=0.8))
    with torch.no_grad():
        for site, keep in masks.items():
            params[site].mul_(keep)
    hand = recalibrated_by_hand(net, data.x_train)
    with torch.no_grad():
        error = 100 * (hand(data.x_test).argmax(-1) != data.y_test).float().mean().item()
    row = next(row for row in metrics["pruning_curve"] if row["droprate"] == 0.8)
    assert row["test_error"] == pytest.approx(error, abs=1e-9)
