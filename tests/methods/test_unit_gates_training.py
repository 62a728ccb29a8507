"""Algorithm 1's training loop of unit gates on a network with batch norms (paper 004)."""

import pytest
import torch
from torch import nn

from bayesprune.methods.unit_gates import GateTraining, UnitGatesOptions


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 4 * 4, 3))


def test_the_test_error_after_an_epoch_is_the_eval_mode_networks_and_leaves_its_batch_norm_statistics():
    """The per-epoch test error (Fig. 3) is the network's in eval mode (running statistics, the network
    a user gets), computed here independently; the test rows do not enter the running statistics."""
    net = small_cnn()
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 6, 6, generator=generator), torch.randint(0, 3, (40,), generator=generator)
    x_test, y_test = (
        3 + 2 * torch.randn(30, 1, 6, 6, generator=generator),
        torch.randint(0, 3, (30,), generator=generator),
    )
    training = GateTraining(
        net, UnitGatesOptions(), num_train=40, lr=1e-3, input_shape=(1, 6, 6), test=(x_test, y_test)
    )
    training.step(x, y, 0, 1)
    norm = training.net[1]
    before = (norm.running_mean.clone(), norm.running_var.clone(), int(norm.num_batches_tracked))
    expected = torch.nn.functional.batch_norm(
        training.net[0](x_test), before[0], before[1], norm.weight, norm.bias, training=False, eps=norm.eps
    )
    with torch.no_grad():
        expected = training.net[4](training.net[3](training.net[2](expected))).argmax(-1)
    training.on_epoch(0, None)
    assert training.epoch_test_error == [pytest.approx(100 * float((expected != y_test).float().mean()))]
    torch.testing.assert_close(norm.running_mean, before[0], rtol=0, atol=0)
    torch.testing.assert_close(norm.running_var, before[1], rtol=0, atol=0)
    assert int(norm.num_batches_tracked) == before[2] and training.net.training


def test_the_returned_networks_batch_norm_statistics_are_its_own_on_the_training_rows():
    """``recalibrate``: the running mean of the returned (smaller, fine-tuned) network's batch norm is the
    mean of its input over the training rows (4 batches of 16 cover the 64 rows, each counted once),
    computed here from the returned network; with ``recalibrate = false`` it is the training's moving
    average, which is not."""
    from bayesprune import fit_method

    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(64, 1, 6, 6, generator=generator), torch.randint(0, 3, (64,), generator=generator)
    means = {}
    for recalibrate in (True, False):
        options = {"log_gamma": -1.0, "finetune_epochs": 1, "recalibrate": recalibrate}
        fitted = fit_method("unit-gates", small_cnn(), (x, y), epochs=1, batch_size=16, device="cpu", options=options)
        net = fitted.net
        with torch.no_grad():
            expected = net[0](x).mean(dim=(0, 2, 3))
        means[recalibrate] = (net[1].running_mean, expected)
    torch.testing.assert_close(*means[True], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(*means[False], rtol=1e-2, atol=1e-3)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 3))


def test_the_floor_keeps_each_groups_units_of_highest_theta():
    """``with_floors``: each group's ceil(fraction · starting units) units of highest θ kept, whatever
    ``keep`` says of them (brute force: the θ sorted by hand); fraction 0 leaves ``keep`` as it is."""
    for fraction, floors in ((0.35, [4, 3]), (0.0, [0, 0])):
        training = GateTraining(mlp(), UnitGatesOptions(min_keep_fraction=fraction), num_train=8, lr=1e-3)
        theta = torch.rand(18, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            training.gates.raw.copy_(theta)
        keep = [torch.zeros(10, dtype=torch.bool), torch.tensor([True] + [False] * 7)]
        kept = training.with_floors(keep)
        for k, given, t, floor in zip(kept, keep, (theta[:10], theta[10:]), floors):
            highest = sorted(range(len(t)), key=lambda i: -float(t[i]))[:floor]
            expected = given.clone()
            expected[highest] = True
            assert torch.equal(k, expected)


def test_a_prior_that_closes_every_gate_leaves_each_group_its_floor():
    """A Flattening prior far stronger than the data (log γ = −40, θ at Adam 0.3) closes every gate the
    floor does not hold: with ``min_keep_fraction = 0.35`` the learned widths are exactly the floors
    (4 of 10, 3 of 8); without it, as Algorithm 1 is written here, a layer whose units all meet the pruning
    condition at the same step keeps them all."""
    from bayesprune import fit_method

    generator = torch.Generator().manual_seed(4)
    x, y = torch.randn(64, 5, generator=generator), torch.randint(0, 3, (64,), generator=generator)
    widths = {}
    for fraction in (0.35, 0.0):
        options = {"log_gamma": -40.0, "theta_lr": 0.3, "min_keep_fraction": fraction}
        fitted = fit_method("unit-gates", mlp(), (x, y), epochs=3, batch_size=16, device="cpu", options=options)
        widths[fraction] = fitted.metrics()["learned_architecture"]
    assert widths[0.35] == [4, 3]
    assert widths[0.0] == [10, 8]


def test_the_network_trains_in_training_mode_after_units_leave():
    """Units removed while training give a smaller network that goes on training in training mode (its batch
    norms normalise by the minibatch's statistics and update their running ones): the rebuilt network came
    back in another mode would train Algorithm 1's later steps and the fine-tuning with frozen statistics."""
    net = small_cnn()
    training = GateTraining(net, UnitGatesOptions(), num_train=40, lr=1e-3, input_shape=(1, 6, 6))
    training.remove([torch.arange(6) < 4])
    assert training.gates.units == [4]
    assert all(module.training for module in training.net.modules())
    x = torch.randn(40, 1, 6, 6, generator=torch.Generator().manual_seed(5))
    before = training.net[1].running_mean.clone()
    training.step(x, torch.zeros(40, dtype=torch.long), 0, 1)
    assert not torch.equal(training.net[1].running_mean, before)


def test_fit_method_trains_the_network_in_training_mode():
    """``fit_method``'s check of the user's network ran it in eval mode and left it there, so every method fitted
    from Python trained with frozen batch-norm statistics: after a fit of unit gates without fine-tuning, the
    batch norm's running mean has moved from its initial zeros (it updates only in training mode)."""
    from bayesprune import fit_method

    generator = torch.Generator().manual_seed(6)
    x, y = torch.randn(64, 1, 6, 6, generator=generator) + 1, torch.randint(0, 3, (64,), generator=generator)
    options = {"log_gamma": -1.0, "finetune_epochs": 0, "recalibrate": False}
    fitted = fit_method("unit-gates", small_cnn(), (x, y), epochs=1, batch_size=16, device="cpu", options=options)
    assert float(fitted.net[1].running_mean.abs().max()) > 1e-3


def test_the_fine_tuning_progress_bar_shows_the_loss_per_example_as_training_does(capsys):
    """The reported case: the fine-tuning bar showed the loss N times training's (3196 against 2.29 on
    digits: eq. 16's (N/B) Σ, not its mean). Oracle: the mean cross-entropy of the fitted network over the
    training rows, computed here; the bar's last loss of each stage is within a factor 2 of it."""
    import re

    import torch.nn.functional as F

    import bayesprune
    from bayesprune.data.registry import load_dataset
    from bayesprune.models.architectures import build_architecture

    data = load_dataset("digits")
    torch.manual_seed(0)
    net = build_architecture("mlp", data.input_shape, data.output_dim, hidden=[32])
    train, test = (data.x_train, data.y_train), (data.x_test, data.y_test)
    fitted = bayesprune.fit_method(
        "unit-gates", net, train, test, options={"finetune_epochs": 1}, epochs=1, progress=True
    )
    err = capsys.readouterr().err
    with torch.no_grad():
        mean_loss = float(F.cross_entropy(fitted.network().eval()(data.x_train), data.y_train))
    for stage in ("gates", "fine-tune"):
        shown = float(re.findall(rf"{stage}: 100%.*loss=([0-9.e+-]+)\]", err)[-1])
        assert mean_loss / 2 < shown < 2 * mean_loss, (stage, shown, mean_loss)
