"""A Bayesian neural network as one Pyro program: priors on a plain ``nn.Module``, then a likelihood."""

import pyro
import torch
from pyro.nn import PyroModule, PyroParam
from torch import nn
from torch.func import functional_call

from bayesprune.core.sites import site_names


class PointParams(PyroModule):
    """The parameters of a network that carry no prior, as Pyro params (point estimates SVI trains),
    keyed by their names in the network."""

    def __init__(self, params: dict):
        super().__init__()
        self.names = list(params)
        for index, param in enumerate(params.values()):
            setattr(self, f"p{index}", PyroParam(param.detach().clone()))

    def values(self) -> dict:
        return {name: getattr(self, f"p{index}") for index, name in enumerate(self.names)}


class BayesianNetwork(PyroModule):
    """Places a prior on the site parameters of ``net`` and observes the data through ``likelihood``.

    Each site becomes one sample site named after its path in ``net`` (``0.weight``, ``fc1.bias``):
    one site per tensor, never per weight. The other parameters (normalisation layers, by default)
    are point estimates, Pyro params of this model that SVI trains with the rest; buffers (batch
    norm's running statistics) stay the network's own. The network is evaluated with these tensors
    through :func:`torch.func.functional_call`, so any architecture built from standard modules
    works unchanged: skip connections, concatenations, shared modules.

    Args:
        net: the deterministic architecture; its initial parameters seed the guide.
        prior: a :class:`bayesprune.models.priors.Prior` policy.
        likelihood: a :class:`bayesprune.models.Likelihood` that owns the data plate.
        sites: the names of the parameters that carry a prior (:func:`bayesprune.core.sites.site_names`
            by default: the parameters of Linear and convolution layers).
    """

    def __init__(self, net: nn.Module, prior, likelihood, *, sites=None):
        super().__init__()
        self.net = net
        self.prior = prior
        self.likelihood = likelihood
        self.sites = list(site_names(net) if sites is None else sites)
        self.point = PointParams({name: param for name, param in net.named_parameters() if name not in self.sites})
        self._site_priors = {}
        # Parameters shared between modules appear once in named_parameters(); only then must
        # functional_call search for the other names of a tensor on every call.
        self._tied = len(list(net.named_parameters(remove_duplicate=False))) != len(list(net.named_parameters()))

    @property
    def site_shapes(self) -> dict:
        """Sample-site names mapped to their tensor shapes, in network order."""
        params = dict(self.net.named_parameters())
        return {name: params[name].shape for name in self.sites}

    def site_priors(self, device=None) -> dict:
        """The prior of every sample site, built once per device."""
        device = torch.device(device) if device is not None else next(self.net.parameters()).device
        if device not in self._site_priors:
            params = dict(self.net.named_parameters())
            self._site_priors[device] = {
                name: self.prior.distribution(name, params[name].detach().to(device)) for name in self.sites
            }
        return self._site_priors[device]

    def network(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """Evaluate the architecture with the given parameter tensors."""
        # Read the net from _modules: ``self.net`` inside a running PyroModule issues pyro.module("net"),
        # which registers its (unused, deterministic) parameters in the param store on every call, so
        # SVI also builds and steps one idle optimizer per parameter.
        return functional_call(self._modules["net"], {**self.point.values(), **params}, (x,), tie_weights=self._tied)

    def forward(self, x, y=None):
        params = {name: pyro.sample(name, prior) for name, prior in self.site_priors(x.device).items()}
        return self.likelihood(self.network(params, x), y)
