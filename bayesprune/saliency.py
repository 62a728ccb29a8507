"""One-shot pruning criteria: a saliency per weight, higher = keep (paper 000, section 2).

Every criterion is a function ``criterion(net, sites, *, x, y, loss, generator) -> {site: scores}``
registered in :data:`CRITERIA` by :func:`register_criterion`; :func:`bayesprune.pruning.prune`
turns the scores into masks under a :class:`~bayesprune.pruning.Budget`. ``x, y`` are a batch of
training data and ``loss(output, y)`` its mean loss, for the criteria that read the data.
"""
import torch
from torch.func import functional_call

from .structure import layer_chain

CRITERIA: dict = {}


def register_criterion(name: str):
    """Decorator: register a criterion under ``name``."""
    def register(function):
        CRITERIA[name] = function
        return function
    return register


def weight_sites(net) -> list:
    """The weight tensors of ``net``'s Linear/Conv2d chain, the sites a criterion scores (biases are
    never pruned by these criteria)."""
    return [layer.weight_site for layer in layer_chain(net)]


def saliency(name: str, net, *, x=None, y=None, loss=None, generator=None) -> dict:
    """The scores of criterion ``name`` for every weight site of ``net``, in float64 (they rank without ties
    collapsing)."""
    if name not in CRITERIA:
        raise ValueError(f"criterion must be one of {sorted(CRITERIA)}, got {name!r}")
    scores = CRITERIA[name](net, weight_sites(net), x=x, y=y, loss=loss, generator=generator)
    return {site: score.detach().to(torch.float64) for site, score in scores.items()}


@register_criterion("magnitude")
def magnitude(net, sites, **_):
    """Magnitude-based pruning (MBP): g_i = |W_i|."""
    params = dict(net.named_parameters())
    return {site: params[site].abs() for site in sites}


@register_criterion("snip")
def snip(net, sites, *, x, y, loss, **_):
    """SNIP (Lee et al., 2019): g_i = |W_i ∂L/∂W_i|, the first-order change of the loss when W_i is zeroed,
    on one batch ``(x, y)``."""
    params = {name: param.detach().requires_grad_(name in sites) for name, param in net.named_parameters()}
    value = loss(functional_call(net, params, (x,)), y)
    grads = torch.autograd.grad(value, [params[site] for site in sites])
    return {site: (params[site] * grad).abs() for site, grad in zip(sites, grads)}


@register_criterion("random")
def random(net, sites, *, generator=None, **_):
    """Random pruning (RP): i.i.d. uniform scores."""
    params = dict(net.named_parameters())
    return {site: torch.rand(params[site].shape, generator=generator).to(params[site].device) for site in sites}
