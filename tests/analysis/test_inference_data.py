"""ArviZ conversion of fitted sBNNs, checked against the guides' own parameters and direct predictions."""

import math
import warnings

import arviz as az
import numpy as np
import pyro
import pyro.optim
import pytest
import torch
import torch.nn.functional as F
import xarray as xr

from bayesprune.analysis import inference_data as idm
from bayesprune.analysis.arviz_compat import group, group_names
from bayesprune.analysis.diagnostics import plot_diagnostics, summary_table, write_posterior
from bayesprune.analysis.inference_data import to_inference_data
from bayesprune.core.loop import TensorBatches, fit
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.predict import predict
from bayesprune.data import load_dataset
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.pbp.inference_data import dirac_spike_slab_inference_data
from bayesprune.models import BayesianNetwork, Categorical, Gaussian, mlp
from bayesprune.models.priors import SpikeSlabPrior

DRAWS = 400
PNG = b"\x89PNG\r\n\x1a\n"
GROUPS = {"posterior", "posterior_predictive", "observed_data", "variational", "sample_stats"}


def _fit(dataset, likelihood, *, seed, epochs, hidden, lr):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    net = mlp(dataset.input_shape, dataset.output_dim, hidden=hidden)
    model = BayesianNetwork(net, SpikeSlabPrior(), likelihood)
    guide = SpikeSlabGuide(model)
    batches = TensorBatches(dataset.x_train, dataset.y_train, batch_size=len(dataset.x_train), seed=seed)
    history = fit(model, guide, batches, objective=AnalyticKLELBO(), optim=pyro.optim.Adam({"lr": lr}), epochs=epochs)
    return model, guide, history


def _importance(inclusion):
    """A stand-in for the feature-importance module: first-layer inclusion averaged over hidden units."""
    psi = inclusion["1.weight"].double().mean(0)
    return {"psi": psi, "phi": (psi - psi.min()) / (psi.max() - psi.min() + 1e-12)}


def _q_of(guide):
    """Oracle: m and σ = softplus(ρ) of every site, split from the guide's flat parameters by hand."""
    locs, scales, start = {}, {}, 0
    loc, scale = guide.loc.detach(), F.softplus(guide.rho.detach())
    for name, shape in guide.site_shapes.items():
        size = math.prod(shape)
        locs[name] = loc[start : start + size].reshape(shape).numpy()
        scales[name] = scale[start : start + size].reshape(shape).numpy()
        start += size
    return locs, scales


@torch.no_grad()
def _network_means(model, guide, x, samples):
    """Oracle: predictive means (regression means or class probabilities) under ``samples`` draws W ~ q."""
    return (
        torch.stack([model.likelihood.mean(model.network(guide.sample_params(), x)) for _ in range(samples)])
        .double()
        .numpy()
    )


@pytest.fixture(scope="module")
def regression():
    dataset = load_dataset("linear-regression", n=200)
    fits = [
        _fit(dataset, Gaussian(dataset.num_train), seed=seed, epochs=epochs, hidden=(8,), lr=0.05)
        for seed, epochs in ((0, 30), (1, 25))
    ]
    idata = to_inference_data(
        fits, dataset, num_draws=DRAWS, num_predictive_draws=DRAWS, feature_importance=_importance
    )
    return dataset, fits, idata


def test_groups_and_dims(regression):
    dataset, fits, idata = regression
    assert GROUPS <= set(group_names(idata))
    posterior = idata.posterior
    assert posterior.sizes["chain"] == 2 and posterior.sizes["draw"] == DRAWS
    inputs = dataset.x_train.shape[1]
    assert posterior["1.weight"].dims == ("chain", "draw", "dim_0_8", f"dim_1_{inputs}")  # 8 hidden units
    assert posterior["1.bias"].dims == ("chain", "draw", "dim_0_8")  # the same units, the same dimension
    assert posterior["1.weight.inclusion"].dims == posterior["1.weight"].dims
    assert list(posterior["site"].values) == list(fits[0][0].site_shapes)
    assert posterior["psi"].dims == ("chain", "draw", "feature")
    assert list(posterior["feature"].values) == list(dataset.feature_names)
    assert idata.posterior_predictive["obs"].dims == ("chain", "draw", "test_point")
    assert idata.posterior_predictive["obs"].shape == (2, DRAWS, dataset.num_test)
    assert idata.observed_data["obs"].dims == ("test_point",)


def test_weight_draws_match_q(regression):
    _, fits, idata = regression
    for chain, (_, guide, _) in enumerate(fits):
        locs, scales = _q_of(guide)
        for name in locs:
            draws = idata.posterior[name].sel(chain=chain).values.astype(np.float64)
            z = (draws.mean(0) - locs[name]) / (scales[name] / math.sqrt(DRAWS))
            assert np.abs(z).max() < 5, name
            ratio = draws.std(0, ddof=1) / scales[name]
            assert np.abs(ratio - 1).max() < 5 / math.sqrt(2 * DRAWS), name
            np.testing.assert_allclose(idata.variational[f"{name}.loc"].sel(chain=chain), locs[name], rtol=1e-6)
            np.testing.assert_allclose(idata.variational[f"{name}.scale"].sel(chain=chain), scales[name], rtol=1e-6)


def test_inclusion_draws_match_probabilities(regression):
    _, fits, idata = regression
    for chain, (_, guide, _) in enumerate(fits):
        probs = {name: p.double().numpy() for name, p in guide.inclusion_probabilities().items()}
        for name, p in probs.items():
            draws = idata.posterior[f"{name}.inclusion"].sel(chain=chain).values
            assert set(np.unique(draws)) <= {0, 1}
            bound = 5 * np.sqrt(p * (1 - p) / DRAWS) + 1e-12
            assert (np.abs(draws.mean(0) - p) <= bound).all(), name
            np.testing.assert_allclose(
                idata.variational[f"{name}.inclusion_probability"].sel(chain=chain), p, rtol=1e-6
            )
        flat = np.concatenate([p.ravel() for p in probs.values()])
        posterior = idata.posterior.sel(chain=chain)
        np.testing.assert_allclose(
            posterior["inclusion_probability_mean"].values, [[p.mean() for p in probs.values()]] * DRAWS
        )
        np.testing.assert_allclose(
            posterior["fraction_included"].values, [[(p >= 0.5).mean() for p in probs.values()]] * DRAWS
        )
        np.testing.assert_allclose(posterior["network_fraction_included"].values, (flat >= 0.5).mean())
        quantiles = idata.variational["inclusion_probability_quantile"].sel(chain=chain).values
        np.testing.assert_allclose(quantiles[[0, 50, 100]], [flat.min(), np.median(flat), flat.max()], rtol=1e-6)


def test_feature_importance_is_exact_at_p_and_unbiased_over_inclusion_draws(regression):
    _, fits, idata = regression
    for chain, (_, guide, _) in enumerate(fits):
        p = guide.inclusion_probabilities()["1.weight"].double().numpy()
        exact = _importance({"1.weight": torch.from_numpy(p)})
        for key in ("psi", "phi"):
            np.testing.assert_allclose(idata.variational[key].sel(chain=chain).values, exact[key].numpy())
        # psi(Z) is the mean of independent Bernoulli(p) over hidden units: mean p, variance sum p(1-p) / n^2
        draws = idata.posterior["psi"].sel(chain=chain).values
        variance = (p * (1 - p)).sum(0) / p.shape[0] ** 2
        assert (np.abs(draws.mean(0) - p.mean(0)) <= 5 * np.sqrt(variance / DRAWS) + 1e-12).all()
        np.testing.assert_allclose(draws.var(0, ddof=1), variance, rtol=0.4, atol=1e-4)


def test_posterior_predictive_matches_direct_prediction(regression):
    dataset, fits, idata = regression
    samples = 500
    for chain, (model, guide, _) in enumerate(fits):
        torch.manual_seed(100 + chain)
        direct = predict(model, guide, dataset.x_test, num_samples=samples).double().numpy()
        direct = direct * dataset.target_std + dataset.target_mean
        means = _network_means(model, guide, dataset.x_test, samples) * dataset.target_std
        noise = float(model.likelihood.scale.detach()) * dataset.target_std
        expected_var = means.var(0) + noise**2

        draws = idata.posterior_predictive["obs"].sel(chain=chain).values
        error = np.sqrt(draws.var(0, ddof=1) / DRAWS + means.var(0) / samples)
        assert (np.abs(draws.mean(0) - direct) <= 5 * error).all()
        assert draws.var(0, ddof=1).mean() / expected_var.mean() == pytest.approx(1, abs=0.1)


def test_observed_data_in_original_units(regression):
    dataset, _, idata = regression
    assert dataset.target_std != 1.0
    expected = dataset.y_test.double().numpy() * dataset.target_std + dataset.target_mean
    np.testing.assert_allclose(idata.observed_data["obs"].values, expected)


def test_netcdf_round_trip_and_summary(regression, tmp_path):
    _, fits, idata = regression
    path = write_posterior(idata, tmp_path / "out" / "posterior.nc")
    loaded = az.from_netcdf(str(path))
    assert loaded.posterior.sizes["chain"] == 2
    assert GROUPS <= set(group_names(loaded))
    elbo = loaded.sample_stats["elbo"].values
    np.testing.assert_allclose(elbo[0], fits[0][2].elbo)
    np.testing.assert_allclose(elbo[1, :25], fits[1][2].elbo)
    assert np.isnan(elbo[1, 25:]).all()
    xr.testing.assert_allclose(loaded.posterior_predictive["obs"], idata.posterior_predictive["obs"])

    chain_means = loaded.posterior["1.weight"].mean("draw")
    assert not np.allclose(chain_means.sel(chain=0), chain_means.sel(chain=1), atol=1e-3)
    table = summary_table(loaded, ["1.weight"])
    assert len(table) == 80
    assert np.isfinite(table["r_hat"].to_numpy(dtype=float)).all()
    assert np.isfinite(summary_table(loaded, "psi")["mean"].to_numpy(dtype=float)).all()


def test_plots_are_png(regression, tmp_path):
    _, _, idata = regression
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # matplotlib deprecations inside arviz 0.x
        written = plot_diagnostics(idata, tmp_path / "plots")
    assert set(written) == {"forest_psi", "ppc", "inclusion_cdf"}
    for path in written.values():
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 1000


def test_classification_predictive_is_categorical():
    dataset = load_dataset("digits")
    fits = [
        (*_fit(dataset, Categorical(dataset.num_train), seed=seed, epochs=5, hidden=(16,), lr=0.05), 0.0)
        for seed in (0, 1)
    ]
    draws, points = 200, 30
    idata = to_inference_data(
        fits, dataset, num_draws=draws, num_predictive_draws=draws, max_test_points=points, sites="all"
    )
    obs = idata.posterior_predictive["obs"]
    assert obs.shape == (2, draws, points) and np.issubdtype(obs.dtype, np.integer)
    assert obs.min() >= 0 and obs.max() < dataset.num_classes
    np.testing.assert_array_equal(idata.observed_data["obs"].values, dataset.y_test[:points].numpy())
    samples = 300
    for chain, (model, guide, _, _) in enumerate(fits):
        torch.manual_seed(chain)
        class_probs = _network_means(model, guide, dataset.x_test[:points], samples)
        probs = class_probs.mean(0)
        frequencies = np.stack([(obs.sel(chain=chain).values == k).mean(0) for k in range(dataset.num_classes)], -1)
        error = np.sqrt(probs * (1 - probs) / draws + class_probs.var(0) / samples)
        # + 3 counts: the normal bound is too tight for classes drawn only a few times
        assert (np.abs(frequencies - probs) <= 5 * error + 3 / draws).all()


def _site_dims(idata) -> tuple:
    """The dimensions beside chain and draw of (posterior, variational)."""
    return tuple(set(group(idata, name).sizes) - {"chain", "draw"} for name in ("posterior", "variational"))


def test_sites_of_one_axis_length_share_a_dimension_in_every_writer(tmp_path):
    """One dimension per axis of every site made reading posterior.nc back quadratic in the number of sites
    (h5netcdf looks each variable's dimensions up among all of them): sites whose axes have the same length
    share them. Oracle: the (axis, length) pairs of the sites' shapes, listed by hand; four equal hidden
    layers need no more dimensions than one."""
    from bayesprune.analysis.inference_data import gate_inference_data
    from bayesprune.methods.pbp.distributions import DiracSpikeSlab

    dataset = load_dataset("linear-regression", n=40)
    inputs = dataset.x_train.shape[1]
    net = mlp(dataset.input_shape, dataset.output_dim, hidden=(5, 5, 5, 5))  # weights 5xD, 5x5 (3), 1x5; biases
    model = BayesianNetwork(net, SpikeSlabPrior(), Gaussian(dataset.num_train))
    idata = to_inference_data([(model, SpikeSlabGuide(model), None)], dataset, num_draws=3, num_predictive_draws=1)
    pairs = {"dim_0_5", f"dim_1_{inputs}", "dim_1_5", "dim_0_1"}
    posterior, variational = _site_dims(az.from_netcdf(str(write_posterior(idata, tmp_path / "posterior.nc"))))
    assert posterior == pairs | {"site"}
    assert variational == pairs | {"quantile"}

    theta = {"a.gate": torch.full((2, 3), 0.5), "b.gate": torch.full((2, 3), 0.5), "c.weight": torch.rand(2, 3, 3)}
    gates = gate_inference_data([{site: value[0] for site, value in theta.items()}], num_draws=2)
    assert _site_dims(gates) == ({"unit_3", "dim_0_3", "dim_1_3"},) * 2

    shapes = {"1.weight": (4, 6), "1.bias": (4,), "3.weight": (4, 4), "3.bias": (4,)}
    spike_slab = {
        site: DiracSpikeSlab(torch.full(shape, 0.5), torch.zeros(shape), torch.ones(shape))
        for site, shape in shapes.items()
    }
    pbp = dirac_spike_slab_inference_data([spike_slab], [spike_slab], num_draws=2)
    assert _site_dims(pbp) == ({"dim_0_4", "dim_1_6", "dim_1_4"},) * 2


def test_default_site_selection():
    small = {"1.weight": (8, 10), "1.bias": (8,), "3.weight": (1, 8), "3.bias": (1,)}
    assert idm._select_sites(small, None) == list(small)
    wide = {"1.weight": (100, 10), "1.bias": (100,), "3.weight": (300, 100), "3.bias": (300,)}
    assert idm._select_sites(wide, None) == ["1.weight", "1.bias"]
    huge = {"1.weight": (300, 784), "1.bias": (300,), "3.weight": (10, 300), "3.bias": (10,)}
    assert idm._select_sites(huge, None) == []
    assert idm._select_sites(huge, "all") == list(huge)
    assert idm._select_sites(huge, ["3.bias"]) == ["3.bias"]
    with pytest.raises(ValueError, match="unknown sites"):
        idm._select_sites(huge, ["fc9.weight"])
    with pytest.raises(ValueError, match="list of site names"):
        idm._select_sites(huge, "3.bias")


def test_datatree_container_without_inference_data(regression, tmp_path, monkeypatch):
    """ArviZ >= 1 has no InferenceData: the same groups then come back as an xarray DataTree."""
    dataset, fits, _ = regression
    monkeypatch.delattr(az, "InferenceData", raising=False)
    tree = to_inference_data(fits, dataset, num_draws=20, num_predictive_draws=10)
    assert isinstance(tree, xr.DataTree)
    assert GROUPS <= set(tree.children)
    path = write_posterior(tree, tmp_path / "tree.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ 0.x cannot plot a DataTree: the plain fallbacks draw it
        written = plot_diagnostics(tree, tmp_path / "plots")
    assert all(p.read_bytes().startswith(PNG) for p in written.values())
    monkeypatch.undo()
    with xr.open_datatree(path) as loaded:
        xr.testing.assert_allclose(loaded["posterior"]["1.weight"], tree["posterior"]["1.weight"])
        np.testing.assert_allclose(loaded["sample_stats"]["elbo"].values[0], fits[0][2].elbo)
    assert np.isfinite(summary_table(tree, ["1.bias"])["r_hat"].to_numpy(dtype=float)).all()


def test_the_posterior_predictive_leaves_batch_norm_statistics_as_they_are():
    """The predictive draws evaluate the network as predict does (batch norm on its running statistics),
    so the fit written after them is the one that was evaluated."""
    dataset = load_dataset("digits")
    pyro.clear_param_store()
    net = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 10)
    )
    model = BayesianNetwork(net, SpikeSlabPrior(), Categorical(dataset.num_train))
    guide = SpikeSlabGuide(model)
    batches = TensorBatches(dataset.x_train, dataset.y_train, batch_size=256, seed=0)
    history = fit(model, guide, batches, objective=AnalyticKLELBO(), optim=pyro.optim.Adam({"lr": 0.01}), epochs=1)
    statistics = {name: buffer.clone() for name, buffer in net.named_buffers()}
    expected = predict(model, guide, dataset.x_test[:50])
    to_inference_data(
        [(model, guide, history, 0.0)], dataset, num_draws=20, num_predictive_draws=20, max_test_points=50
    )
    for name, buffer in net.named_buffers():
        assert torch.equal(buffer, statistics[name]), name
    assert net.training and torch.equal(predict(model, guide, dataset.x_test[:50]), expected)
