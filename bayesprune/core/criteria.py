"""Pruning criteria: a saliency per weight, higher = keep (paper 000, section 2; paper 001, sections 2-3).

Every criterion is a function ``criterion(net, sites, *, x, y, loss, generator, loss_kind) -> {site: scores}``
registered in :data:`CRITERIA` by :func:`register_criterion`; :func:`bayesprune.core.pruning.prune`
turns the scores into masks under a :class:`~bayesprune.core.pruning.Budget`. ``x, y`` are a batch of
training data and ``loss(output, y)`` its mean loss, for the criteria that read the data.

The loss-model criteria of paper 001 (``"obd"``, ``"lm"``, ``"qm"``) need the gradient and the
generalised Gauss-Newton of the *same* mean loss L (eq. 2), so they do not read ``loss``: L is the
mean over ``(x, y)`` of the loss ℓ of ``loss_kind`` (:func:`loss_kind_of`), the cross-entropy on
logits or the squared loss ½‖u − t‖². Multi-stage pruning with any criterion (Algorithm 1) and
what pruning costs (eq. 1) are the saliency method's (:mod:`bayesprune.methods.saliency.stages`).

The network is evaluated in the mode it is in: call ``net.eval()`` first if it holds dropout.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vjp, vmap

from bayesprune.core.loop import check_stop
from bayesprune.core.sites import weight_sites  # noqa: F401  (the sites a criterion scores)
from bayesprune.core.validation import is_number, require

CRITERIA: dict = {}
LOSS_KINDS = ("cross_entropy", "squared")
#: Examples per backward pass of :func:`ggn_diagonal`.
GGN_CHUNK = 256


def register_criterion(name: str):
    """Decorator: register a criterion under ``name``."""

    def register(function):
        CRITERIA[name] = function
        return function

    return register


def saliency(
    name: str, net, *, x=None, y=None, loss=None, generator=None, penalty: float = 0.0, loss_kind=None
) -> dict:
    """The scores of criterion ``name`` for every weight site of ``net``, in float64 (they rank without ties
    collapsing).

    Args:
        name: a criterion of :data:`CRITERIA`.
        net: the network; its parameters are read, not changed.
        x, y: a batch of training data, for the criteria that read data.
        loss: ``loss(output, y)``, the batch's mean loss (SNIP).
        generator: random numbers (random pruning).
        penalty: λ ≥ 0 of the step-size penalty: λ/2 · θ_k² is added to every score (paper 001,
            section 3.2); a large λ ranks like magnitude pruning.
        loss_kind: the loss of the loss-model criteria (:func:`loss_kind_of`).
    """
    if name not in CRITERIA:
        raise ValueError(f"criterion must be one of {sorted(CRITERIA)}, got {name!r}")
    require(is_number(penalty) and penalty >= 0, "penalty", "be a non-negative number", penalty)
    sites = weight_sites(net)
    scores = CRITERIA[name](net, sites, x=x, y=y, loss=loss, generator=generator, loss_kind=loss_kind)
    params = dict(net.named_parameters())
    return {
        site: score.detach().to(torch.float64) + penalty / 2 * params[site].detach().to(torch.float64) ** 2
        for site, score in scores.items()
    }


def loss_kind_of(y: torch.Tensor, loss_kind: str | None = None) -> str:
    """``loss_kind`` if given, else the loss that ``y``'s dtype implies: integer class labels take the
    cross-entropy on logits (``"cross_entropy"``), float targets the squared loss ½‖u − t‖²
    (``"squared"``, ``t`` reshaped to the output's shape)."""
    kind = loss_kind or ("squared" if y.dtype.is_floating_point else "cross_entropy")
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss_kind must be one of {list(LOSS_KINDS)}, got {kind!r}")
    return kind


def mean_loss_of_kind(output: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """L = (1/N) Σ_i ℓ(f_θ(x_i), t_i) of the loss ``kind``."""
    if kind == "cross_entropy":
        return F.cross_entropy(output, y)
    return 0.5 * (output - y.reshape(output.shape)).pow(2).flatten(1).sum(1).mean()


def _hessian_factor(output: torch.Tensor, kind: str) -> torch.Tensor:
    """A_i with A_i A_iᵀ = ∇²_u ℓ(u, t_i) at u = f_θ(x_i), shape (N, K, K): the identity for the squared
    loss; diag(√p) − p √pᵀ with p = softmax(u) for the cross-entropy, whose Hessian diag(p) − p pᵀ it
    factors because Σ p = 1. Neither depends on the targets."""
    u = output.detach().flatten(1)
    if kind == "squared":
        return torch.eye(u.shape[1], dtype=u.dtype, device=u.device).expand(u.shape[0], -1, -1)
    p = torch.softmax(u, dim=1)
    root = p.sqrt()
    return torch.diag_embed(root) - p.unsqueeze(2) * root.unsqueeze(1)


def ggn_diagonal(net, sites, x, y, *, loss_kind=None, chunk: int = GGN_CHUNK) -> dict:
    """The diagonal of the generalised Gauss-Newton G(θ) = (1/N) Σ_i J_iᵀ ∇²_u ℓ(u, t_i) J_i, J_i the
    Jacobian of f_θ(x_i) in θ (paper 001, appendix A, eq. 8), for every site of ``sites``.

    Not the empirical Fisher: with ∇²_u ℓ = A_i A_iᵀ (:func:`_hessian_factor`),
    G_kk = (1/N) Σ_i Σ_c (∂(a_icᵀ f_θ(x_i))/∂θ_k)², a_ic the columns of A_i, held fixed. Each column
    is one backward pass over a chunk of examples to the outputs δ of the modules that own the sites;
    a parameter's per-example gradient then depends only on its module's input a and δ
    (:func:`_squared_gradients`): for a ``Linear`` on flat inputs Σ_i (δ_i a_iᵀ)² = (δ²)ᵀ(a²), a
    product of matrices, as in BackPACK's DiagGGN (Dangel et al., 2020): 0.0066 of the time of
    per-example Jacobians of the whole network on paper 001's MLP (``benchmarks/ggn.py``).

    Args:
        net: the network; its parameters are read, not changed. Each module that owns a site is
            called once per forward, on each example independently (no batch statistics).
        sites: parameter names.
        x, y: the N examples and their targets (``y`` only decides the loss, see :func:`loss_kind_of`).
        loss_kind: ``"cross_entropy"`` or ``"squared"``; by default from ``y``'s dtype.
        chunk: examples per backward pass; memory grows as chunk × (activations + the weights of
            any module other than a ``Linear``, whose per-example gradients are formed).
    """
    kind = loss_kind_of(y, loss_kind)
    owners = {}  # module path -> {parameter name in the module: site}
    for site in sites:
        path, _, name = site.rpartition(".")
        owners.setdefault(path, {})[name] = site
    modules = {path: net.get_submodule(path) for path in owners}
    params = {name: param.detach().requires_grad_() for name, param in net.named_parameters()}
    total = {site: torch.zeros_like(params[site]) for site in sites}
    for batch in torch.split(x, chunk):
        check_stop("while computing saliencies")
        output, captured = _forward_capturing(net, params, batch, modules)
        factor = _hessian_factor(output, kind)
        for column in factor.unbind(2):
            deltas = torch.autograd.grad(
                output,
                [captured[path][1] for path in modules],
                grad_outputs=column.reshape(output.shape),
                retain_graph=True,
            )
            for (path, module), delta in zip(modules.items(), deltas):
                for name, value in _squared_gradients(module, owners[path], captured[path][0], delta).items():
                    total[owners[path][name]] += value
    return {site: value / len(x) for site, value in total.items()}


def _forward_capturing(net, params, batch, modules: dict):
    """``net``'s output on ``batch`` with ``params``, and the input and output of each module of
    ``modules`` (keyed by path), each of which must be called exactly once."""
    captured = {}

    def capture(path):
        def hook(module, inputs, output):
            if path in captured:
                raise ValueError(f"module {path!r} is called more than once per forward: ggn_diagonal needs each once")
            captured[path] = (inputs[0].detach(), output)

        return hook

    handles = [module.register_forward_hook(capture(path)) for path, module in modules.items()]
    try:
        with torch.enable_grad():
            output = functional_call(net, params, (batch,))
    finally:
        for handle in handles:
            handle.remove()
    for path in modules:
        if path not in captured:
            raise ValueError(
                f"module {path!r} is not called in the forward: ggn_diagonal needs each site's module once"
            )
    return output, captured


def _squared_gradients(module, names, inputs, delta) -> dict:
    """Σ_i (∂(δ_iᵀ module(a_i))/∂p)² for the parameters ``names`` of ``module``, a_i = ``inputs[i]`` and
    δ_i = ``delta[i]``: in closed form for a ``Linear`` on flat inputs, else from the per-example
    gradients of the module alone."""
    if isinstance(module, nn.Linear) and inputs.dim() == 2:
        squared = delta.pow(2)
        closed_form = {"weight": lambda: squared.mT @ inputs.pow(2), "bias": lambda: squared.sum(0)}
        return {name: closed_form[name]() for name in names}
    own = {name: module.get_parameter(name).detach() for name in names}

    def per_example(a, d):
        _, pullback = vjp(lambda p: functional_call(module, p, (a.unsqueeze(0),)), own)
        return pullback(d.unsqueeze(0))[0]

    return {name: grad.pow(2).sum(0) for name, grad in vmap(per_example)(inputs, delta).items()}


def loss_gradient(net, sites, x, y, *, loss_kind=None) -> dict:
    """∂L/∂θ at every site of ``sites``, L the mean loss over ``(x, y)`` (:func:`loss_kind_of`)."""
    params = {name: param.detach().requires_grad_(name in sites) for name, param in net.named_parameters()}
    value = mean_loss_of_kind(functional_call(net, params, (x,)), y, loss_kind_of(y, loss_kind))
    return dict(zip(sites, torch.autograd.grad(value, [params[site] for site in sites])))


@register_criterion("magnitude")
def magnitude(net, sites, **_):
    """Magnitude-based pruning (MBP): g_i = |W_i|. Paper 001's MP, s_k = θ_k² (eq. 4), ranks the same."""
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


@register_criterion("obd")
def obd(net, sites, *, x, y, loss_kind=None, **_):
    """Optimal Brain Damage (paper 001, eq. 3): s_k = ½ G_kk θ_k², G the generalised Gauss-Newton
    (:func:`ggn_diagonal`); the gradient term is dropped, as if training had converged."""
    ggn = ggn_diagonal(net, sites, x, y, loss_kind=loss_kind)
    params = dict(net.named_parameters())
    return {site: 0.5 * ggn[site] * params[site].detach() ** 2 for site in sites}


@register_criterion("lm")
def lm(net, sites, *, x, y, loss_kind=None, **_):
    """Linear model (paper 001, eq. 6): s_k = |∂L/∂θ_k θ_k| (SNIP's saliency, on the loss of ``loss_kind``)."""
    grads = loss_gradient(net, sites, x, y, loss_kind=loss_kind)
    params = dict(net.named_parameters())
    return {site: (grads[site] * params[site].detach()).abs() for site in sites}


@register_criterion("qm")
def qm(net, sites, *, x, y, loss_kind=None, **_):
    """Diagonal quadratic model (paper 001, eq. 5): s_k = |−∂L/∂θ_k θ_k + ½ G_kk θ_k²|, OBD with its
    gradient term kept, for networks not at convergence."""
    grads = loss_gradient(net, sites, x, y, loss_kind=loss_kind)
    ggn = ggn_diagonal(net, sites, x, y, loss_kind=loss_kind)
    params = {site: param.detach() for site, param in net.named_parameters()}
    return {site: (-grads[site] * params[site] + 0.5 * ggn[site] * params[site] ** 2).abs() for site in sites}
