"""Tests of bayesprune.core.loop (the SVI loop) and bayesprune.core.checkpoint.

Oracles: the closed-form optimum of mean-field VI for Bayesian linear regression, the known truth of
simulated sparse regressions (relevant inputs, noise level), exact arithmetic on recorded losses and
learning rates, and parameters snapshotted independently of the checkpoint code.
"""

import math

import numpy as np
import pyro
import pytest
import torch
import torch.nn.functional as F
from pyro.optim import SGD, Adam, ClippedAdam, StepLR
from torch import nn
from torch.distributions import Bernoulli, Normal, kl_divergence

from bayesprune.core.checkpoint import load_module_state, read_checkpoint, save_checkpoint
from bayesprune.core.errors import TrainingDiverged
from bayesprune.core.loop import (
    Callback,
    History,
    TensorBatches,
    fit,
    optimizer_step,
    svi_step,
    train,
)
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.penalties import GeometricPenalty, UniformPenalty
from bayesprune.core.predict import predict
from bayesprune.data import load_dataset
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import SBNNFitted
from bayesprune.models import BayesianNetwork, Categorical, Gaussian, mlp
from bayesprune.models.priors import SpikeSlabPrior


def snapshot(guide):
    """An independent copy of the guide's variational parameters."""
    return {"loc": guide.loc.detach().clone(), "scale": F.softplus(guide.rho.detach()).clone()}


def classification_problem(seed=0, n=60):
    """Two Gaussian blobs in 2-D, a [5]-hidden MLP sBNN and its guide, all built from ``seed``."""
    pyro.set_rng_seed(seed)
    labels = torch.arange(n) % 2
    x = torch.randn(n, 2) + 2.0 * (2 * labels[:, None].float() - 1)
    net = mlp((2,), 2, hidden=[5])
    model = BayesianNetwork(net, SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=1.0), Categorical(n))
    guide = SpikeSlabGuide(model, init_scale=0.05)
    return model, guide, x, labels


# Conjugate oracle: mean-field VI for Bayesian linear regression.


@pytest.mark.parametrize("correlation, noise", [(0.0, 0.5), (0.8, 0.3)])
def test_fit_recovers_mean_field_optimum_of_linear_regression(correlation, noise):
    """With a near-Gaussian N(0, 1) prior (tau0 = 0.999, tau1 = 1) the fitted q matches the closed-form optimum.

    For a Gaussian posterior N(mu, Lambda^-1) the optimal mean-field Gaussian has m = mu and
    sigma_j = Lambda_jj^(-1/2), which differs from the posterior marginal sd when inputs correlate.
    """
    pyro.set_rng_seed(1)
    num, dim = 40, 3
    cov = torch.full((dim, dim), correlation) + (1 - correlation) * torch.eye(dim)
    cov[2, :2] = cov[:2, 2] = 0.0
    x = torch.randn(num, dim) @ torch.linalg.cholesky(cov).T
    y = x @ torch.tensor([1.0, -0.5, 0.0]) + noise * torch.randn(num)
    precision = x.T @ x / noise**2 + torch.eye(dim)
    mu = torch.linalg.solve(precision, x.T @ y / noise**2)
    mean_field_sd = precision.diag().rsqrt()

    prior = SpikeSlabPrior(pi=0.5, tau0=0.999, tau1=1.0)
    model = BayesianNetwork(nn.Linear(dim, 1, bias=False), prior, Gaussian(num, scale=noise))
    guide = SpikeSlabGuide(model, init_scale=0.1)
    epochs = 1000
    fit(
        model,
        guide,
        TensorBatches(x, y, batch_size=num, shuffle=False),
        objective=AnalyticKLELBO(),
        optim=ClippedAdam({"lr": 0.03, "lrd": 0.01 ** (1 / epochs)}),
        epochs=epochs,
    )
    fitted = snapshot(guide)
    assert torch.all((fitted["loc"] - mu).abs() <= 0.3 * mean_field_sd), (fitted["loc"], mu)
    torch.testing.assert_close(fitted["scale"], mean_field_sd, rtol=0.15, atol=0.0)
    if correlation > 0:
        # The oracle discriminates: the exact marginal sd is far from the mean-field one, and the fit
        # follows the latter.
        marginal_sd = torch.linalg.inv(precision).diag().sqrt()
        assert torch.all(marginal_sd[:2] > 1.4 * mean_field_sd[:2])
        assert torch.all((fitted["scale"] - mean_field_sd).abs() < (fitted["scale"] - marginal_sd).abs()[:2].min())


# The loop itself.


def test_objective_falls_and_history_is_consistent():
    """The mean loss of the last epochs is below that of the first; epoch losses are means of step losses."""
    model, guide, x, y = classification_problem()
    batches = TensorBatches(x, y, batch_size=16)
    history = fit(model, guide, batches, objective=AnalyticKLELBO(), optim=Adam({"lr": 0.05}), epochs=30)
    assert isinstance(history, History)
    assert len(history.epoch_losses) == 30 and len(history.step_losses) == 30 * 4
    assert sum(history.epoch_losses[-5:]) / 5 < sum(history.epoch_losses[:5]) / 5
    for epoch, value in enumerate(history.epoch_losses):
        steps = history.step_losses[4 * epoch : 4 * epoch + 4]
        assert value == pytest.approx(sum(steps) / 4, rel=1e-12)
    assert history.elbo == [-value for value in history.epoch_losses]


def test_tensor_batches_cover_each_epoch_once():
    """Every epoch yields each row exactly once, in ceil(N/B) batches; seeds fix the order, epochs reshuffle."""
    x = torch.arange(23.0)[:, None]
    batches = TensorBatches(x, torch.arange(23), batch_size=5, seed=3)
    assert len(batches) == 5
    epochs = [[yb.tolist() for _, yb in batches] for _ in range(2)]
    for epoch in epochs:
        assert [len(b) for b in epoch] == [5, 5, 5, 5, 3]
        assert sorted(sum(epoch, [])) == list(range(23))
    assert epochs[0] != epochs[1]
    again = TensorBatches(x, torch.arange(23), batch_size=5, seed=3)
    assert [yb.tolist() for _, yb in again] == epochs[0]
    plain = TensorBatches(x, torch.arange(23), batch_size=5, shuffle=False)
    assert sum([yb.tolist() for _, yb in plain], []) == list(range(23))


def test_callbacks_run_every_epoch_and_can_stop():
    """Callbacks see (epoch, history) after every epoch; one returning True ends the fit after that epoch."""
    model, guide, x, y = classification_problem()
    seen = []

    def record(epoch, history):
        seen.append((epoch, len(history.epoch_losses)))

    def stop_after_third(epoch, history):
        return epoch == 2

    history = fit(
        model,
        guide,
        TensorBatches(x, y, batch_size=30),
        objective=AnalyticKLELBO(),
        optim=Adam({"lr": 0.01}),
        epochs=10,
        callbacks=[record, stop_after_third],
    )
    assert seen == [(0, 1), (1, 2), (2, 3)]
    assert len(history.epoch_losses) == 3


def test_lr_scheduler_steps_once_per_epoch():
    """A PyroLRScheduler (StepLR, gamma 1/2, step 1) ends at lr0 * 2^-epochs, whatever the batches per epoch."""
    model, guide, x, y = classification_problem()
    scheduler = StepLR({"optimizer": torch.optim.SGD, "optim_args": {"lr": 0.004}, "step_size": 1, "gamma": 0.5})
    fit(model, guide, TensorBatches(x, y, batch_size=20), objective=AnalyticKLELBO(), optim=scheduler, epochs=4)
    rates = [group["lr"] for sched in scheduler.optim_objs.values() for group in sched.optimizer.param_groups]
    assert rates and all(rate == pytest.approx(0.004 * 0.5**4, rel=1e-12) for rate in rates)


def joint_kl(guide, prior):
    """Sum of KL(q(W)q(Z) || pi(W, Z)) over all weights, via the chain rule and torch's closed-form KLs."""
    total = 0.0
    for q in guide.posteriors().values():
        p = q.probs
        total = (
            total
            + (
                kl_divergence(Bernoulli(probs=p), Bernoulli(probs=torch.full_like(p, prior.pi)))
                + p * kl_divergence(Normal(q.loc, q.scale), Normal(0.0, prior.tau1))
                + (1 - p) * kl_divergence(Normal(q.loc, q.scale), Normal(0.0, prior.tau0))
            ).sum()
        )
    return total.item()


def test_geometric_penalty_reweights_the_kl_per_step():
    """With frozen parameters (lr 0) and the same draws, step i of the geometric scheme differs from the
    uniform one by (M r_i - 1) * KL, with r_i = 2^(M-i)/(2^M - 1) and KL from torch's closed forms."""
    model, guide, x, y = classification_problem(n=64)
    prior = SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=1.0)
    runs = {}
    for name, penalty in [("uniform", UniformPenalty()), ("geometric", GeometricPenalty())]:
        pyro.set_rng_seed(4)
        runs[name] = fit(
            model,
            guide,
            TensorBatches(x, y, batch_size=16, seed=1),
            objective=AnalyticKLELBO(),
            optim=SGD({"lr": 0.0}),
            epochs=2,
            penalty=penalty,
        ).step_losses
    with torch.no_grad():
        kl = joint_kl(guide, prior)
    num_batches = 4
    for step, (uniform, geometric) in enumerate(zip(runs["uniform"], runs["geometric"])):
        i = step % num_batches + 1
        weight = num_batches * 2 ** (num_batches - i) / (2**num_batches - 1)
        assert geometric - uniform == pytest.approx((weight - 1) * kl, rel=1e-4, abs=1e-3)


# Recovery of a known sparse truth.


@pytest.fixture(scope="module")
def sparse_regression():
    """The simulated linear regression: y = 2 x0 + 2 x1 + noise, eight irrelevant inputs, standardised."""
    return load_dataset("linear-regression", n=500, num_features=10, num_relevant=2, seed=0)


def fit_sparse(data, net, epochs):
    model = BayesianNetwork(net, SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=math.e), Gaussian(data.num_train, scale=None))
    guide = SpikeSlabGuide(model, init_scale=0.01)
    steps = epochs * math.ceil(data.num_train / 100)
    fit(
        model,
        guide,
        TensorBatches(data.x_train, data.y_train, batch_size=100),
        objective=AnalyticKLELBO(local_reparameterization=True),
        optim=ClippedAdam({"lr": 0.05, "lrd": 0.1 ** (1 / steps)}),
        epochs=epochs,
    )
    return model, guide


def test_linear_sbnn_selects_the_relevant_inputs(sparse_regression):
    """A linear sBNN gives p > 0.9 to the 2 relevant inputs and p < 0.1 to the 8 irrelevant ones, and learns the
    noise level 1 / target_std of the standardised targets (type-II ML)."""
    pyro.set_rng_seed(0)
    model, guide = fit_sparse(sparse_regression, nn.Sequential(nn.Linear(10, 1)), epochs=200)
    relevant = sparse_regression.extras["relevant"]
    probs = guide.inclusion_probabilities()["0.weight"].squeeze(0)
    assert torch.all(probs[relevant] > 0.9), probs
    assert torch.all(probs[~relevant] < 0.1), probs
    # Weights estimate beta_j / target_std (standardised x has unit sd up to sampling).
    means = guide.mean_params()["0.weight"].squeeze(0)
    expected = sparse_regression.extras["beta"] / sparse_regression.target_std
    torch.testing.assert_close(means, expected, rtol=0.0, atol=0.08)
    noise = model.likelihood.scale.item()
    assert noise == pytest.approx(1.0 / sparse_regression.target_std, rel=0.1)


def test_mlp_sbnn_selects_the_relevant_inputs(sparse_regression):
    """In an MLP sBNN (hidden [10], small first-layer init) every relevant input keeps a first-layer weight with
    p > 0.9, while all weights of the irrelevant inputs fall into the spike (max over hidden units < 0.2)."""
    pyro.set_rng_seed(1)
    net = mlp((10,), 1, hidden=[10])
    with torch.no_grad():
        net[1].weight.mul_(0.2)
    _, guide = fit_sparse(sparse_regression, net, epochs=150)
    per_input = guide.inclusion_probabilities()["1.weight"].max(0).values
    relevant = sparse_regression.extras["relevant"]
    assert torch.all(per_input[relevant] > 0.9), per_input
    assert torch.all(per_input[~relevant] < 0.2), per_input


# Divergence, reproducibility, checkpoints.


class PoisonedBatches:
    """Two batches per epoch; from epoch ``good_epochs + 1`` on, the second batch has targets of 1e30 (loss inf)."""

    def __init__(self, x, y, good_epochs):
        self.x, self.y, self.good_epochs, self.epoch = x, y, good_epochs, 0
        self.generator = torch.Generator()  # checkpointed as a shuffler's state would be

    def __len__(self):
        return 2

    def __iter__(self):
        self.epoch += 1
        half = len(self.x) // 2
        yield self.x[:half], self.y[:half]
        y = self.y[half:] if self.epoch <= self.good_epochs else torch.full_like(self.y[half:], 1e30)
        yield self.x[half:], y


def regression_problem(seed, n=20):
    pyro.set_rng_seed(seed)
    prior = SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=1.0)
    model = BayesianNetwork(mlp((3,), 1, hidden=[4]), prior, Gaussian(n, scale=0.5))
    guide = SpikeSlabGuide(model, init_scale=0.05)
    return model, guide


def test_training_diverged_keeps_last_good_checkpoint(tmp_path):
    """An infinite loss raises TrainingDiverged; the checkpoint written after the last good epoch loads with
    weights_only=True and restores exactly the parameters snapshotted at that epoch."""
    model, guide = regression_problem(0)
    x, y = torch.randn(20, 3), torch.randn(20)
    path = tmp_path / "last.pt"
    snapshots = []
    optim = Adam({"lr": 0.01})
    step = svi_step(model, guide, objective=AnalyticKLELBO(), optim=optim)
    with pytest.raises(TrainingDiverged, match="epoch 3"):
        FitContext(checkpoint=path).train(
            "svi",
            step,
            PoisonedBatches(x, y, good_epochs=2),
            epochs=10,
            state={"model": model, "guide": guide, "optimizer": optim},
            callbacks=[lambda epoch, history: snapshots.append(snapshot(guide))],
        )
    assert len(snapshots) == 2
    assert path.exists() and not (tmp_path / "last.pt.partial").exists()
    state = torch.load(path, weights_only=True)
    assert state["metadata"] == {"epoch": 2, "stage": "svi"}
    # The live guide moved on (it took steps in epoch 3); the checkpoint did not.
    assert not torch.equal(snapshot(guide)["loc"], snapshots[-1]["loc"])
    pyro.clear_param_store()
    fresh_model, fresh_guide = regression_problem(7)
    assert load_checkpoint(path, model=fresh_model, guide=fresh_guide) == {"epoch": 2, "stage": "svi"}
    restored = snapshot(fresh_guide)
    assert torch.equal(restored["loc"], snapshots[-1]["loc"])
    assert torch.equal(restored["scale"], snapshots[-1]["scale"])


def test_training_diverged_on_nan_loss():
    """A loss that is NaN (NaN inputs, validation off so the NaN reaches the loss) raises TrainingDiverged."""
    model, guide = regression_problem(0)
    x = torch.full((20, 3), float("nan"))
    pyro.enable_validation(False)
    with pytest.raises(TrainingDiverged):
        fit(
            model,
            guide,
            TensorBatches(x, torch.randn(20), batch_size=20),
            objective=AnalyticKLELBO(),
            optim=Adam({"lr": 0.01}),
            epochs=3,
        )


def run_fit(seed):
    pyro.clear_param_store()
    model, guide = regression_problem(seed)
    data = torch.Generator().manual_seed(123)
    x, y = torch.randn(20, 3, generator=data), torch.randn(20, generator=data)
    history = fit(
        model,
        guide,
        TensorBatches(x, y, batch_size=5, seed=seed),
        objective=AnalyticKLELBO(),
        optim=Adam({"lr": 0.02}),
        epochs=5,
    )
    return history, snapshot(guide)


def test_fits_with_the_same_seed_are_identical():
    """Two fits from the same seed (fresh parameter store) give bit-identical losses and parameters on CPU."""
    first, first_params = run_fit(3)
    second, second_params = run_fit(3)
    other, _ = run_fit(4)
    assert first.step_losses == second.step_losses
    assert torch.equal(first_params["loc"], second_params["loc"])
    assert torch.equal(first_params["scale"], second_params["scale"])
    assert other.step_losses != first.step_losses


def load_checkpoint(path, *, model, guide) -> dict:
    """Restore an sBNN's model and guide from a checkpoint; returns its metadata."""
    saved = read_checkpoint(path)
    load_module_state(model, saved["state"]["model"])
    load_module_state(guide, saved["state"]["guide"])
    return saved["metadata"]


def test_checkpoint_round_trip_restores_guide(tmp_path):
    """save_checkpoint/read_checkpoint restore every guide tensor exactly into a freshly initialised model/guide
    (new parameter store), and the restored pair gives the same predictions and the same loss at a fixed seed."""
    model, guide = regression_problem(0)
    x, y = torch.randn(20, 3), torch.randn(20)
    batches = TensorBatches(x, y, batch_size=10)
    fit(model, guide, batches, objective=AnalyticKLELBO(), optim=Adam({"lr": 0.05}), epochs=3)
    path = tmp_path / "model.pt"
    save_checkpoint(path, SBNNFitted(model, guide), metadata={"epoch": 3, "note": "round trip"})
    expected = {name: value.clone() for name, value in guide.state_dict().items()}
    pyro.set_rng_seed(9)
    expected_loss = AnalyticKLELBO().loss(model, guide, x, y)
    expected_prediction = predict(model, guide, x)

    pyro.clear_param_store()
    fresh_model, fresh_guide = regression_problem(5)
    assert not torch.equal(fresh_guide.state_dict()["loc_unconstrained"], expected["loc_unconstrained"])
    metadata = load_checkpoint(path, model=fresh_model, guide=fresh_guide)
    assert metadata == {"epoch": 3, "note": "round trip"}
    state = fresh_guide.state_dict()
    assert state.keys() == expected.keys()
    for name in expected:
        assert torch.equal(state[name], expected[name]), name
    torch.testing.assert_close(predict(fresh_model, fresh_guide, x), expected_prediction, rtol=0, atol=0)
    pyro.set_rng_seed(9)
    assert AnalyticKLELBO().loss(fresh_model, fresh_guide, x, y) == expected_loss


def test_checkpoint_load_survives_a_stale_param_store(tmp_path):
    """Loading into a fresh guide in the same process (param store still populated by a later fit) restores the
    checkpointed parameters also for the next loss evaluation (oracle: the loss recorded at save time)."""
    model, guide = regression_problem(0)
    x, y = torch.randn(20, 3), torch.randn(20)
    batches = TensorBatches(x, y, batch_size=10)
    fit(model, guide, batches, objective=AnalyticKLELBO(), optim=Adam({"lr": 0.05}), epochs=2)
    path = tmp_path / "model.pt"
    save_checkpoint(path, SBNNFitted(model, guide))
    pyro.set_rng_seed(9)
    expected_loss = AnalyticKLELBO().loss(model, guide, x, y)
    fit(model, guide, batches, objective=AnalyticKLELBO(), optim=Adam({"lr": 0.1}), epochs=3)

    fresh_model, fresh_guide = regression_problem(5)
    load_checkpoint(path, model=fresh_model, guide=fresh_guide)
    pyro.set_rng_seed(9)
    assert AnalyticKLELBO().loss(fresh_model, fresh_guide, x, y) == pytest.approx(expected_loss, rel=1e-6)


def test_train_runs_any_step_to_its_optimum_least_squares():
    """``train`` over a plain optimiser step: linear least squares reaches numpy's lstsq solution."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 3, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([1.5, -2.0, 0.5], dtype=torch.float64) + 0.1 * torch.randn(
        200, generator=generator, dtype=torch.float64
    )
    weight = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    calls = []

    def step(xb, yb, index, num_batches):
        calls.append((index, num_batches))
        optimizer.zero_grad()
        loss = ((xb @ weight - yb) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    history = train(step, TensorBatches(x, y, batch_size=200), epochs=300)
    expected = np.linalg.lstsq(x.numpy(), y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(weight.detach().numpy(), expected, atol=1e-8)
    assert calls[0] == (0, 1) and len(history.epoch_losses) == 300 == len(history.step_losses)
    assert history.epoch_losses[-1] == pytest.approx(float(((x @ torch.as_tensor(expected) - y) ** 2).mean()))


def test_train_names_the_first_diverged_step():
    losses = iter([1.0, 2.0, 3.0, float("nan"), float("inf")])
    with pytest.raises(TrainingDiverged, match="epoch 2, step 2"):
        train(lambda x, y, i, n: torch.tensor(next(losses)), [(None, None)] * 2, epochs=3)


def test_train_with_optimizer_step_reaches_lstsq():
    """``optimizer_step`` (Adam on a mean squared error, minibatches of 50, learning rate decayed per epoch by a
    torch scheduler) ends at numpy's lstsq solution, up to the minibatch noise of the last small steps."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(200, 4, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64) + 0.2 * torch.randn(
        200, generator=generator, dtype=torch.float64
    )
    net = nn.Linear(4, 1, bias=False).double()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.98)
    step = optimizer_step(lambda xb, yb: F.mse_loss(net(xb).squeeze(-1), yb), optimizer)
    history = train(step, TensorBatches(x, y, batch_size=50, seed=2), epochs=400, scheduler=schedule)
    expected = np.linalg.lstsq(x.numpy(), y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(net.weight.detach().numpy()[0], expected, atol=5e-5)
    assert len(history.step_losses) == 400 * 4
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.98**400)


class Recorder(Callback):
    """Logs every hook call into a shared list; stops after epoch ``stop`` (0-based) if given."""

    def __init__(self, name, log, stop=None):
        self.name, self.log, self.stop = name, log, stop

    def on_step(self, epoch, index, loss):
        assert torch.is_tensor(loss) and loss.dim() == 0
        self.log.append((self.name, "step", epoch, index))

    def on_epoch(self, epoch, history):
        self.log.append((self.name, "epoch", epoch, len(history.epoch_losses)))
        return epoch == self.stop


class EpochOnly:
    def __init__(self, log):
        self.log = log

    def on_epoch(self, epoch, history):
        self.log.append(("epoch-only", "epoch", epoch, len(history.epoch_losses)))


def counting_step(x, y, index, num_batches):
    return torch.tensor(float(index + 1))


def test_train_calls_hooks_in_order_and_stops_early():
    """on_step runs after every step in list order, on_epoch after every epoch in list order (plain callables
    too); one on_epoch returning True stops after that epoch, but every callback of that epoch still runs."""
    log = []
    callbacks = [
        Recorder("a", log),
        EpochOnly(log),
        lambda epoch, history: log.append(("plain", "epoch", epoch)),
        Recorder("b", log, stop=1),
    ]
    history = train(counting_step, [(None, None)] * 3, epochs=5, callbacks=callbacks)
    expected = []
    for epoch in range(2):
        for index in range(3):
            expected += [("a", "step", epoch, index), ("b", "step", epoch, index)]
        expected += [
            ("a", "epoch", epoch, epoch + 1),
            ("epoch-only", "epoch", epoch, epoch + 1),
            ("plain", "epoch", epoch),
            ("b", "epoch", epoch, epoch + 1),
        ]
    assert log == expected
    assert history.epoch_losses == [2.0, 2.0] and history.step_losses == [1.0, 2.0, 3.0] * 2


def test_train_divergence_names_epoch_and_step_after_earlier_epoch_callbacks():
    """A NaN at epoch 2, step 3 raises TrainingDiverged naming them; epoch 1's on_epoch ran, epoch 2's did not,
    and on_step ran for every step before the bad one."""
    log = []
    losses = iter([1.0, 1.0, 1.0, 1.0, 1.0, float("nan"), 1.0])
    with pytest.raises(TrainingDiverged, match="epoch 2, step 3"):
        train(
            lambda x, y, i, n: torch.tensor(next(losses)), [(None, None)] * 3, epochs=3, callbacks=[Recorder("r", log)]
        )
    assert [entry for entry in log if entry[1] == "epoch"] == [("r", "epoch", 0, 1)]
    assert [entry[2:] for entry in log if entry[1] == "step"] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_train_rejects_a_callback_without_hooks():
    with pytest.raises(TypeError, match="on_step/on_epoch"):
        train(counting_step, [(None, None)], epochs=1, callbacks=[object()])
