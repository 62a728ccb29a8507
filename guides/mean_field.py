"""The flat mean-field Gaussian parameters every guide of :mod:`bayesprune.guides` shares."""

import math

import pyro
import torch
import torch.nn.functional as F
from pyro.nn import PyroModule, PyroParam


def _inverse_softplus(x: float) -> float:
    return x + math.log(-math.expm1(-x))


class MeanFieldGuide(PyroModule):
    r"""Base of the guides: m and ρ of every weight (σ = softplus(ρ)) in two flat vectors.

    Optimiser steps are vectorised over the whole network; each site reads a view. Subclasses
    define :meth:`posteriors`, the variational distribution of every site; sampling in
    :meth:`forward` and the prediction interface (``mean_params``, ``sample_params``) follow from it.

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its current parameters initialise m.
        init_scale: initial σ of every weight.
    """

    def __init__(self, model, *, init_scale: float = 1e-2):
        super().__init__()
        self.site_shapes = dict(model.site_shapes)
        params = dict(model.net.named_parameters())
        self.loc = PyroParam(torch.cat([params[name].detach().flatten() for name in self.site_shapes]))
        self.rho = PyroParam(torch.full_like(self.loc, _inverse_softplus(init_scale)))

    @property
    def num_weights(self) -> int:
        return sum(shape.numel() for shape in self.site_shapes.values())

    def _split(self, flat: torch.Tensor) -> dict:
        sizes = [shape.numel() for shape in self.site_shapes.values()]
        return {
            name: chunk.view(shape) for (name, shape), chunk in zip(self.site_shapes.items(), torch.split(flat, sizes))
        }

    def _locs_and_scales(self) -> tuple:
        """m and σ of every site, keyed by site name."""
        return self._split(self.loc), self._split(F.softplus(self.rho))

    def posteriors(self) -> dict:
        """The variational distribution of every site, keyed by site name."""
        raise NotImplementedError

    def forward(self, *args, **kwargs):
        for name, posterior in self.posteriors().items():
            pyro.sample(name, posterior.to_event(len(posterior.batch_shape)))

    @torch.no_grad()
    def mean_params(self) -> dict:
        """The posterior-mean network: m for every site."""
        return {name: loc.clone() for name, loc in self._split(self.loc).items()}

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One draw W ~ q(W) for every site."""
        return {name: q.rsample() for name, q in self.posteriors().items()}

    def sampler(self):
        """A function making one draw W ~ q(W) for every site at each call (:meth:`sample_params`), for
        draws in a row while the parameters stay as they are; a guide may compute what the draws
        share once."""
        return self.sample_params
