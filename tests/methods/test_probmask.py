"""ProbMask (paper 002): schedules, the relaxed two-Gumbel mask, the budget after every step, end to end on digits."""

import math

import pytest
import torch

from bayesprune.core.gates import StochasticMasks
from bayesprune.core.loop import TensorBatches, train
from bayesprune.core.tasks import mean_loss
from bayesprune.methods.probmask import ProbMaskOptions, ProbMaskTraining
from bayesprune.methods.probmask.schedules import annealed_temperature, cubic_keep_ratio
from bayesprune.models import mlp, new_net
from bayesprune.pipeline.config import RunConfig
from bayesprune.pipeline.runner import load_run, run


def test_cubic_keep_ratio_is_eq_7():
    assert [cubic_keep_ratio(t, start=2, end=6, final=0.1) for t in (0, 2)] == [1.0, 1.0]
    assert cubic_keep_ratio(4, start=2, end=6, final=0.1) == pytest.approx(0.1 + 0.9 * 0.5**3)
    assert [cubic_keep_ratio(t, start=2, end=6, final=0.1) for t in (6, 9)] == [0.1, 0.1]
    ratios = [cubic_keep_ratio(t, start=2, end=6, final=0.1) for t in range(10)]
    assert ratios == sorted(ratios, reverse=True)


def test_temperature_falls_linearly_to_0_03():
    assert annealed_temperature(0, 50) == pytest.approx(1.0)
    assert annealed_temperature(50, 50) == pytest.approx(0.03)
    assert annealed_temperature(25, 50) == pytest.approx(0.515)


def test_the_relaxed_two_gumbel_mask_is_one_with_probability_s():
    """σ((log s − log(1 − s) + g₁ − g₀)/τ) at the final τ = 0.03 is (close to) Bernoulli(s) (appendix A.3)."""
    torch.manual_seed(0)
    s = torch.tensor([0.02, 0.25, 0.5, 0.9])
    masks = StochasticMasks(
        {"w": s.expand(50_000, 4).clone()}, parameterization="clamp", temperature=annealed_temperature(10, 10)
    )
    draws = masks.relaxed()["w"].detach()
    assert torch.all((draws.mean(0) - s).abs() < 0.01)
    assert float(((draws < 0.01) | (draws > 0.99)).float().mean()) > 0.95


def test_the_relaxed_mask_at_s_equal_1_has_the_analytic_gradient_of_the_authors_logit():
    """m = σ((log(s + ε) − log(1 − s + ε) + log((1 − u)/u))/τ), ε = 1e-20 (eqs. 4-5 as the authors'
    code writes them): at s = 1, ∂m/∂s = σ(z)σ(−z)/τ · (1/(1 + ε) + 1/ε), some ε^(1/τ − 1)·e^(−L/τ)/τ,
    not 0 (logit(s, eps=1e-6) clamps s to 1 − 1e-6 there: no gradient; and σ(z) rounds to 1 in float32,
    so σ'(z) must be taken as σ(z)σ(−z)). Oracle in float64 from the same uniforms."""
    tau, eps, n = annealed_temperature(1, 40), 1e-20, 2000
    masks = StochasticMasks({"w": torch.ones(n)}, parameterization="clamp", temperature=tau)
    torch.manual_seed(3)
    masks.relaxed()["w"].sum().backward()
    torch.manual_seed(3)
    u = torch.rand(n).clamp(1e-7, 1 - 1e-7).double()
    z = (math.log1p(eps) - math.log(eps) + torch.log1p(-u) - torch.log(u)) / tau
    expected = torch.sigmoid(z) * torch.sigmoid(-z) / tau * (1 / (1 + eps) + 1 / eps)
    assert bool((masks.raw.grad > 0).all())
    torch.testing.assert_close(masks.raw.grad.double(), expected, rtol=1e-4, atol=0)


def test_s_leaves_1_before_the_budget_binds():
    """Before t1 the budget K = n does not bind: the loss alone moves s off 1 (Adam, one step)."""
    torch.manual_seed(1)
    net = mlp((8,), 3, hidden=[16])
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    config = RunConfig.from_dict({"method": "probmask", "optim": {"name": "sgd", "lr": 0.05}})
    training = ProbMaskTraining(
        net, ProbMaskOptions(sparsity=0.8, t1=5, t2=10), config.optim, epochs=20, loss=mean_loss("classification")
    )
    training.step(x, y, 0, 1)
    assert training.keep == 1 and float((training.masks.raw < 1).float().mean()) > 0.1


def test_the_global_budget_shifts_every_layer_by_one_threshold():
    """Theorem 1 projects all of s at once: s ← clamp(s − v, 0, 1) with one v for every layer. Layer 1 at
    s = 1 (n₁ entries) and layer 2 at s = 0.5 (n₂) under k = 0.5 give v = n₁/(2(n₁ + n₂)); a budget per
    layer would leave layer 2 alone and put layer 1 at 0.5."""
    torch.manual_seed(0)
    net = mlp((8,), 3, hidden=[16])
    config = RunConfig.from_dict({"method": "probmask", "optim": {"name": "sgd", "lr": 0.05}})
    training = ProbMaskTraining(
        net, ProbMaskOptions(sparsity=0.5, t1=0, t2=2), config.optim, epochs=3, loss=mean_loss("classification")
    )
    n1, n2 = (shape.numel() for shape in training.masks.shapes.values())
    with torch.no_grad():
        training.masks.raw.copy_(torch.cat([torch.ones(n1), torch.full((n2,), 0.5)]))
    training.keep = 0.5
    training.project()
    v = n1 / (2 * (n1 + n2))
    layer1, layer2 = training.masks.probabilities().values()
    torch.testing.assert_close(layer1, torch.full_like(layer1, 1 - v))
    torch.testing.assert_close(layer2, torch.full_like(layer2, 0.5 - v))


def test_every_step_ends_inside_the_budget():
    torch.manual_seed(1)
    net = mlp((8,), 3, hidden=[16])
    x, y = torch.randn(256, 8), torch.randint(0, 3, (256,))
    options = ProbMaskOptions(sparsity=0.8, t1=0, t2=2)
    config = RunConfig.from_dict({"method": "probmask", "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9}})
    training = ProbMaskTraining(net, options, config.optim, epochs=3, loss=mean_loss("classification"))
    budgets = []

    class Check:
        def on_step(self, epoch, index, loss):
            s = training.masks.raw.detach()
            budgets.append((float(s.sum()), training.keep * s.numel(), float(s.min()), float(s.max())))

    train(training.step, TensorBatches(x, y, batch_size=64), epochs=3, callbacks=[Check(), training])
    for total, budget, low, high in budgets:
        assert total <= budget + 1e-3 and 0 <= low and high <= 1
    assert budgets[-1][1] == pytest.approx(0.2 * training.masks.raw.numel())


SMALL = {
    "data": {"dataset": "digits", "batch_size": 64},
    "model": {"architecture": "mlp", "hidden": [64]},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "train": {"epochs": 12},
    "baseline": {"enabled": False},
    "prune": {"sparsities": [0.0], "include_biases": False},
}


def probmask(**options) -> RunConfig:
    return RunConfig.from_dict(
        {
            "method": "probmask",
            **SMALL,
            "probmask": {"sparsity": 0.9, "t1": 2, "t2": 8, "finetune_epochs": 2, "baseline": False, **options},
        }
    )


@pytest.fixture(scope="module")
def global_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("probmask") / "run"
    return out, run(probmask(), out)


def test_probmask_reaches_its_sparsity_keeps_every_layer_and_its_zeros(global_run):
    out, metrics = global_run
    assert metrics["sparsity"] == pytest.approx(0.9, abs=0.01)
    assert all(ratio > 0 for ratio in metrics["remaining_ratio_per_layer"].values())
    _, _, fitted = load_run(out)
    weights = [p for name, p in fitted.net.named_parameters() if name.endswith("weight")]
    zeros = sum(int((p == 0).sum()) for p in weights)
    assert zeros / sum(p.numel() for p in weights) == pytest.approx(metrics["sparsity"], abs=1e-6)
    assert 0 <= metrics["share_s_near_binary"] <= 1 and sum(metrics["s_histogram"]) == sum(p.numel() for p in weights)


def test_layer_budgets_prune_every_layer_alike(tmp_path):
    metrics = run(probmask(scope="layer"), tmp_path / "run")
    for ratio in metrics["remaining_ratio_per_layer"].values():
        assert ratio == pytest.approx(0.1, abs=0.03)


def test_a_supermask_keeps_the_random_weights(tmp_path):
    cfg = probmask(supermask=True)
    run(cfg, tmp_path / "run")
    _, dataset, fitted = load_run(tmp_path / "run")
    initial = dict(new_net(cfg, dataset.input_shape, dataset.output_dim, seed=cfg.seed).named_parameters())
    for name, param in fitted.net.named_parameters():
        kept = param != 0
        torch.testing.assert_close(param[kept], initial[name].detach()[kept])
