"""Spike-and-slab posterior with a point mass at zero over every parameter (paper 000, section 5.1)."""

import math

import pyro
import torch
from pyro.nn import PyroModule, PyroParam
from pyro.nn.module import to_pyro_module_

from bayesprune.core.gates import StochasticMasks
from bayesprune.methods.pbp.distributions import DiracSpikeSlab, DiracSpikeSlabPosteriors, FlatDiracSpikeSlabPrior


class DiracSpikeSlabGuide(PyroModule):
    r"""q(w_i) = (1 − λ_i) δ₀ + λ_i N(μ_i, σ_i²) for every parameter of a model (paper 000, eq. 5's family).

    The masked sites (``keep``'s keys, the weights) have keep-probabilities λ in a
    :class:`~bayesprune.core.gates.StochasticMasks` (sigmoid or clamp mapping, Concrete relaxation); the
    other sites (biases) are never pruned, λ = 1. μ starts at the model's current parameters, σ at
    ``scale`` for every parameter; σ is trained (``learn_scale``) or fixed. All μ and log σ live in two
    flat vectors, so an optimiser step is vectorised over the network.

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its parameters initialise μ.
        keep: masked site → initial λ.
        scale: initial (or fixed) slab standard deviation σ.
        learn_scale: train σ.
        parameterization, temperature: of the masks (appendices B.1, B.3).
    """

    def __init__(
        self,
        model,
        keep: dict,
        *,
        scale: float,
        learn_scale: bool = True,
        parameterization: str = "sigmoid",
        temperature: float = 0.5,
    ):
        super().__init__()
        self.site_shapes = dict(model.site_shapes)
        masks = StochasticMasks(keep, parameterization=parameterization, temperature=temperature)
        to_pyro_module_(masks)  # its λ become Pyro params that SVI steps
        self.masks = masks
        self.temperature = temperature
        self._site_priors = model.site_priors
        self._flat_priors = {}
        params = dict(model.net.named_parameters())
        self.loc = PyroParam(torch.cat([params[name].detach().flatten() for name in self.site_shapes]))
        log_scale = torch.full_like(self.loc, math.log(scale))
        if learn_scale:
            self.log_scale = PyroParam(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    def _split(self, flat: torch.Tensor) -> dict:
        chunks = torch.split(flat, [shape.numel() for shape in self.site_shapes.values()])
        return {name: chunk.view(shape) for (name, shape), chunk in zip(self.site_shapes.items(), chunks)}

    def _flat_prior(self, priors: dict):
        """The model's priors as flat vectors if every site has a :class:`DiracSpikeSlab` prior of its
        shape, else ``None``; decided once per set of priors (the model builds them once per device)."""
        key = tuple(id(prior) for prior in priors.values())
        if key not in self._flat_priors:
            bases = [prior.base_dist for prior in priors.values()]
            flat = list(priors) == list(self.site_shapes) and all(
                type(base) is DiracSpikeSlab and base.batch_shape == shape
                for base, shape in zip(bases, self.site_shapes.values())
            )
            self._flat_priors[key] = FlatDiracSpikeSlabPrior.of(bases) if flat else None
        return self._flat_priors[key]

    def posteriors(self) -> dict:
        """q of every site as a :class:`~bayesprune.core.distributions.DiracSpikeSlab`: views of one
        network-wide :class:`~bayesprune.core.distributions.DiracSpikeSlabPosteriors` (its KL fused) when
        every prior is one too."""
        keep = self.masks.probabilities()
        scale = self.log_scale.exp()
        prior = self._flat_prior(self._site_priors(self.loc.device))
        if prior is not None:
            ones = self.loc.new_ones
            probs = torch.cat(
                [
                    keep[name].flatten() if name in keep else ones(shape.numel())
                    for name, shape in self.site_shapes.items()
                ]
            )
            return DiracSpikeSlabPosteriors(
                probs, self.loc, scale, self.site_shapes, prior, temperature=self.temperature
            ).sites
        locs, scales = self._split(self.loc), self._split(scale)
        return {
            name: DiracSpikeSlab(
                keep[name] if name in keep else torch.ones_like(locs[name]),
                locs[name],
                scales[name],
                temperature=self.temperature,
            )
            for name in self.site_shapes
        }

    def forward(self, *args, **kwargs):
        for name, posterior in self.posteriors().items():
            pyro.sample(name, posterior.to_event(len(posterior.batch_shape)))

    @torch.no_grad()
    def mean_params(self) -> dict:
        """The deterministic sparse network: μ where λ ≥ 1/2 (the most probable mask), 0 elsewhere."""
        keep = self.masks.probabilities()
        return {
            name: loc * (keep[name] >= 0.5) if name in keep else loc.clone()
            for name, loc in self._split(self.loc).items()
        }

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One exact draw W ~ q (Bernoulli masks, Gaussian slabs)."""
        return {name: q.sample() for name, q in self.posteriors().items()}
