"""Fits of the sBNN from several seeds trained together as one stacked model (issue 51, item 1).

Each fit is the one :func:`~bayesprune.methods.sbnn.fit.fit_posterior` makes: its model and guide are
built the same way, and the stack holds every fit's m and ρ (and point estimates) with a leading fit
dimension. A step of the stack is a step of each fit's objective (eqs. 3.6-3.7 with the minibatch
penalty of eq. 4.2 or 4.3): the draw W = m + σ ε and the KL of every site from one network-wide
kernel (:func:`~bayesprune.core.fused.drawn_kl`), ε each fit's own ``torch.randn`` over its flat weights
as its separate fit draws it (:class:`~bayesprune.core.batched.FitGenerators`), the network evaluated
for all fits at once (:class:`~bayesprune.core.batched.StackedNetworks`). Where that does not hold
(several starts, a learned noise scale, priors not shared by every site, local reparameterisation
of a network other than a plain MLP) the fits run one after another. Under local reparameterisation
(``sbnn.local_reparameterization``) each ``Linear`` layer's pre-activations are drawn as
:class:`~bayesprune.core.reparameterization.LocalReparameterization` draws them, after the guide's
draw of W that its separate fit makes too.
"""

import pyro
import torch
from torch import nn

from bayesprune.core.batched import FitGenerators, Stack, StackedNetworks, plain_layers
from bayesprune.core.distributions import _second_moment_and_logits, _spike_slab_kl_terms
from bayesprune.core.fused import drawn_kl, run_kernel, softplus
from bayesprune.core.optim import torch_optim_and_args, torch_scheduler
from bayesprune.core.penalties import PENALTIES
from bayesprune.core.precision import autocast_calls, full_precision
from bayesprune.core.predict import evaluating
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.context import train_stack_together
from bayesprune.methods.sbnn.fit import build_model, initial_means, site_prior, trained_fit


def fits_stacked(models: list, guides: list, options) -> bool:
    """Whether these fits' objective is the one the stack computes (else they run one at a time)."""
    learned = any(True for _ in models[0].likelihood.parameters())  # a noise scale fitted with the posterior
    return (
        list(options.starts) == [1]
        and options.objective == "analytic-kl"
        and (not options.local_reparameterization or plain_layers(models[0].net) is not None)
        and not learned
        and all(guide._shared_constants(model.site_priors(guide.loc.device)) for model, guide in zip(models, guides))
    )


def build_fits(nets: list, datasets: list, options, contexts: list) -> tuple:
    """Each fit's model and guide as :func:`~bayesprune.methods.sbnn.fit.fit_posterior` builds them, from
    :func:`~bayesprune.methods.sbnn.fit.initial_means` of its network."""
    models, guides = [], []
    for net, data, ctx in zip(nets, datasets, contexts):
        pyro.clear_param_store()
        net = initial_means(net, options, ctx.sites(net))
        model = build_model(
            net.to(ctx.device), data, site_prior(net, options, ctx), noise_scale=ctx.noise_scale, sites=ctx.sites(net)
        ).to(ctx.device)
        models.append(model)
        guides.append(SpikeSlabGuide(model, init_scale=options.init_scale).to(ctx.device))
    return models, guides


def trained_params(model, guide) -> dict:
    """The tensors SVI trains (all unconstrained reals): the guide's m and ρ, the model's point estimates."""
    return {
        **{f"guide.{name}": param for name, param in guide.named_parameters()},
        **{f"point.{name}": param for name, param in model.point.named_parameters()},
    }


def fit_together(nets: list, datasets: list, options, contexts: list, stage: str = "svi") -> list | None:
    """:func:`~bayesprune.methods.sbnn.fit.fit_posterior` of every fit from its network's
    :func:`~bayesprune.methods.sbnn.fit.initial_means`, trained together in ``stage``; ``None`` where the stack
    does not compute these fits' objective (:func:`fits_stacked`)."""
    models, guides = build_fits(nets, datasets, options, contexts)
    if not fits_stacked(models, guides, options):
        return None
    first, model, guide = contexts[0], models[0], guides[0]
    stack = Stack(
        {
            name: torch.stack([trained_params(*pair)[name].detach() for pair in zip(models, guides)]).requires_grad_()
            for name in trained_params(model, guide)
        }
    )
    network = StackedNetworks([m.net for m in models])
    step = _Objective(stack, network, model, guide, options, FitGenerators([c.seed for c in contexts], first.device))
    optim, args = torch_optim_and_args(first.optim)
    optimizer = optim(list(stack.params.values()), **args)
    batches = [ctx.batches(data.x_train, data.y_train) for ctx, data in zip(contexts, datasets)]
    histories = train_stack_together(
        contexts,
        stage,
        stack,
        batches,
        losses=step.losses,
        predict=step.predict,
        optimizer=optimizer,
        scheduler=torch_scheduler(first.optim, optimizer, epochs=first.epochs),
        generators=step.generators,
    )
    fits = []
    for k, (model, guide, ctx, history) in enumerate(zip(models, guides, contexts, histories)):
        with torch.no_grad():
            for name, param in trained_params(model, guide).items():
                param.copy_(stack.params[name][k])
        fits.append(trained_fit(model, guide, history, options, ctx))
    pyro.clear_param_store()  # no fit's parameters left for another's guide to read by name
    return fits


class _Objective:
    """The sBNN's minibatch objective of K fits (``losses``) and their posterior-mean predictions
    (``predict``, the separate fit's validation), over the parameters of ``stack``."""

    def __init__(self, stack, network, model, guide, options, generators):
        self.stack, self.network, self.likelihood = stack, network, model.likelihood
        self.generators, self.particles = generators, options.num_particles
        self.penalty = PENALTIES[options.penalty]()
        self.shapes = dict(guide.site_shapes)
        self.sizes = [shape.numel() for shape in self.shapes.values()]
        self.points = [name for name in stack.params if name.startswith("point.")]
        self.point_names = model.point.names
        (self.constants, _) = guide._shared_constants(model.site_priors(guide.loc.device))
        self.net, self.local = model.net, options.local_reparameterization

    def _params(self, flat: torch.Tensor) -> dict:
        """Every parameter of the networks, ``[K, ...]``: the sites from a flat ``[K, weights]`` tensor."""
        count = flat.shape[0]
        sites = {
            name: chunk.reshape(count, *shape)
            for (name, shape), chunk in zip(self.shapes.items(), flat.split(self.sizes, -1))
        }
        points = {
            name: self.stack.params[f"point.p{index}_unconstrained"] for index, name in enumerate(self.point_names)
        }
        return {**sites, **points}

    def losses(self, x, y, index, num_batches):
        """Each fit's loss on its minibatch: (N/B)·(−log p(y | x, W)) + weight·KL (paper 003, eqs. 4.2-4.3),
        averaged over ``num_particles`` draws, as :class:`~bayesprune.core.objectives.AnalyticKLELBO` scores it."""
        loc, rho = self.stack.params["guide.loc_unconstrained"], self.stack.params["guide.rho_unconstrained"]
        weight, c = self.penalty.weight(index, num_batches), self.constants
        nll = kl = 0.0
        for _ in range(self.particles):
            scale = softplus(rho)
            with torch.no_grad():
                moment, logits = run_kernel(
                    _second_moment_and_logits, loc, scale, quadratic=c.logit_quadratic, offset=c.logit_offset
                )
            noise = self.generators.randn(loc.shape[1:], dtype=loc.dtype)
            weights, site_kl = drawn_kl(
                _spike_slab_kl_terms,
                self.sizes,
                loc,
                scale,
                moment,
                logits,
                noise=noise,
                log_slab=c.log_slab,
                slab_quadratic=c.slab_quadratic,
                log_spike=c.log_spike,
                spike_quadratic=c.spike_quadratic,
            )
            if self.local:
                output = autocast_calls(self._sampled, x.device)(self._params(loc), self._params(scale * scale), x)
            else:
                output = autocast_calls(self.network.forward, x.device)(self._params(weights), x)
            log_prob = self.likelihood.distribution(full_precision(output)).log_prob(y)
            nll = nll - (log_prob * (self.likelihood.dataset_size / y.shape[1])).sum(-1)
            kl = kl + (site_kl.sum(-1) if weight == 1.0 else (site_kl * weight).sum(-1))
        return nll / self.particles + kl / self.particles

    def _sampled(self, means: dict, variances: dict, x: torch.Tensor) -> torch.Tensor:
        """The MLP's output with every ``Linear`` layer's pre-activations drawn (local reparameterisation):
        mean x mᵀ + m_b, variance x² σ²ᵀ + σ_b² (a point-estimated bias: no variance), each fit's noise
        from its own generator."""
        for name, module in self.network.layers:
            if isinstance(module, nn.Flatten):
                x = x.flatten(2)
            elif isinstance(module, nn.Linear) and f"{name}.weight" not in self.shapes:  # no prior: as given
                x = _linear(x, means[f"{name}.weight"], means.get(f"{name}.bias"))
            elif isinstance(module, nn.Linear):
                weight, bias = f"{name}.weight", f"{name}.bias"
                mean = _linear(x, means[weight], means.get(bias))
                variance = _linear(x * x, variances[weight], variances.get(bias) if bias in self.shapes else None)
                x = mean + variance.clamp_min(1e-16).sqrt() * self.generators.randn(mean.shape[1:], dtype=mean.dtype)
            else:  # elementwise
                x = module(x)
        return x

    @torch.no_grad()
    def predict(self, x):
        """Each fit's predictive mean at its posterior mean W = m (the separate fit's validation)."""
        with evaluating(self.net):
            output = self.network.forward(self._params(self.stack.params["guide.loc_unconstrained"]), x)
        return self.likelihood.mean(output)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` of K fits at once: ``x`` ``[K, B, in]``, ``weight`` ``[K, out, in]``, ``bias`` ``[K, out]``."""
    weight = weight.transpose(1, 2)
    return torch.bmm(x, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight)
