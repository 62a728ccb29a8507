"""Spike-and-slab posterior with a point mass at zero over every parameter (paper 000, section 5.1)."""
import math

import pyro
import torch
from pyro.nn import PyroModule, PyroParam
from pyro.nn.module import to_pyro_module_

from bayesprune.distributions import DiracSpikeSlab
from bayesprune.gates import StochasticMasks


class DiracSpikeSlabGuide(PyroModule):
    r"""q(w_i) = (1 − λ_i) δ₀ + λ_i N(μ_i, σ_i²) for every parameter of a model (paper 000, eq. 5's family).

    The masked sites (``keep``'s keys, the weights) have keep-probabilities λ in a
    :class:`~bayesprune.gates.StochasticMasks` (sigmoid or clamp mapping, Concrete relaxation); the
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

    def __init__(self, model, keep: dict, *, scale: float, learn_scale: bool = True, parameterization: str = "sigmoid",
                 temperature: float = 0.5):
        super().__init__()
        self.site_shapes = dict(model.site_shapes)
        masks = StochasticMasks(keep, parameterization=parameterization, temperature=temperature)
        to_pyro_module_(masks)  # its λ become Pyro params that SVI steps
        self.masks = masks
        self.temperature = temperature
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

    def posteriors(self) -> dict:
        """q of every site as a :class:`~bayesprune.distributions.DiracSpikeSlab`."""
        keep = self.masks.probabilities()
        locs, scales = self._split(self.loc), self._split(self.log_scale.exp())
        return {name: DiracSpikeSlab(keep[name] if name in keep else torch.ones_like(locs[name]), locs[name], scales[name],
                                     temperature=self.temperature) for name in self.site_shapes}

    def forward(self, *args, **kwargs):
        for name, posterior in self.posteriors().items():
            pyro.sample(name, posterior.to_event(len(posterior.batch_shape)))

    @torch.no_grad()
    def mean_params(self) -> dict:
        """The deterministic sparse network: μ where λ ≥ 1/2 (the most probable mask), 0 elsewhere."""
        keep = self.masks.probabilities()
        return {name: loc * (keep[name] >= 0.5) if name in keep else loc.clone() for name, loc in self._split(self.loc).items()}

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One exact draw W ~ q (Bernoulli masks, Gaussian slabs)."""
        return {name: q.sample() for name, q in self.posteriors().items()}
