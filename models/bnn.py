"""A Bayesian neural network as one Pyro program: priors on a plain ``nn.Module``, then a likelihood."""
import pyro
import torch
from pyro.nn import PyroModule
from torch import nn
from torch.func import functional_call


class BayesianNetwork(PyroModule):
    """Places a prior on every parameter of ``net`` and observes the data through ``likelihood``.

    Each parameter becomes one sample site named after its path in ``net`` (``0.weight``,
    ``fc1.bias``): one site per tensor, never per weight. The network is evaluated with the sampled
    tensors through :func:`torch.func.functional_call`, so any architecture built from standard
    modules works unchanged.

    Args:
        net: the deterministic architecture; its initial parameters seed the guide.
        prior: a :class:`bayesprune.priors.Prior` policy.
        likelihood: a :class:`bayesprune.models.Likelihood` that owns the data plate.
    """

    def __init__(self, net: nn.Module, prior, likelihood):
        super().__init__()
        self.net = net
        self.prior = prior
        self.likelihood = likelihood
        self._site_priors = {}
        # Parameters shared between modules appear once in named_parameters(); only then must
        # functional_call search for the other names of a tensor on every call.
        self._tied = len(list(net.named_parameters(remove_duplicate=False))) != len(list(net.named_parameters()))

    @property
    def site_shapes(self) -> dict:
        """Sample-site names mapped to their tensor shapes, in network order."""
        return {name: param.shape for name, param in self.net.named_parameters()}

    def site_priors(self, device=None) -> dict:
        """The prior of every sample site, built once per device."""
        device = torch.device(device) if device is not None else next(self.net.parameters()).device
        if device not in self._site_priors:
            self._site_priors[device] = {
                name: self.prior.distribution(name, param.detach().to(device))
                for name, param in self.net.named_parameters()
            }
        return self._site_priors[device]

    def network(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """Evaluate the architecture with the given parameter tensors."""
        # Read the net from _modules: ``self.net`` inside a running PyroModule issues pyro.module("net"),
        # which registers its (unused, deterministic) parameters in the param store on every call, so
        # SVI also builds and steps one idle optimizer per parameter.
        return functional_call(self._modules["net"], params, (x,), tie_weights=self._tied)

    def forward(self, x, y=None):
        params = {name: pyro.sample(name, prior) for name, prior in self.site_priors(x.device).items()}
        return self.likelihood(self.network(params, x), y)
