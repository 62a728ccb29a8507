"""Sparse VD as a Pyro model and guide, and its objective with local reparameterisation.

:class:`SparseVDNetwork` places the log-uniform prior on the weight of every ``Linear`` and
convolution (one sample site per tensor, named after its path, ``0.weight``); every other parameter
(the biases) is a deterministic point estimate trained by the likelihood alone, as in the paper,
whose prior and dropout act on weights only. :class:`SparseVDGuide` holds θ and log σ² of every
weight site in two flat vectors. :class:`SparseVDELBO` scores the likelihood through sampled
pre-activations (the local reparameterisation trick, section 4.3 and eq. 17) and adds the registered
KL of eq. 14, weighted by an annealing factor.
"""

import math

import pyro
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.nn import PyroModule, PyroParam
from torch import nn
from torch.func import functional_call
from torch.overrides import TorchFunctionMode

from bayesprune.core.objectives import AnalyticKLELBO, latent_sites
from bayesprune.methods.sparse_vd.distributions import LOG_ALPHA_THRESHOLD, AdditiveNormals, LogUniform, log_alpha

_CONVOLUTIONS = (F.conv1d, F.conv2d, F.conv3d)
_PRUNABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def weight_sites(net: nn.Module) -> list:
    """Names of the weights that carry the log-uniform prior: those of ``Linear`` and convolutions."""
    return [
        f"{name}.weight" if name else "weight" for name, module in net.named_modules() if isinstance(module, _PRUNABLE)
    ]


class MaskedLocalReparameterization(TorchFunctionMode):
    """Replaces ``F.linear`` and ``F.conv{1,2,3}d`` of known weight tensors by a draw of the
    pre-activations: mean f(x, θ) + b and variance f(x², σ²), f the layer's linear map (eq. 17).

    Sparse VD's variant of :class:`bayesprune.core.reparameterization.LocalReparameterization` (the
    shared one, exact: linear layers only, convolutions refused, Gaussian biases too): this one also
    draws convolutions (approximately, as the paper does), keeps the biases as given, and applies
    keep-masks.

    For a fully connected layer this is exact; for a convolution each output position gets the
    exact marginal mean and variance of the weight-sampled network but independent noise, as in the
    paper and its authors' code (positions of one example share a kernel, so their noise is correlated
    under weight sampling). ``masks`` (``id`` → bool tensor) zero the pruned weights in both maps
    (the authors' ``train_clip``: training sees the network that will be kept).

    Args:
        posteriors: ``id(tensor)`` of a sampled weight → its :class:`AdditiveNormal`.
        masks: ``id(tensor)`` → keep-mask of the weight, or absent.
    """

    def __init__(self, posteriors: dict, masks: dict | None = None):
        super().__init__()
        self.posteriors, self.masks = posteriors, masks or {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is not F.linear and func not in _CONVOLUTIONS) or len(args) < 2 or id(args[1]) not in self.posteriors:
            return func(*args, **kwargs)
        x, weight, *rest = args
        posterior = self.posteriors[id(weight)]
        mask = self.masks.get(id(weight))
        mean_weight, var_weight = posterior.loc, posterior.variance
        if mask is not None:
            mean_weight, var_weight = mean_weight * mask, var_weight * mask
        return reparameterized(func, x, mean_weight, var_weight, *rest, **kwargs)


def reparameterized(func, x, mean_weight, var_weight, bias=None, *rest, **kwargs):
    """One draw of ``func(x, W, bias)`` with independent W ~ N(mean, var) marginalised per output."""
    kwargs = dict(kwargs)
    bias = kwargs.pop("bias", bias)
    mean = func(x, mean_weight, bias, *rest, **kwargs)
    var = func(x * x, var_weight, None, *rest, **kwargs)
    return mean + torch.sqrt(var + 1e-8) * torch.randn_like(mean)


class LogUniformPrior:
    """Prior policy: the log-uniform prior on a weight (shape of the parameter, one event)."""

    def distribution(self, name, param):
        return LogUniform(device=param.device, dtype=param.dtype).expand(param.shape).to_event(param.dim())


class SparseVDNetwork(PyroModule):
    """``net`` with the log-uniform prior on every weight site and point-estimated biases.

    Args:
        net: the deterministic architecture; its initial parameters seed θ and the biases.
        likelihood: a :class:`bayesprune.models.Likelihood` that owns the data plate.
    """

    def __init__(self, net: nn.Module, likelihood):
        super().__init__()
        self.net = net
        self.likelihood = likelihood
        self.weight_names = weight_sites(net)
        params = dict(net.named_parameters())
        self.point_shapes = {name: p.shape for name, p in params.items() if name not in self.weight_names}
        values = [params[name].detach().flatten() for name in self.point_shapes]
        self.points = PyroParam(torch.cat(values) if values else torch.zeros(0))
        self.prior = LogUniformPrior()
        self._site_priors = {}

    @property
    def site_shapes(self) -> dict:
        """Weight sites (the prunable tensors) and their shapes, in network order."""
        params = dict(self._modules["net"].named_parameters())
        return {name: params[name].shape for name in self.weight_names}

    def site_priors(self, device) -> dict:
        device = torch.device(device)
        if device not in self._site_priors:
            params = dict(self._modules["net"].named_parameters())
            self._site_priors[device] = {
                name: self.prior.distribution(name, params[name].detach().to(device)) for name in self.weight_names
            }
        return self._site_priors[device]

    def point_params(self) -> dict:
        """The deterministic parameters (biases) by name, views of one flat vector."""
        chunks = torch.split(self.points, [s.numel() for s in self.point_shapes.values()])
        return {name: chunk.view(shape) for (name, shape), chunk in zip(self.point_shapes.items(), chunks)}

    def network(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """Evaluate the architecture with ``params`` (weights and biases by name)."""
        return functional_call(self._modules["net"], params, (x,))

    def forward(self, x, y=None):
        params = {name: pyro.sample(name, prior) for name, prior in self.site_priors(x.device).items()}
        params.update(self.point_params())
        return self.likelihood(self.network(params, x), y)


class SparseVDGuide(PyroModule):
    """q(W) = Π N(θ, σ²) over every weight site, θ and log σ² in two flat vectors (eqs. 15-16).

    θ starts at the network's weights, log σ² at ``init_log_sigma2`` (−10 in the authors' code).

    Args:
        model: a :class:`SparseVDNetwork`.
        init_log_sigma2: initial log σ² of every weight.
    """

    def __init__(self, model: SparseVDNetwork, *, init_log_sigma2: float = -10.0):
        super().__init__()
        self.site_shapes = dict(model.site_shapes)
        params = dict(model._modules["net"].named_parameters())
        self.theta = PyroParam(torch.cat([params[name].detach().flatten() for name in self.site_shapes]))
        self.log_sigma2 = PyroParam(torch.full_like(self.theta, float(init_log_sigma2)))

    def _split(self, flat: torch.Tensor) -> dict:
        chunks = torch.split(flat, [s.numel() for s in self.site_shapes.values()])
        return {name: chunk.view(shape) for (name, shape), chunk in zip(self.site_shapes.items(), chunks)}

    def posteriors(self) -> dict:
        """q of every weight site as an :class:`AdditiveNormal`."""
        return AdditiveNormals(self.theta, self.log_sigma2, self.site_shapes).sites

    def forward(self, *args, **kwargs):
        for name, q in self.posteriors().items():
            pyro.sample(name, q.to_event(q.loc.dim()))

    @torch.no_grad()
    def log_alpha(self, *, dtype=torch.float64) -> dict:
        """log α = log σ² − log θ² of every weight, unclipped, in ``dtype``, by site."""
        theta, log_sigma2 = self.theta.detach().to(dtype), self.log_sigma2.detach().to(dtype)
        return self._split(log_alpha(theta, log_sigma2, clip=None))

    @torch.no_grad()
    def keep_masks(self, threshold: float = LOG_ALPHA_THRESHOLD) -> dict:
        """The paper's rule: keep a weight where log α ≤ ``threshold`` (section 5: 3)."""
        return {name: la <= threshold for name, la in self.log_alpha(dtype=self.theta.dtype).items()}

    @torch.no_grad()
    def mean_params(self, threshold: float = LOG_ALPHA_THRESHOLD) -> dict:
        """The test-time weights: θ with the weights of log α > ``threshold`` zeroed."""
        masks = self.keep_masks(threshold)
        return {name: theta * masks[name] for name, theta in self._split(self.theta.detach()).items()}

    @torch.no_grad()
    def sample_params(self, threshold: float = LOG_ALPHA_THRESHOLD) -> dict:
        """One draw W ~ q(W), the weights of log α > ``threshold`` zeroed."""
        masks = self.keep_masks(threshold)
        return {name: q.rsample() * masks[name] for name, q in self.posteriors().items()}


class SparseVDELBO(AnalyticKLELBO):
    """−ELBO of Sparse VD: (N/B)·Σ −log p(y | x, W) through sampled pre-activations (eq. 17) plus
    ``kl_weight`` · Σ KL(q ‖ log-uniform) by the registered eq. 14 (per weight, up to a constant).

    ``kl_weight`` is read at every step from ``annealing`` (an object with a ``weight`` attribute,
    :class:`KLAnnealing`) when given, else 1. With ``train_clip`` the weights of log α above
    ``threshold`` are zeroed in both pre-activation maps while training (the authors' code).
    """

    def __init__(
        self, *, annealing=None, train_clip: bool = True, threshold: float = LOG_ALPHA_THRESHOLD, num_particles: int = 1
    ):
        super().__init__(num_particles=num_particles)
        self.annealing, self.train_clip, self.threshold = annealing, train_clip, threshold

    def combine(self, nll, kl):
        weight = 1.0 if self.annealing is None else self.annealing.weight
        return nll + weight * kl

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        posteriors, masks = {}, {}
        for _, site in latent_sites(guide_trace):
            q = site["fn"].base_dist
            posteriors[id(site["value"])] = q
            if self.train_clip:
                with torch.no_grad():
                    masks[id(site["value"])] = (q.log_alpha <= self.threshold).to(q.loc.dtype)
        with MaskedLocalReparameterization(posteriors, masks):
            model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        return model_trace, guide_trace


class KLAnnealing:
    """The KL weight of the epoch in progress: 0 before ``start``, rising linearly to 1 at ``end``, 1
    after (the authors' ``rw_linear``: 0 for epochs 0-4, (epoch − 5)/15 for 5-19, 1 from 20).

    A training-loop callback (``on_epoch`` moves it to the next epoch) with ``state_dict`` so a
    checkpoint resumes it.
    """

    def __init__(self, *, start: int, end: int):
        self.start, self.end, self.epoch = int(start), int(end), 0

    @property
    def weight(self) -> float:
        if self.epoch < self.start:
            return 0.0
        if self.epoch >= self.end:
            return 1.0
        return (self.epoch - self.start) / (self.end - self.start)

    def on_epoch(self, epoch, history):
        self.epoch = epoch + 1

    def state_dict(self) -> dict:
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.epoch = int(state["epoch"])


def linear_decay(epochs: int, start: float):
    """The rate factor of epoch e: 1 until ``start``·``epochs``, then linearly to 0 at ``epochs``
    (``start = 0``: the authors' LeNet-5 ``lr_linear_to0``; ``start = 0.5`` with 200 epochs: their
    LeNet-300-100 ``lr_linear``)."""
    first = math.floor(start * epochs)
    return _LinearDecay(epochs, first)


class _LinearDecay:
    def __init__(self, epochs, first):
        self.epochs, self.first = epochs, first

    def __call__(self, epoch):
        if epoch < self.first:
            return 1.0
        return max(0.0, (self.epochs - epoch) / (self.epochs - self.first))
