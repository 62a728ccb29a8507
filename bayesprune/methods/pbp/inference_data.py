"""PBP's posteriors as ArviZ data (``posterior.nc``): q and the data-dependent prior p, both
spike-and-slab with a point mass at zero (paper 000, eq. 5)."""

import torch
import xarray as xr

from bayesprune.analysis.arviz_compat import inference_data_from_groups
from bayesprune.analysis.inference_data import site_dims


def dirac_spike_slab_inference_data(chains: list, priors: list, *, num_draws: int = 10, seed: int = 0):
    """ArviZ data of spike-and-slab posteriors with a point mass at zero (PBP, paper 000, eq. 5), one
    ``{site: DiracSpikeSlab}`` of q and one of the prior p per chain.

    ``posterior`` holds draws w = b·w_slab of every site (float32, zero where the draw pruned it; dims
    ``(chain, draw, dim_0_<n0>, ...)``, :func:`~bayesprune.analysis.inference_data.site_dims`); ``variational``
    holds λ, μ and σ of q (``<site>.keep``, ``<site>.loc``, ``<site>.scale``) and of p (``<site>.prior_keep``,
    ...), dims ``(chain, dim_0_<n0>, ...)``.
    """
    torch.manual_seed(seed)
    posterior, variational = {}, {}
    for site in chains[0]:
        dims = site_dims(chains[0][site].loc.shape)
        draws = torch.stack([chain[site].sample((num_draws,)).cpu().float() for chain in chains])
        posterior[site] = xr.DataArray(draws.numpy(), dims=("chain", "draw", *dims))
        for prefix, distributions in (("", chains), ("prior_", priors)):
            for name, attribute in (("keep", "probs"), ("loc", "loc"), ("scale", "scale")):
                values = torch.stack([getattr(d[site], attribute).detach().cpu().float() for d in distributions])
                variational[f"{site}.{prefix}{name}"] = xr.DataArray(values.numpy(), dims=("chain", *dims))
    return inference_data_from_groups({"posterior": xr.Dataset(posterior), "variational": xr.Dataset(variational)})
