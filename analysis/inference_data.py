"""Fitted guide posteriors (the sBNN's, Sparse VD's, unit gates') as ArviZ data: draws, posterior predictive, ELBO traces.

Chains are independent fits (restarts with different seeds) of the same model, one
``(model, guide, history)`` per chain, so between-chain diagnostics (R-hat, ESS) compare restarts:
they say whether restarts agree relative to the spread of q within one fit.

Groups of the object :func:`to_inference_data` returns (``C`` chains, ``S`` draws per chain):

``posterior``
    - ``<site>`` (e.g. ``1.weight``): draws W ~ q(W), dims ``(chain, draw, dim_0_<n0>, dim_1_<n1>, ...)``
      (:func:`site_dims`), for the selected sites only (see ``sites``), float32.
    - ``<site>.inclusion``: draws Z ~ Bernoulli(p) of the inclusion indicators of the same sites,
      int8. Their R-hat compares the restarts' inclusion probabilities relative to the Bernoulli spread.
    - ``inclusion_probability_mean`` (dim ``site``, every site): mean of p over the site's weights.
    - ``fraction_included`` (dim ``site``) and ``network_fraction_included`` (scalar): fraction of the
      weights with p ≥ 0.5 in each site and in the whole network.
    - ``psi``, ``phi`` (dim ``feature``), node importances (the sBNN's ``node_importance.<layer>``, dim
      ``node_<n>`` for a layer of n nodes), or whatever the ``feature_importance`` callable returns,
      evaluated at a draw Z ~ q(Z) of the inclusion indicators of *every* weight. ψ of eq. 3.18 is
      a mean over paths of products of inclusion probabilities of distinct, independent weights, so
      ψ(Z) is an unbiased draw of ψ(p): its chain mean estimates eq. 3.18 and its within-chain
      spread is the posterior uncertainty of the importance, which makes R-hat and ESS of ψ across
      restarts meaningful. (φ(Z), the min-max scaling of ψ(Z), is not unbiased for φ(p).)

    ``inclusion_probability_mean``, ``fraction_included`` and ``network_fraction_included`` are
    functions of q, not random draws: their value is one number per chain, repeated over the draws.
    Their within-chain variance is zero, so ``sd`` of the pooled draws is the spread between
    restarts, R-hat is infinite when the restarts differ (NaN when they agree) and ESS is not
    meaningful. Read them per chain (``.sel(chain=c)``) or by their ``sd``.
``posterior_predictive``
    ``obs``, dims ``(chain, draw, test_point)``: one draw y ~ p(y | x, W) per test input for the first
    ``num_predictive_draws`` weight draws of each chain (regression in the targets' original units,
    classification as class labels). A chain given ``predictive_outputs`` (the pruning curve's draws of
    the unpruned model) draws y from those draws' outputs, and its ``posterior`` draws are others.
``observed_data``
    ``obs``, dim ``test_point``: the test targets, in original units for regression.
``variational``
    The variational parameters of the selected sites, one value per chain, no draw dimension:
    ``<site>.loc`` (m), ``<site>.scale`` (σ), ``<site>.inclusion_probability`` (p), dims
    ``(chain, dim_0_<n0>, ...)``; and ``inclusion_probability_quantile``, dims
    ``(chain, quantile)``: 101 quantiles of p over *all* weights of the network, enough to draw each
    chain's CDF of inclusion probabilities without storing every weight; and the ``feature_importance``
    values at p itself (``psi``, ``phi``: eqs. 3.18–3.19 exactly), dims ``(chain, feature)``.
``sample_stats``
    ``elbo``, dims ``(chain, epoch)``: the ELBO trace of each fit (NaN-padded when fits stopped at
    different epochs). A variational fit's statistics are per epoch, not per draw, so this group is
    indexed by ``epoch`` where an MCMC run's would be indexed by ``draw``.

The object is an ``arviz.InferenceData`` under ArviZ 0.x and an ``xarray.DataTree`` under ArviZ ≥ 1
(which replaced ``InferenceData``); both write with ``.to_netcdf`` and load with ``arviz.from_netcdf``.
"""

from __future__ import annotations

import datetime
import math

import numpy as np
import torch

from bayesprune.analysis.arviz_compat import inference_data_from_groups
from bayesprune.core.predict import evaluating

#: Default ``sites=None`` stores every site's weights when the network has at most this many weights,
#: else only the first layer's sites if they fit, else no per-weight draws.
MAX_DEFAULT_WEIGHTS = 20_000


#: Test points in a method's posterior predictive (``max_test_points``: it stores one draw per point per draw).
PREDICTIVE_TEST_POINTS = 1000


_QUANTILES = np.linspace(0.0, 1.0, 101)


def to_inference_data(
    fits,
    dataset,
    *,
    num_draws: int = 100,
    sites=None,
    feature_importance=None,
    seed: int = 0,
    num_predictive_draws: int = 50,
    max_test_points: int | None = None,
    batch_size: int = 4096,
    predictive_outputs=None,
):
    """Convert independent fits (one per chain) to ArviZ data; the groups are listed in the module doc.

    Args:
        fits: a list of ``(model, guide, history)`` (longer tuples such as the output of
            :func:`bayesprune.pipeline.runner.fit_posterior` are accepted; the rest is ignored), one per chain.
            Each guide provides ``posteriors()`` (a :class:`~bayesprune.guides.SpikeSlabGuide`).
            ``history`` may be ``None`` (its ELBO trace is then all NaN).
        dataset: the :class:`bayesprune.data.Dataset` the fits were trained on; its test split gives
            the posterior predictive and observed data.
        num_draws: draws per chain in the posterior group.
        sites: names of the sites whose weights (and inclusion indicators and variational parameters)
            are stored; ``"all"`` for every site; ``None`` for the default rule of
            :data:`MAX_DEFAULT_WEIGHTS` (every site of small networks, the first layer of larger
            ones, which is the layer feature importance reads).
        feature_importance: optional callable ``inclusion -> {"psi": tensor, "phi": tensor, ...}``
            taking ``{site: inclusion probabilities or indicators}`` of every site; each returned
            tensor (one value per input feature) is stored with dim ``feature``, labelled by
            ``dataset.feature_names`` when their number matches: per draw of Z in ``posterior``,
            at p in ``variational``. A ``(dim, tensor)`` pair is stored with its own dim instead
            (node importances of a hidden layer, say).
        seed: seed of all draws; the global RNG state is restored afterwards.
        num_predictive_draws: posterior predictive draws per chain (at most ``num_draws``); draw d
            of the posterior predictive uses the weights of posterior draw d (not so for ``predictive_outputs``).
        max_test_points: keep only the first test points (``None``: all).
        batch_size: test inputs per forward pass.
        predictive_outputs: one entry per chain, ``None`` or the network's outputs under draws W ~ q that
            were evaluated already (draws × test points × outputs: the pruning curve's Monte-Carlo predictive
            of the unpruned model, :class:`~bayesprune.core.predict.DrawOutputs`). A chain whose entry covers
            ``num_predictive_draws`` draws and the test points draws its posterior predictive from them, one
            y per output, instead of drawing and evaluating the network again; its ``posterior`` draws of
            the selected sites are then independent of those.
    """
    import xarray as xr  # here, not with the module: a second of the start of every process that imports it

    fits = [tuple(fit)[:3] for fit in fits]
    if not fits:
        raise ValueError("fits is empty: need at least one (model, guide, history)")
    if num_draws < 1:
        raise ValueError(f"num_draws must be positive, got {num_draws}")
    num_predictive_draws = max(0, min(int(num_predictive_draws), int(num_draws)))
    first_model = fits[0][0]
    site_shapes = {name: tuple(shape) for name, shape in first_model.site_shapes.items()}
    selected = _select_sites(site_shapes, sites)
    x_test, y_test = dataset.x_test, dataset.y_test
    if max_test_points is not None:
        x_test, y_test = x_test[:max_test_points], y_test[:max_test_points]
    regression = dataset.task == "regression"

    chains = _draw_chains(
        fits,
        selected,
        x_test,
        num_draws,
        num_predictive_draws,
        dataset,
        batch_size,
        feature_importance,
        predictive_outputs,
        seed,
    )
    posterior, variational, coords = _posterior_and_variational(
        chains, site_shapes, selected, num_draws, dataset, feature_importance
    )
    test_coords = {"test_point": np.arange(len(y_test))}
    y_observed = _original_units(y_test.detach().cpu(), dataset) if regression else y_test.detach().cpu()
    predictive = np.stack([c["predictive"] for c in chains])

    elbo = _elbo_traces([history for _, _, history in fits])
    attrs = _attrs(fits, num_draws)
    groups = {
        "posterior": xr.Dataset(posterior, coords=_used(coords, posterior), attrs=attrs),
        "posterior_predictive": xr.Dataset(
            {"obs": (["chain", "draw", "test_point"], predictive)},
            coords={"chain": coords["chain"], "draw": np.arange(num_predictive_draws), **test_coords},
            attrs=attrs,
        ),
        "observed_data": xr.Dataset({"obs": (["test_point"], y_observed.numpy())}, coords=test_coords, attrs=attrs),
        "variational": xr.Dataset(
            variational,
            coords={**_used(coords, variational), "quantile": _QUANTILES},
            attrs={**attrs, "description": "variational parameters m, sigma, p of each chain's q"},
        ),
        "sample_stats": xr.Dataset(
            {"elbo": (["chain", "epoch"], elbo)},
            coords={"chain": coords["chain"], "epoch": np.arange(1, elbo.shape[1] + 1)},
            attrs={**attrs, "description": "ELBO per epoch of each chain's fit (NaN after a fit stopped)"},
        ),
    }
    return inference_data_from_groups(groups)


def _draw_chains(
    fits, selected, x_test, num_draws, num_predictive_draws, dataset, batch_size, feature_importance, outputs, seed
) -> list:
    """:func:`_chain` of every fit, all drawn under ``seed`` with the global RNG state restored afterwards."""
    regression = dataset.task == "regression"
    chains = []
    device = _device(fits[0][0])
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)
        for (model, guide, _), given in zip(fits, outputs or [None] * len(fits)):
            covers = given is not None and len(given) >= num_predictive_draws and given.shape[1] >= len(x_test)
            chains.append(
                _chain(
                    model,
                    guide,
                    selected,
                    x_test,
                    num_draws,
                    num_predictive_draws,
                    regression,
                    dataset,
                    batch_size,
                    feature_importance,
                    given[:num_predictive_draws, : len(x_test)] if covers else None,
                )
            )
    return chains


def _posterior_and_variational(chains, site_shapes, selected, num_draws, dataset, feature_importance) -> tuple:
    """The ``posterior`` and ``variational`` variables of :func:`to_inference_data`, and their coordinates."""
    coords = {"chain": np.arange(len(chains)), "draw": np.arange(num_draws)}
    posterior = {}
    variational = {}
    for name in selected:
        dims = site_dims(site_shapes[name])
        coords.update({dim: np.arange(size) for dim, size in zip(dims, site_shapes[name])})
        posterior[name] = (["chain", "draw", *dims], np.stack([c["weights"][name] for c in chains]))
        posterior[f"{name}.inclusion"] = (["chain", "draw", *dims], np.stack([c["inclusion"][name] for c in chains]))
        for key in ("loc", "scale", "inclusion_probability"):
            variational[f"{name}.{key}"] = (["chain", *dims], np.stack([c[key][name] for c in chains]))

    def repeated(key):
        return np.repeat(np.stack([c[key] for c in chains])[:, None], num_draws, axis=1)

    posterior["inclusion_probability_mean"] = (["chain", "draw", "site"], repeated("site_mean"))
    posterior["fraction_included"] = (["chain", "draw", "site"], repeated("site_fraction"))
    posterior["network_fraction_included"] = (["chain", "draw"], repeated("network_fraction"))
    coords["site"] = np.array(list(site_shapes), dtype=object)
    if feature_importance is not None:
        num_features = 0
        for key, (dim, values) in chains[0]["importance_at_p"].items():
            posterior[key] = (["chain", "draw", dim], np.stack([c["importance"][key] for c in chains]))
            variational[key] = (["chain", dim], np.stack([c["importance_at_p"][key][1] for c in chains]))
            if dim == "feature":
                num_features = len(values)
            else:
                coords[dim] = np.arange(len(values))
        names = dataset.feature_names
        coords["feature"] = (
            np.array(names, dtype=object)
            if names is not None and len(names) == num_features
            else np.arange(num_features)
        )
    variational["inclusion_probability_quantile"] = (["chain", "quantile"], np.stack([c["quantiles"] for c in chains]))
    return posterior, variational, coords


def gate_inference_data(chains: list, *, num_draws: int = 200, seed: int = 0, name: str = "theta"):
    """ArviZ data of Bernoulli posteriors q(ξ) = Bernoulli(θ) of unit gates or weight masks, one
    ``{site: θ}`` per chain.

    ``posterior`` holds draws ξ ~ q of every site (int8; dims ``(chain, draw, unit_<n>)`` for a gate
    vector ``<layer>.gate`` of n units, ``(chain, draw, dim_0_<n0>, ...)`` (:func:`site_dims`) for a weight mask);
    ``variational`` holds θ itself as ``<site>.<name>`` (dims ``(chain, ...)``).
    """
    import xarray as xr

    generator = torch.Generator().manual_seed(seed)
    posterior, variational = {}, {}
    for site in chains[0]:
        theta = torch.stack([chain[site].detach().cpu().float() for chain in chains])
        dims = [f"unit_{theta.shape[1]}"] if site.endswith("gate") else site_dims(theta.shape[1:])
        draws = torch.bernoulli(theta[:, None].expand(-1, num_draws, *theta.shape[1:]), generator=generator)
        posterior[site] = xr.DataArray(draws.to(torch.int8).numpy(), dims=("chain", "draw", *dims))
        variational[f"{site}.{name}"] = xr.DataArray(theta.numpy(), dims=("chain", *dims))
    return inference_data_from_groups({"posterior": xr.Dataset(posterior), "variational": xr.Dataset(variational)})


def site_dims(shape) -> list:
    """Names of the dimensions of a site of ``shape`` in ``posterior.nc``: ``dim_<axis>_<length>``, shared
    by every variable with an axis of that length at that position. One dimension per axis of every site
    (ArviZ's ``<site>_dim_0``, ...) made reading the file back quadratic in the number of sites: h5netcdf
    looks each variable's dimensions up among all of the group's (5 s of a ShuffleNet run's 12)."""
    return [f"dim_{axis}_{length}" for axis, length in enumerate(shape)]


# ----------------------------------------------------------------------------------------------------
# Draws


def _chain(
    model,
    guide,
    selected,
    x_test,
    num_draws,
    num_predictive_draws,
    regression,
    dataset,
    batch_size,
    feature_importance,
    outputs=None,
):
    posteriors = guide.posteriors()
    device = _device(model)
    x = x_test.to(device)
    weights = {name: [] for name in selected}
    inclusion = {name: [] for name in selected}
    predictive = []
    locs = {name: posteriors[name].loc.detach() for name in selected}
    scales = {name: posteriors[name].scale.detach() for name in selected}
    every_site = len(selected) == len(posteriors)
    # sample_params's draws, σ = softplus(ρ) computed once for all of them: not made where the outputs are given
    draw_params = guide.sampler() if outputs is None or every_site else None
    if outputs is not None:  # the posterior predictive from draws evaluated already
        for output in outputs:
            y = model.likelihood.distribution(output.to(device)).sample().cpu()
            predictive.append((_original_units(y, dataset) if regression else y).numpy())
    for draw in range(num_draws):
        if draw < num_predictive_draws and outputs is None:
            params = draw_params()
            with evaluating(model.net):
                y = torch.cat(
                    [
                        model.likelihood.distribution(model.network(params, chunk)).sample()
                        for chunk in torch.split(x, batch_size)
                    ]
                ).cpu()
            predictive.append((_original_units(y, dataset) if regression else y).numpy())
        elif every_site:  # the draws of every site, as the predictive's are
            params = draw_params()
        else:  # a draw of the selected sites alone, not of the whole network
            params = {name: torch.addcmul(locs[name], scales[name], torch.randn_like(locs[name])) for name in selected}
        for name in selected:
            weights[name].append(params[name].float().cpu().numpy())
            inclusion[name].append(torch.bernoulli(posteriors[name].probs).to(torch.int8).cpu().numpy())

    probs = {name: q.probs.detach().float().cpu() for name, q in posteriors.items()}
    flat = torch.cat([p.flatten() for p in probs.values()]).double().numpy()
    result = {
        "weights": {name: np.stack(values) for name, values in weights.items()},
        "inclusion": {name: np.stack(values) for name, values in inclusion.items()},
        "loc": {name: locs[name].float().cpu().numpy() for name in selected},
        "scale": {name: scales[name].float().cpu().numpy() for name in selected},
        "inclusion_probability": {name: probs[name].numpy() for name in selected},
        "site_mean": np.array([p.double().mean().item() for p in probs.values()]),
        "site_fraction": np.array([(p >= 0.5).double().mean().item() for p in probs.values()]),
        "network_fraction": float((flat >= 0.5).mean()),
        "quantiles": np.quantile(flat, _QUANTILES),
        "predictive": np.stack(predictive) if predictive else np.zeros((0, len(x_test))),
        "importance": {},
        "importance_at_p": {},
    }
    if feature_importance is not None:
        result["importance_at_p"] = _importance(feature_importance, {name: q.probs for name, q in posteriors.items()})
        draws = [
            _importance(feature_importance, {name: torch.bernoulli(q.probs) for name, q in posteriors.items()})
            for _ in range(num_draws)
        ]
        result["importance"] = {key: np.stack([draw[key][1] for draw in draws]) for key in result["importance_at_p"]}
    return result


def _importance(feature_importance, inclusion: dict) -> dict:
    """``{key: (dim, values)}``: dim ``feature`` unless the callable returned a ``(dim, values)`` pair."""
    result = {}
    for key, value in feature_importance(inclusion).items():
        dim, value = value if isinstance(value, tuple) else ("feature", value)
        result[key] = (dim, torch.as_tensor(value).detach().double().cpu().reshape(-1).numpy())
    return result


def _select_sites(site_shapes: dict, sites) -> list:
    if sites == "all":
        return list(site_shapes)
    if isinstance(sites, str):
        raise ValueError(f"sites must be None, 'all' or a list of site names, got {sites!r}")
    if sites is not None:
        sites = list(sites)
        unknown = [name for name in sites if name not in site_shapes]
        if unknown:
            raise ValueError(f"unknown sites {unknown}; the model's sites are {list(site_shapes)}")
        return sites
    sizes = {name: math.prod(shape) for name, shape in site_shapes.items()}
    if sum(sizes.values()) <= MAX_DEFAULT_WEIGHTS:
        return list(site_shapes)
    layer = next(iter(site_shapes)).rpartition(".")[0]
    first = [name for name in site_shapes if name.rpartition(".")[0] == layer]
    return first if sum(sizes[name] for name in first) <= MAX_DEFAULT_WEIGHTS else []


def _original_units(y: torch.Tensor, dataset) -> torch.Tensor:
    return y.double() * dataset.target_std + dataset.target_mean


def _elbo_traces(histories) -> np.ndarray:
    traces = [list(h.elbo) if h is not None else [] for h in histories]
    length = max((len(t) for t in traces), default=0)
    out = np.full((len(traces), length), np.nan)
    for row, trace in enumerate(traces):
        out[row, : len(trace)] = trace
    return out


def _device(model) -> torch.device:
    try:
        return next(model.net.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


def _used(coords: dict, variables: dict) -> dict:
    dims = {dim for dims, _ in variables.values() for dim in dims}
    return {dim: values for dim, values in coords.items() if dim in dims}


def _attrs(fits, num_draws) -> dict:
    import arviz as az
    import pyro

    from bayesprune.version import __version__

    return {
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "arviz_version": az.__version__,
        "inference_library": "pyro",
        "inference_library_version": pyro.__version__,
        "bayesprune_version": __version__,
        "inference": "mean-field spike-and-slab variational inference; chains are independent restarts",
        "num_chains": len(fits),
        "num_draws": num_draws,
    }


__all__ = [
    "MAX_DEFAULT_WEIGHTS",
    "site_dims",
    "to_inference_data",
]
