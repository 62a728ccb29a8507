"""What a run does around its training costs what it must and no more (issue 40, item 2): the pruning curve
ranks the scores once and recalibrates each masked network once, a draw of the sBNN's weights computes no
KL, and the ArviZ conversion holds one draw of a large network at a time. ``benchmarks/run_cost.py``
measures the seconds of each phase on a resnet18."""

import math
import weakref

import numpy as np
import pytest
import torch
from torch import nn

import bayesprune as bp
import bayesprune.core.distributions as distributions
from bayesprune.core.normalization import Calibration
from bayesprune.core.pruning import Budget, apply_masks, prune_each
from bayesprune.data import Dataset
from bayesprune.methods.sparse_vd.inference_data import to_inference_data as sparse_vd_inference_data
from bayesprune.pipeline.evaluation import pruning_curve


def _data(n=64, features=6, classes=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long() * (classes - 2)


def test_the_masks_of_every_budget_come_from_one_ranking_and_remove_the_lowest_scores(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    scores = {"a": torch.randn(30, 20, generator=generator), "b": torch.randn(50, generator=generator)}
    flat = torch.cat([value.flatten() for value in scores.values()])
    fractions = [0.0, 0.1, 0.5, 0.9]
    sorts = []
    argsort = torch.argsort
    monkeypatch.setattr(torch, "argsort", lambda *args, **kwargs: sorts.append(1) or argsort(*args, **kwargs))
    masks = list(prune_each(scores, [Budget(sparsity=fraction) for fraction in fractions]))
    assert len(sorts) == 1
    for fraction, mask in zip(fractions, masks):
        removed = math.floor(fraction * flat.numel())
        threshold = flat.sort().values[removed - 1] if removed else -math.inf  # distinct scores: no ties
        kept = torch.cat([mask[name].flatten() for name in scores])
        assert torch.equal(kept, flat > threshold)


def test_the_curve_estimates_each_masked_networks_statistics_once_for_its_point_and_mc_predictions(monkeypatch):
    """A network with batch norms: each sparsity that removes weights recalibrates once, shared by the
    point estimate and the Monte-Carlo predictive, which equal :meth:`predict`'s one at a time."""
    x, y = _data()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    fitted = bp.fit_method(
        "sbnn", net, (x, y), options={"predictive_samples": 3}, epochs=1, batch_size=32, device="cpu"
    )
    dataset = Dataset("toy", "classification", x, y, x, y, (6,), 3)
    recalibrations = []
    apply = Calibration.apply
    monkeypatch.setattr(Calibration, "apply", lambda self, net: recalibrations.append(1) or apply(self, net))
    torch.manual_seed(1)
    curve = pruning_curve(fitted, dataset, sparsities=[0.0, 0.5, 0.9])
    assert len(recalibrations) == 2  # sparsity 0 removes nothing: the fit's own statistics
    torch.manual_seed(1)
    for row, target in zip(curve, [0.0, 0.5, 0.9]):
        masks = bp.prune(fitted.scores(), Budget(sparsity=target)) if target else None
        for key, samples in (("test_error", 0), ("test_error_mc", 3)):
            prediction = fitted.predict(x, masks=masks, num_samples=samples)
            assert row[key] == pytest.approx(100 * (prediction.argmax(-1) != y).float().mean().item())


def test_a_draw_of_the_sbnn_weights_is_the_posteriors_draw_without_its_kl(monkeypatch):
    x, y = _data()
    fitted = bp.fit_method(
        "sbnn", nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (x, y), epochs=1, device="cpu"
    )
    guide = fitted.guide
    torch.manual_seed(5)
    expected = {name: q.rsample().detach() for name, q in guide.posteriors().items()}  # the fused draw
    monkeypatch.setattr(distributions, "_spike_slab_kl_terms", None)  # any KL evaluation fails
    torch.manual_seed(5)
    drawn = guide.sample_params()
    assert drawn.keys() == expected.keys() and all(torch.equal(drawn[name], expected[name]) for name in drawn)


def test_sparse_vd_posterior_draws_hold_one_draw_of_a_large_network_at_a_time():
    """50 draws of a network's every weight were held at once (26 GB for vgg11); the stored draws of the
    small sites still follow q. (The draw in use and the next being made: two at most.)"""
    x, y = _data(n=32, features=200)
    net = nn.Sequential(nn.Linear(200, 150), nn.ReLU(), nn.Linear(150, 3))  # 30,000 weights: not stored
    fitted = bp.fit_method(
        "sparse-vd", net, (x, y), options={"kl_anneal_start": 0, "kl_anneal_end": 0}, epochs=1, device="cpu"
    )
    alive, most = set(), [0]
    params = fitted.params

    def tracked(*, sample=False):
        draw = params(sample=sample)
        key = id(draw["0.weight"])
        alive.add(key)
        most[0] = max(most[0], len(alive))
        weakref.finalize(draw["0.weight"], alive.discard, key)
        return draw

    fitted.params = tracked
    draws = 400
    idata = sparse_vd_inference_data(
        [fitted], Dataset("toy", "classification", x, y, x, y, (200,), 3), num_draws=draws, num_predictive_draws=5
    )
    assert most[0] <= 2 and "0.weight" not in idata.posterior and idata.posterior_predictive.sizes["draw"] == 5
    theta = fitted.guide._split(fitted.guide.theta.detach())["2.weight"].numpy()
    sigma = fitted.guide._split(fitted.guide.log_sigma2.detach())["2.weight"].mul(0.5).exp().numpy()
    kept = fitted.guide.keep_masks(fitted.threshold)["2.weight"].numpy()
    values = idata.posterior["2.weight"].sel(chain=0).values.astype(np.float64)
    z = (values.mean(0) - theta) / (sigma / math.sqrt(draws))
    assert np.abs(z[kept]).max() < 5 and (values[:, ~kept] == 0).all()


def test_the_mc_predictive_computes_sigma_once_and_averages_the_draws_of_sample_params(monkeypatch):
    """σ = softplus(ρ) cost a resnet18's draw as much as its forward pass: the S draws of one
    Monte-Carlo predictive compute it once, and are still S ``sample_params()`` draws in a row."""
    import bayesprune.guides.spike_slab as spike_slab
    from bayesprune.core.predict import predict

    x, y = _data()
    fitted = bp.fit_method(
        "sbnn", nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)), (x, y), epochs=1, device="cpu"
    )
    model, guide = fitted.model, fitted.guide
    masks = bp.prune(fitted.scores(), Budget(sparsity=0.5))
    torch.manual_seed(3)
    expected = 0.0
    for _ in range(4):
        params = apply_masks(guide.sample_params(), masks)
        expected = expected + model.likelihood.mean(model.network(params, x)).detach()
    calls = []
    softplus = spike_slab.softplus
    monkeypatch.setattr(spike_slab, "softplus", lambda rho: calls.append(1) or softplus(rho))
    torch.manual_seed(3)
    prediction = predict(model, guide, x, num_samples=4, masks=masks)
    assert len(calls) == 1
    assert torch.allclose(prediction, expected / 4, rtol=1e-6, atol=1e-7)


def test_the_posterior_predictive_draws_y_from_the_curves_draws_of_the_unpruned_model(monkeypatch):
    """posterior.nc's posterior predictive and the curve's Monte-Carlo predictive of the unpruned model were
    two sets of S forward passes (a resnet18's ArviZ conversion: 8 CPU s of its 9): the curve keeps its draws'
    outputs, which are those of S ``sample_params()`` draws, and the conversion draws y from them without
    evaluating the network again, leaving every number of the curve as it was."""
    from bayesprune.core.predict import DrawOutputs
    from bayesprune.methods import FitContext, get_method

    x, y = _data(n=48)
    draws_count = 100  # the conversion's posterior draws, which bound its predictive draws
    fitted = bp.fit_method(
        "sbnn",
        nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)),
        (x, y),
        options={"predictive_samples": draws_count},
        epochs=1,
        device="cpu",
    )
    dataset = Dataset("toy", "classification", x, y, x, y, (6,), 3)
    torch.manual_seed(1)
    plain = pruning_curve(fitted, dataset, sparsities=[0.0, 0.5])
    kept = DrawOutputs(rows=1000)
    torch.manual_seed(1)
    assert pruning_curve(fitted, dataset, sparsities=[0.0, 0.5], unpruned_draws=kept) == plain
    model, guide = fitted.model, fitted.guide
    torch.manual_seed(1)
    with torch.no_grad():
        expected = torch.stack([model.network(guide.sample_params(), x) for _ in range(draws_count)])
    outputs = kept.outputs()
    assert outputs.shape == (draws_count, 48, 3) and torch.allclose(outputs, expected, rtol=1e-6, atol=1e-7)

    fitted = type(fitted)(model, guide, predictive_samples=draws_count, ctx=FitContext(unpruned_draws=kept))
    monkeypatch.setattr(type(model), "network", lambda *args: pytest.fail("the network was evaluated again"))
    idata = get_method("sbnn").inference_data([fitted], dataset, seed=3)
    labels = idata.posterior_predictive["obs"].sel(chain=0).values  # draws x test points
    assert labels.shape == (draws_count, 48)
    probs = torch.softmax(expected.double(), -1)
    mean = probs.mean(0).numpy()
    frequencies = np.stack([(labels == k).mean(0) for k in range(3)], -1)
    assert (np.abs(frequencies - mean) <= 5 * np.sqrt(mean * (1 - mean) / draws_count) + 3 / draws_count).all()


def test_draw_outputs_join_each_draws_batches_up_to_its_rows():
    from bayesprune.core.predict import DrawOutputs

    kept = DrawOutputs(rows=5)
    first, second = torch.arange(6.0).view(3, 2), torch.arange(6.0, 12.0).view(3, 2)
    for batch in (first, second):  # a test split predicted in batches: each from the same draws
        kept.add(0, [batch[:2], batch[2:]])
        kept.add(1, [-batch])
    assert torch.equal(kept.outputs(), torch.stack([torch.cat([first, second[:2]]), -torch.cat([first, second[:2]])]))
