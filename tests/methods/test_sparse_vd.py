"""Sparse Variational Dropout (Molchanov, Ashukha and Vetrov, 2017): the KL approximation of eq. 14,
local reparameterisation, the ARD effect on a linear model, and a run from the command line."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import kl_divergence

from bayesprune.core.errors import ConfigError
from bayesprune.core.fused import kernel_mode
from bayesprune.data import Dataset
from bayesprune.methods import FitContext, get_method
from bayesprune.methods.sparse_vd import SparseVDOptions
from bayesprune.methods.sparse_vd.distributions import (
    K1,
    AdditiveNormal,
    AdditiveNormals,
    LogUniform,
    neg_kl_approximation,
)
from bayesprune.methods.sparse_vd.model import KLAnnealing, MaskedLocalReparameterization, linear_decay
from bayesprune.pipeline.config import OptimConfig, load_config

EULER_GAMMA = 0.5772156649015329


def exact_neg_kl(log_alpha: float, *, draws: int = 1_000_000, seed: int = 0) -> float:
    """−KL(N(θ, αθ²) ‖ log-uniform) up to its constant by Monte Carlo (section 4.2):
    ½ log α − E log|1 + √α ξ|, ξ ~ N(0, 1), shifted by its limit (γ + log 2)/2 at α → ∞ so that it
    tends to 0 there, as eq. 14 with C = −k1 does."""
    xi = torch.randn(draws, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    value = 0.5 * log_alpha - torch.log((1 + math.exp(0.5 * log_alpha) * xi).abs()).mean().item()
    return value - (EULER_GAMMA + math.log(2)) / 2


@pytest.mark.parametrize("log_alpha", [-6.0, -3.0, -1.0, 0.0, 1.0, 2.0, 3.0, 5.0])
def test_the_kl_approximation_is_within_0_01_of_the_monte_carlo_kl(log_alpha):
    approximation = neg_kl_approximation(torch.tensor(log_alpha, dtype=torch.float64)).item()
    assert approximation == pytest.approx(exact_neg_kl(log_alpha), abs=0.01)


def test_the_kl_approximation_has_the_papers_constants_and_limits():
    la = torch.tensor([-20.0, 0.0, 20.0], dtype=torch.float64)
    values = neg_kl_approximation(la)
    # at log α = 0: k1 σ(k2) − ½ log 2 − k1
    assert values[1].item() == pytest.approx(
        0.63576 / (1 + math.exp(-1.87320)) - 0.5 * math.log(2) - 0.63576, abs=1e-12
    )
    assert values[2].item() == pytest.approx(0.0, abs=1e-8)  # α → ∞: −KL → k1 + C = 0
    assert values[0].item() == pytest.approx(-10.0 - K1 + 0.63576 / (1 + math.exp(-(1.87320 - 1.48695 * 20))), abs=1e-6)
    assert torch.all(values[1:] - values[:-1] > 0)  # larger dropout rate, smaller KL


def test_the_registered_kl_is_the_negated_approximation_summed_over_a_site():
    theta = torch.randn(4, 3, dtype=torch.float64)
    log_sigma2 = torch.randn(4, 3, dtype=torch.float64) - 3
    q = AdditiveNormal(theta, log_sigma2)
    kl = kl_divergence(q.to_event(2), LogUniform(dtype=torch.float64).expand((4, 3)).to_event(2))
    log_alpha = log_sigma2 - torch.log(theta**2 + 1e-8)
    assert kl.item() == pytest.approx(-neg_kl_approximation(log_alpha.clamp(-8, 8)).sum().item(), rel=1e-10)
    assert kl.item() > 0


def test_the_fused_kl_equals_the_registered_kl_values_and_gradients(kernels):
    """A site's KL from the fused network-wide evaluation (bayesprune.core.fused, its kernel eager or
    compiled) equals the registered KL summed, in value and in its gradients in θ and log σ², across the clip of log α, with a different
    weight per site."""
    shapes = {"0.weight": torch.Size([5, 4]), "2.weight": torch.Size([3, 5])}
    theta = (torch.logspace(0, -4, 35) * torch.tensor([1.0, -1.0]).repeat(18)[:35]).requires_grad_()
    log_sigma2 = torch.linspace(-14, 2, 35).requires_grad_()
    sites = AdditiveNormals(theta, log_sigma2, shapes).sites
    raw = log_sigma2 - torch.log(theta**2 + 1e-8)
    assert raw.min() < -8 < raw.max() and raw.min() < 8 < raw.max()
    weights = {"0.weight": 0.5, "2.weight": 2.0}

    def total(kl):
        loss = sum(weights[name] * kl(q, LogUniform().expand(q.batch_shape)) for name, q in sites.items())
        return (loss, *torch.autograd.grad(loss, (theta, log_sigma2)))

    with kernel_mode(kernels):
        fused = total(lambda q, p: q.summed_kl(p))
    plain = total(lambda q, p: kl_divergence(q, p).sum())
    torch.testing.assert_close(fused, plain, rtol=2e-6, atol=1e-6)


def test_additive_noise_draws_have_mean_theta_and_variance_sigma2():
    q = AdditiveNormal(torch.tensor([0.5, -2.0]), torch.tensor([math.log(0.04), math.log(1.0)]))
    draws = q.rsample((200_000,))
    assert torch.allclose(draws.mean(0), q.loc, atol=0.01)
    assert torch.allclose(draws.var(0), torch.tensor([0.04, 1.0]), rtol=0.02)


def _moments_by_weight_sampling(layer, x, q, draws=4000):
    outputs = torch.stack([layer(x, q.rsample()) for _ in range(draws)])
    return outputs.mean(0), outputs.var(0)


def _moments_by_local_reparameterization(layer, x, q, draws=4000):
    weight = q.rsample()  # stands for the guide's draw: the mode recognises it by identity
    with MaskedLocalReparameterization({id(weight): q}):
        outputs = torch.stack([layer(x, weight) for _ in range(draws)])
    return outputs.mean(0), outputs.var(0)


@pytest.mark.parametrize("kind", ["linear", "conv2d"])
def test_local_reparameterization_matches_the_moments_of_weight_sampling(kind):
    torch.manual_seed(1)
    if kind == "linear":
        x = torch.randn(3, 6, dtype=torch.float64)
        shape = (4, 6)
        bias = torch.randn(4, dtype=torch.float64)

        def layer(inputs, weight):
            return F.linear(inputs, weight, bias)

        def exact(theta, variance):
            return F.linear(x, theta, bias), F.linear(x**2, variance)
    else:
        x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
        shape = (3, 2, 3, 3)
        bias = torch.randn(3, dtype=torch.float64)

        def layer(inputs, weight):
            return F.conv2d(inputs, weight, bias, padding=1)

        def exact(theta, variance):
            return F.conv2d(x, theta, bias, padding=1), F.conv2d(x**2, variance, padding=1)

    theta = torch.randn(shape, dtype=torch.float64)
    q = AdditiveNormal(theta, torch.randn(shape, dtype=torch.float64) - 1.0)
    mean, variance = exact(theta, q.variance)
    for estimate in (_moments_by_weight_sampling, _moments_by_local_reparameterization):
        sample_mean, sample_var = estimate(lambda inputs, weight: layer(inputs, weight), x, q)
        # standard errors of a mean and a variance of 4000 Gaussian draws: sqrt(v/n), v sqrt(2/n)
        assert torch.all((sample_mean - mean).abs() <= 5 * (variance / 4000).sqrt() + 1e-9)
        assert torch.all((sample_var - variance).abs() <= 5 * variance * math.sqrt(2 / 4000) + 1e-9)


def test_a_convolution_with_a_masked_weight_sees_neither_its_mean_nor_its_noise():
    theta = torch.ones(1, 1, 2, 2)
    q = AdditiveNormal(theta, torch.zeros(1, 1, 2, 2))
    weight = q.rsample()
    mask = torch.zeros(1, 1, 2, 2)
    with MaskedLocalReparameterization({id(weight): q}, {id(weight): mask}):
        out = F.conv2d(torch.ones(1, 1, 3, 3), weight)
    assert torch.allclose(out, torch.zeros_like(out), atol=1e-3)  # sqrt(1e-8) noise floor only


def _sparse_regression(n=400, d=20, seed=0):
    """y = 2 x1 − 1.5 x2 + x3 + small noise: 3 of 20 inputs matter. The noise (0.05) is well below the
    likelihood's fixed scale (0.5), so no irrelevant input explains the residual by chance (with noise
    at the likelihood's scale about a third of them would, as under ARD)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=generator)
    beta = torch.zeros(d)
    beta[:3] = torch.tensor([2.0, -1.5, 1.0])
    y = x @ beta + 0.05 * torch.randn(n, generator=generator)
    return Dataset(
        name="sparse-linear",
        task="regression",
        x_train=x,
        y_train=y,
        x_test=x[:100],
        y_test=y[:100],
        input_shape=(d,),
        num_classes=None,
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_on_a_sparse_linear_model_only_the_relevant_weights_keep_log_alpha_below_3(seed):
    data = _sparse_regression(seed=seed)
    torch.manual_seed(seed)
    net = nn.Linear(20, 1)
    ctx = FitContext(
        seed=seed,
        epochs=60,
        batch_size=200,
        optim=OptimConfig(lr=0.1),
        task="regression",
        noise_scale=0.5,
        method="sparse-vd",
    )
    options = SparseVDOptions(kl_anneal_start=0, kl_anneal_end=5)
    fitted = get_method("sparse-vd").fit(net, data, options, ctx)
    log_alpha = fitted.log_alpha()["weight"].flatten()
    assert torch.all(log_alpha[:3] < 3), log_alpha
    assert torch.all(log_alpha[3:] > 3), log_alpha
    weights = fitted.network().weight.detach().flatten()
    assert torch.all(weights[3:] == 0)  # the test-time network zeroes them
    assert torch.allclose(weights[:3], torch.tensor([2.0, -1.5, 1.0]), atol=0.05)
    scores = fitted.scores()["weight"]
    assert scores.dtype == torch.float64 and torch.equal(scores, -fitted.log_alpha()["weight"])
    assert fitted.metrics()["fraction_removed_by_threshold"] == pytest.approx(17 / 20)


def test_the_kl_weight_and_the_rate_follow_the_authors_schedules():
    annealing = KLAnnealing(start=5, end=20)
    weights = []
    for epoch in range(25):
        weights.append(annealing.weight)
        annealing.on_epoch(epoch, None)
    assert weights[:6] == [0.0] * 6 and weights[20:] == [1.0] * 5
    assert weights[12] == pytest.approx(7 / 15)
    decay = linear_decay(200, 0.5)  # lr_linear of lenet300-100-ard.py: 1 to epoch 100, then to 0 at 200
    assert [decay(e) for e in (0, 99, 100, 150, 199)] == [1.0, 1.0, 1.0, 0.5, 0.01]
    to_zero = linear_decay(200, 0.0)  # lr_linear_to0 of lenet5-ard.py
    assert [to_zero(e) for e in (0, 100, 199)] == [1.0, 0.5, 0.005]


@pytest.mark.parametrize(
    ("key", "value"),
    [("threshold", 9.0), ("kl_anneal_end", 2), ("lr_decay_start", 1.0), ("train_clip", 1), ("predictive_samples", -1)],
)
def test_an_invalid_option_names_its_field(key, value):
    with pytest.raises(ConfigError, match=f"sparse-vd.{key}"):
        SparseVDOptions(**{key: value})


def test_the_packaged_configs_load():
    for name in ("sparse-vd-digits", "sparse-vd-lenet300", "sparse-vd-lenet5"):
        config = load_config(name)
        assert config.method == "sparse-vd"
        assert config.prune.include_biases is False


def test_a_run_from_the_command_line_writes_scores_posterior_and_report(tmp_path):
    from bayesprune.cli import main
    from bayesprune.pipeline.runner import load_run

    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "sparse-vd-digits",
                "--out",
                str(out),
                "--set",
                "train.epochs=2",
                "--set",
                "baseline.epochs=1",
                "--quiet",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "sparse-vd" and metrics["epochs"] == 2
    assert 0 <= metrics["fraction_removed_by_threshold"] <= 1
    assert metrics["test_error"] < 50
    with np.load(out / "scores.npz") as scores:
        assert set(scores.files) == {"1.weight", "3.weight"} and scores["1.weight"].dtype == np.float64
        shape = scores["3.weight"].shape
    report = (out / "report.md").read_text()
    assert "log α" in report and (out / "log_alpha.png").exists()
    import arviz as az

    idata = az.from_netcdf(str(out / "posterior.nc"))
    assert "3.weight" in idata.posterior and "log_alpha_quantile" in idata.variational
    # one dimension per axis length, shared by the sites (site_dims), not one per axis of every site
    assert idata.posterior["3.weight"].dims == ("chain", "draw", f"dim_0_{shape[0]}", f"dim_1_{shape[1]}")
    assert idata.variational["3.weight.log_alpha"].dims == ("chain", f"dim_0_{shape[0]}", f"dim_1_{shape[1]}")
    config, dataset, fitted = load_run(out)
    x = dataset.x_test[:50]
    assert torch.allclose(fitted.predict(x).cpu().sum(-1), torch.ones(50), atol=1e-5)
    assert fitted.metrics()["fraction_removed_by_threshold"] == pytest.approx(metrics["fraction_removed_by_threshold"])


def test_a_fit_interrupted_after_an_epoch_resumes_to_the_uninterrupted_result(tmp_path):
    """The stage's state (model, guide, optimiser with its linear-decay schedule) and the KL annealing
    are checkpointed: resuming inside the KL warm-up gives the same weights as never stopping."""
    from bayesprune.core.checkpoint import read_checkpoint
    from bayesprune.core.errors import Interrupted
    from bayesprune.core.loop import STOP
    from bayesprune.data import load_dataset
    from bayesprune.models import build_architecture

    data = load_dataset("digits")
    options = SparseVDOptions(kl_anneal_start=1, kl_anneal_end=3)

    def fit(**services):
        torch.manual_seed(0)
        net = build_architecture("mlp", data.input_shape, data.output_dim, hidden=[16])
        ctx = FitContext(seed=3, epochs=4, batch_size=256, optim=OptimConfig(lr=0.01), method="sparse-vd", **services)
        return get_method("sparse-vd").fit(net, data, options, ctx)

    class StopAfterSecondEpoch:
        def on_epoch(self, epoch, history):
            if epoch == 1:
                STOP.signal = 15

    path = tmp_path / "checkpoint.pt"
    try:
        with pytest.raises(Interrupted):
            fit(checkpoint=path, callbacks=(StopAfterSecondEpoch(),))
    finally:
        STOP.signal = None
    saved = read_checkpoint(path)
    assert saved["metadata"]["epoch"] == 2
    resumed, uninterrupted = fit(resume=saved), fit()
    assert torch.equal(resumed.guide.theta, uninterrupted.guide.theta)
    assert torch.equal(resumed.guide.log_sigma2, uninterrupted.guide.log_sigma2)
    assert resumed.history.epoch_losses == pytest.approx(uninterrupted.history.epoch_losses, rel=1e-12)


def test_the_objectives_kl_covers_every_weight_of_every_layer_and_no_bias():
    from bayesprune.methods.sparse_vd import build_model
    from bayesprune.methods.sparse_vd.model import SparseVDELBO, SparseVDGuide

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 6 * 6, 5), nn.ReLU(), nn.Linear(5, 3)
    )
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 1])
    data = Dataset(
        name="tiny",
        task="classification",
        x_train=x,
        y_train=y,
        x_test=x,
        y_test=y,
        input_shape=(1, 8, 8),
        num_classes=3,
    )
    model = build_model(net, data)
    guide = SparseVDGuide(model, init_log_sigma2=-4.0)
    assert list(guide.site_shapes) == ["0.weight", "3.weight", "5.weight"]
    assert set(model.point_shapes) == {"0.bias", "3.bias", "5.bias"}
    _, kl = SparseVDELBO()._particle(model, guide, (x, y), {})
    expected = sum(-neg_kl_approximation(q.log_alpha).sum() for q in guide.posteriors().values())
    assert kl.item() == pytest.approx(expected.item(), rel=1e-6)
    assert guide.theta.numel() == sum(p.numel() for name, p in net.named_parameters() if name.endswith("weight"))


def test_a_schedule_beside_the_linear_decay_is_refused_naming_the_key_before_anything_is_written(tmp_path):
    from bayesprune.pipeline.runner import run

    with pytest.raises(ConfigError, match="^optim.schedule is not supported by method 'sparse-vd'"):
        run(load_config("sparse-vd-digits", ["optim.schedule='cosine'"]), tmp_path / "run")
    with pytest.raises(ConfigError, match="^optim.weight_decay is not supported"):
        run(load_config("sparse-vd-digits", ["optim.weight_decay=0.1"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
