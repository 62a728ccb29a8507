"""Unit gates held to a MAC target while training (bayesprune.methods.unit_gates.budget)."""

import pytest
import torch
from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.core.gates import UnitGates
from bayesprune.core.unit_macs import ExpectedMacs
from bayesprune.methods.context import FitContext
from bayesprune.methods.unit_gates import UnitGatesOptions
from bayesprune.methods.unit_gates.budget import MacConstraint
from bayesprune.methods.unit_gates.method import macs_target

SHAPE = (1, 6, 6)


def cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, 16),
        nn.ReLU(),
        nn.Linear(16, 3),
    )


@pytest.mark.parametrize("target", [0.15, 0.8])
def test_the_tilt_meets_the_target_by_a_logit_shift_in_proportion_to_each_units_macs(target):
    """After one tilt the gates' expected MACs (a fresh ExpectedMacs, itself checked against enumeration) are
    the target, and every unit's logit moved by the same multiple of its finite-difference MAC slope: the
    I-projection q' ∝ q · exp(−c · MACs) under MACs linearised at θ. Below the starting MACs the gates close
    (c > 0), above they open (c < 0)."""
    net = cnn()
    gates = UnitGates(net, input_shape=SHAPE)
    with torch.no_grad():
        gates.raw.copy_(0.2 + 0.6 * torch.rand(gates.raw.shape, generator=torch.Generator().manual_seed(2)))
    before = gates.raw.detach().double().clone()
    constraint = MacConstraint(net, gates, target=target, warmup=0.0, total_steps=1, clip=(1e-6, 1 - 1e-6))
    kept = [torch.arange(n) for n in gates.units]
    constraint.tilt(gates, kept, torch.zeros_like(gates.raw, dtype=torch.bool), 1)
    oracle = ExpectedMacs(net, gates)
    after = gates.raw.detach().double()
    assert float(oracle(gates.per_layer(after))) / count_macs(net, SHAPE) == pytest.approx(target, abs=1e-4)

    def ratio(theta):
        return float(oracle(gates.per_layer(theta))) / oracle.dense()

    slopes = []
    for unit in range(len(before)):  # central differences of the starting ratio, unit by unit
        step = torch.zeros_like(before)
        step[unit] = 1e-4
        slopes.append((ratio(before + step) - ratio(before - step)) / 2e-4)
    slopes = torch.tensor(slopes, dtype=torch.float64)
    shift = torch.logit(after) - torch.logit(before)
    price = -shift / (slopes / slopes.mean())
    torch.testing.assert_close(price, price.mean().expand_as(price), rtol=1e-3, atol=1e-4)
    assert (price.mean() > 0) == (target < ratio(before))


@pytest.mark.parametrize("target", [0.3, 0.6])
def test_trained_gates_land_on_the_target_and_the_network_fits_under_it(target):
    """A fit at ``unit-gates.macs``: the gates' expected MACs after the last epoch are the target, and the
    returned network's own MAC count (count_macs of the smaller network) is at most the target, within the
    MACs of a few units of it."""
    from bayesprune import fit_method

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(128, *SHAPE, generator=generator)
    y = (x[:, 0, :3].sum((1, 2)) > 0).long() + (x[:, 0, 3:].sum((1, 2)) > 0).long()
    options = {"macs": target, "log_gamma": -2.0, "theta_lr": 0.05, "finetune_epochs": 0}
    fitted = fit_method("unit-gates", cnn(), (x, y), epochs=4, batch_size=32, device="cpu", options=options)
    metrics = fitted.metrics()
    assert metrics["expected_macs_ratio"][-1] == pytest.approx(target, abs=1e-3)
    kept = count_macs(fitted.net, SHAPE) / count_macs(cnn(), SHAPE)
    assert target - 0.15 < kept <= target
    assert sum(metrics["learned_architecture"]) < sum(metrics["starting_architecture"])


def test_the_target_is_the_options_else_the_largest_of_prune_macs():
    """``unit-gates.macs`` wins; unset, the largest ``prune.macs`` target (smaller ones are cut after the
    fit); neither: no target."""
    run = FitContext(config={"prune": {"macs": [0.3, 0.5]}})
    assert macs_target(UnitGatesOptions(macs=0.2), run) == 0.2
    assert macs_target(UnitGatesOptions(), run) == 0.5
    assert macs_target(UnitGatesOptions(), FitContext(config={"prune": {}})) is None


def test_the_packaged_cnn_settings_remove_units_of_a_small_cnn_within_twice_the_dense_error():
    """``unit-gates-cnn``'s settings on a small CNN with batch norms (digits, 8x8): units leave, the network
    keeps at most the packaged share of the MACs, and its test error is at most twice the dense network's
    trained as long (Adam at the config's rate, its batch-norm statistics estimated again)."""
    from bayesprune import fit_method
    from bayesprune.core.normalization import recalibrate
    from bayesprune.core.plain import maximise_likelihood
    from bayesprune.data import load_dataset
    from bayesprune.pipeline.config import load_config

    config = load_config("unit-gates-cnn")
    options = config.method_options
    data = load_dataset("digits")

    def small():
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 16, 10),
        )

    def error(net):
        net.eval()
        with torch.no_grad():
            return 100 * float((net(data.x_test).argmax(-1) != data.y_test).float().mean())

    lr, epochs, batch = config.optim.lr, config.train.epochs, config.data.batch_size
    train = (data.x_train, data.y_train)
    fitted = fit_method(
        "unit-gates", small(), train, epochs=epochs, batch_size=batch, optim={"lr": lr}, device="cpu", options=options
    )
    dense = small()
    total = epochs + options.finetune_epochs
    maximise_likelihood(
        dense,
        data.x_train,
        data.y_train,
        epochs=total,
        lr=lr,
        batch_size=batch,
        seed=0,
        callbacks=[],
        memory_format=torch.contiguous_format,
    )
    recalibrate(dense, data.x_train, batch_size=batch, seed=0)
    metrics = fitted.metrics()
    assert sum(metrics["learned_architecture"]) < sum(metrics["starting_architecture"])
    assert count_macs(fitted.net, (1, 8, 8)) <= options.macs * count_macs(small(), (1, 8, 8))
    assert error(fitted.net) <= 2 * error(dense), (error(fitted.net), error(dense))
