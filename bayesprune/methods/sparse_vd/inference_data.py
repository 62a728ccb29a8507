"""Fitted Sparse VD posteriors as ArviZ data (``posterior.nc``).

Groups (``C`` chains = independent fits, ``S`` draws per chain):

``posterior``
    - ``<site>``: draws W ~ q(W) = N(θ, σ²) of the weight sites that fit in :data:`MAX_DRAWN_WEIGHTS`
      (smallest sites first), with the weights of log α > threshold at 0 as the test-time network
      has them; dims ``(chain, draw, dim_0_<n0>, ...)`` (shared by the sites with an axis of that length
      there: :func:`~bayesprune.analysis.inference_data.site_dims`), float32.
    - ``fraction_removed`` (dim ``site``) and ``network_fraction_removed``: the fraction of weights
      with log α > threshold, a function of q repeated over the draws (read it per chain).
``posterior_predictive`` / ``observed_data``
    ``obs``: one class label (or regression target) per test point for each of the first draws, and
    the test targets (at most :data:`PREDICTIVE_TEST_POINTS` points).
``variational``
    ``<site>.theta``, ``<site>.log_sigma2``, ``<site>.log_alpha`` of the drawn sites, and
    ``log_alpha_quantile`` (101 quantiles of log α over every weight), dims ``(chain, ...)``.
``sample_stats``
    ``elbo``, dims ``(chain, epoch)``: minus the training loss per epoch (its KL term annealed).
"""

import numpy as np
import torch
import xarray as xr

from bayesprune.analysis.arviz_compat import inference_data_from_groups
from bayesprune.analysis.inference_data import site_dims
from bayesprune.core.predict import evaluating

MAX_DRAWN_WEIGHTS = 20_000
PREDICTIVE_TEST_POINTS = 1000
_QUANTILES = np.linspace(0.0, 1.0, 101)


def _drawn_sites(shapes: dict) -> list:
    chosen, total = [], 0
    for name in sorted(shapes, key=lambda n: shapes[n].numel()):
        if total + shapes[name].numel() > MAX_DRAWN_WEIGHTS:
            break
        chosen.append(name)
        total += shapes[name].numel()
    return [name for name in shapes if name in chosen]


@torch.no_grad()
def to_inference_data(fits: list, data=None, *, num_draws: int = 50, num_predictive_draws: int = 20, seed: int = 0):
    """ArviZ data of the :class:`~bayesprune.methods.sparse_vd.SparseVDFitted` ``fits`` (one per chain);
    the groups are in the module's docstring. ``data`` (its test split) gives the posterior predictive."""
    shapes = dict(fits[0].guide.site_shapes)
    drawn = _drawn_sites(shapes)
    variational = {}
    chains = len(fits)
    posterior, predictive = _draws(fits, data, drawn, num_draws, num_predictive_draws, seed)
    variables = {
        name: (["chain", "draw", *site_dims(shapes[name])], np.stack(values)) for name, values in posterior.items()
    }
    fractions, network, quantiles = [], [], []
    for fit in fits:
        log_alpha = fit.log_alpha()
        fractions.append([float((value > fit.threshold).double().mean()) for value in log_alpha.values()])
        flat = torch.cat([value.flatten() for value in log_alpha.values()]).cpu().numpy()
        network.append(float((flat > fit.threshold).mean()))
        quantiles.append(np.quantile(flat, _QUANTILES))
        thetas, log_sigma2s = (
            fit.guide._split(fit.guide.theta.detach()),
            fit.guide._split(fit.guide.log_sigma2.detach()),
        )
        for name in drawn:
            for key, value in (
                ("theta", thetas[name]),
                ("log_sigma2", log_sigma2s[name]),
                ("log_alpha", log_alpha[name]),
            ):
                variational.setdefault(f"{name}.{key}", []).append(value.float().cpu().numpy())
    fractions, network = np.array(fractions), np.array(network)
    variables["fraction_removed"] = (["chain", "draw", "site"], np.repeat(fractions[:, None], num_draws, axis=1))
    variables["network_fraction_removed"] = (["chain", "draw"], np.repeat(network[:, None], num_draws, axis=1))
    coords = {"chain": np.arange(chains), "draw": np.arange(num_draws), "site": np.array(list(shapes), dtype=object)}
    for name in drawn:
        coords.update({dim: np.arange(size) for dim, size in zip(site_dims(shapes[name]), shapes[name])})
    variational_vars = {
        key: (["chain", *site_dims(values[0].shape)], np.stack(values)) for key, values in variational.items()
    }
    variational_vars["log_alpha_quantile"] = (["chain", "quantile"], np.stack(quantiles))
    elbo = _elbo_traces(fits)
    length = elbo.shape[1]
    attrs = {
        "inference": "Sparse VD (Molchanov et al., 2017): mean-field Gaussian q with a log-uniform prior; "
        "chains are independent restarts",
        "num_chains": chains,
        "num_draws": num_draws,
    }
    variational_coords = {dim: coords[dim] for dims, _ in variational_vars.values() for dim in dims if dim in coords}
    groups = {
        "posterior": xr.Dataset(variables, coords=coords, attrs=attrs),
        "variational": xr.Dataset(variational_vars, coords={**variational_coords, "quantile": _QUANTILES}, attrs=attrs),
        "sample_stats": xr.Dataset(
            {"elbo": (["chain", "epoch"], elbo)},
            coords={"chain": coords["chain"], "epoch": np.arange(1, length + 1)},
            attrs=attrs,
        ),
    }
    if data is not None:
        y = data.y_test[:PREDICTIVE_TEST_POINTS].cpu()
        if data.task == "regression":  # targets and draws in the original units
            scale, shift = data.target_std, data.target_mean
            y, predictive = y.double() * scale + shift, [p * scale + shift for p in predictive]
        points = {"test_point": np.arange(len(y))}
        groups["posterior_predictive"] = xr.Dataset(
            {"obs": (["chain", "draw", "test_point"], np.stack(predictive))},
            coords={"chain": coords["chain"], "draw": np.arange(len(predictive[0])), **points},
            attrs=attrs,
        )
        groups["observed_data"] = xr.Dataset({"obs": (["test_point"], y.numpy())}, coords=points, attrs=attrs)
    return inference_data_from_groups(groups)


def _draws(fits, data, drawn, num_draws: int, num_predictive_draws: int, seed: int) -> tuple:
    """Site → per chain its ``num_draws`` draws W ~ q (pruned weights zeroed) of the ``drawn`` sites, and per
    chain the labels of the first ``num_predictive_draws`` drawn from the whole network (none without ``data``)."""
    posterior, predictive = {}, []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for fit in fits:
            x = None if data is None else data.x_test[:PREDICTIVE_TEST_POINTS].to(fit.guide.theta.device)
            sites, labels = {name: [] for name in drawn}, []
            q, keep = fit.guide.posteriors(), fit.guide.keep_masks(fit.threshold)
            for draw in range(num_draws):  # one draw of the whole network held at a time, and only for the predictive
                whole = x is not None and draw < num_predictive_draws
                # fit.params(sample=True), the masks computed once: every site, or the stored ones alone
                params = {name: q[name].rsample() * keep[name] for name in (q if whole else drawn)}
                if whole:
                    params.update(fit.model.point_params())
                for name in drawn:
                    sites[name].append(params[name].float().cpu().numpy())
                if whole:
                    with evaluating(fit.net):
                        labels.append(fit.model.likelihood.distribution(fit.model.network(params, x)).sample().cpu())
            for name in drawn:
                posterior.setdefault(name, []).append(np.stack(sites[name]))
            if x is not None:
                predictive.append(torch.stack(labels).numpy())
    return posterior, predictive


def _elbo_traces(fits) -> np.ndarray:
    """The ELBO of each fit per epoch, NaN after a fit stopped (or where it has no history)."""
    histories = [fit.history for fit in fits]
    length = max((len(h.epoch_losses) for h in histories if h is not None), default=0)
    elbo = np.full((len(fits), length), np.nan)
    for row, history in enumerate(histories):
        if history is not None:
            elbo[row, : len(history.epoch_losses)] = history.elbo
    return elbo
