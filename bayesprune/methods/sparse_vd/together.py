"""Fits of Sparse VD from several seeds trained together as one stacked model (issue 51, item 1).

Each fit is the one :meth:`SparseVD.fit <bayesprune.methods.sparse_vd.method.SparseVD.fit>` makes: its
pre-training (plain training together, :func:`~bayesprune.methods.context.train_networks_together`,
over the same minibatch streams), then the variational fit of θ, log σ² and the biases of every fit
stacked along a leading fit dimension. A step of the stack is a step of each fit's objective: the
local reparameterisation of every ``Linear`` layer (eq. 17, the weights above the threshold zeroed
under ``train_clip``) as batched matrix products, plus the KL of eq. 14 weighted by the annealing
factor. Each fit draws from its own generator what its separate fit draws, in its order: a draw of
every weight site (the guide's, which the local reparameterisation does not read) and then the noise
of every layer's pre-activations (:class:`~bayesprune.core.batched.FitGenerators`). Networks that are
not a plain MLP (convolutions) run one fit at a time.
"""

import pyro
import torch
from torch import nn

from bayesprune.core.batched import FitGenerators, Stack, StackedNetworks, plain_layers
from bayesprune.core.fused import summed_kl
from bayesprune.core.optim import torch_optim_and_args, torch_scheduler
from bayesprune.core.precision import autocast_calls, full_precision
from bayesprune.core.tasks import mean_loss
from bayesprune.methods.context import train_networks_together, train_stack_together
from bayesprune.methods.sparse_vd.distributions import _additive_normal_kl_terms, log_alpha
from bayesprune.methods.sparse_vd.fit import build_model, build_optimizer
from bayesprune.methods.sparse_vd.fitted import SparseVDFitted
from bayesprune.methods.sparse_vd.model import KLAnnealing, SparseVDGuide, linear_decay


def fits_stacked(net, data, ctx) -> bool:
    """Whether the stack computes these fits' objective: a plain MLP (``Linear`` layers and elementwise
    activations), and a likelihood without parameters of its own (no learned noise scale)."""
    return plain_layers(net) is not None and not (data.task == "regression" and ctx.noise_scale is None)


def fit_together(nets: list, datasets: list, options, contexts: list) -> list | None:
    """Sparse VD's fit of every seed, trained together; ``None`` where :func:`fits_stacked` says no."""
    first = contexts[0]
    if not fits_stacked(nets[0], datasets[0], first):
        return None
    build_optimizer(options, first.optim, epochs=first.epochs)  # its refusals, before any training
    nets = [net.to(first.device) for net in nets]
    batches = [ctx.batches(data.x_train, data.y_train) for ctx, data in zip(contexts, datasets)]
    if options.pretrain_epochs:
        x, y = datasets[0].x_train, datasets[0].y_train  # each fit's rows are its own batches'
        loss = mean_loss(first.task)
        train_networks_together(
            contexts, "pretrain", nets, x, y, epochs=options.pretrain_epochs, loss=loss, batches=batches
        )
    pyro.clear_param_store()
    models = [
        build_model(net, data, noise_scale=first.noise_scale).to(first.device) for net, data in zip(nets, datasets)
    ]
    guides = [SparseVDGuide(model, init_log_sigma2=options.init_log_sigma2).to(first.device) for model in models]
    stack = Stack(
        {
            name: torch.stack([getattr(part, name).detach() for part in parts]).requires_grad_()
            for name, parts in (("theta", guides), ("log_sigma2", guides), ("points", models))
        }
    )
    annealing = KLAnnealing(start=options.kl_anneal_start, end=options.kl_anneal_end)
    generators = FitGenerators([ctx.seed for ctx in contexts], first.device)
    step = _Objective(stack, StackedNetworks(nets), models[0], options, annealing, generators)
    optim, args = torch_optim_and_args(first.optim)
    optimizer = optim(list(stack.params.values()), **args)
    if options.linear_lr_decay:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_decay(first.epochs, options.lr_decay_start))
    else:
        scheduler = torch_scheduler(first.optim, optimizer, epochs=first.epochs)
    histories = train_stack_together(
        contexts,
        "svi",
        stack,
        batches,
        losses=step.losses,
        predict=step.predict,
        optimizer=optimizer,
        scheduler=scheduler,
        on_epoch=[lambda epoch: annealing.on_epoch(epoch, None)],
        generators=step.generators,
    )
    fits = []
    for k, (model, guide, history, ctx) in enumerate(zip(models, guides, histories, contexts)):
        with torch.no_grad():
            for part, name in ((guide, "theta"), (guide, "log_sigma2"), (model, "points")):
                getattr(part, f"{name}_unconstrained").copy_(stack.params[name][k])
        fits.append(
            SparseVDFitted(
                model,
                guide,
                threshold=options.threshold,
                predictive_samples=options.predictive_samples,
                history=history,
                ctx=ctx,
            )
        )
    pyro.clear_param_store()  # no fit's parameters left for another's guide to read by name
    return fits


class _Objective:
    """Sparse VD's minibatch objective of K fits (``losses``) and their test-time networks' predictions
    (``predict``, the separate fit's validation), over the parameters of ``stack``."""

    def __init__(self, stack, network, model, options, annealing, generators):
        self.stack, self.likelihood, self.annealing, self.generators = stack, model.likelihood, annealing, generators
        self.network = network
        self.shapes = dict(model.site_shapes)
        self.sizes = [shape.numel() for shape in self.shapes.values()]
        self.point_shapes = dict(model.point_shapes)
        self.threshold, self.clip = options.threshold, options.train_clip

    def _split(self, flat: torch.Tensor, shapes: dict) -> dict:
        sizes = [shape.numel() for shape in shapes.values()]
        return {
            name: chunk.reshape(len(flat), *shape)
            for (name, shape), chunk in zip(shapes.items(), flat.split(sizes, -1))
        }

    def losses(self, x, y, index, num_batches):
        """Each fit's −ELBO on its minibatch (:class:`~bayesprune.methods.sparse_vd.model.SparseVDELBO`):
        (N/B)·(−log p(y | x, W)) through sampled pre-activations, plus the annealed KL of eq. 14."""
        theta, log_sigma2 = self.stack.params["theta"], self.stack.params["log_sigma2"]
        for shape in self.shapes.values():  # the guide's draws of W, which the pre-activations' draws replace
            self.generators.randn(shape, dtype=theta.dtype)
        mean, variance = theta, log_sigma2.exp()
        if self.clip:
            with torch.no_grad():
                keep = (log_alpha(theta, log_sigma2) <= self.threshold).to(theta.dtype)
            mean, variance = mean * keep, variance * keep
        kl = summed_kl(_additive_normal_kl_terms, self.sizes, theta, log_sigma2).sum(-1)
        params = {**self._split(mean, self.shapes), **self._split(self.stack.params["points"], self.point_shapes)}
        output = autocast_calls(self._sampled, x.device)(params, self._split(variance, self.shapes), x)
        log_prob = self.likelihood.distribution(full_precision(output)).log_prob(y)
        nll = -(log_prob * (self.likelihood.dataset_size / y.shape[1])).sum(-1)
        return nll + self.annealing.weight * kl

    def _sampled(self, params: dict, variances: dict, x: torch.Tensor) -> torch.Tensor:
        """The MLP's output with every ``Linear`` layer's pre-activations drawn: mean x θᵀ + b, variance
        x² σ²ᵀ (eq. 17), each fit's noise from its own generator."""
        for name, module in self.network.layers:
            if isinstance(module, nn.Flatten):
                x = x.flatten(2)
            elif isinstance(module, nn.Linear):
                weight, bias = params[f"{name}.weight"].transpose(1, 2), params.get(f"{name}.bias")
                mean = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight)
                variance = torch.bmm(x * x, variances[f"{name}.weight"].transpose(1, 2))
                x = mean + torch.sqrt(variance + 1e-8) * self.generators.randn(mean.shape[1:], dtype=mean.dtype)
            else:  # elementwise
                x = module(x)
        return x

    @torch.no_grad()
    def predict(self, x):
        """Each fit's predictive mean with θ, the weights of log α above the threshold zeroed."""
        theta, log_sigma2 = self.stack.params["theta"], self.stack.params["log_sigma2"]
        keep = log_alpha(theta, log_sigma2, clip=None) <= self.threshold
        params = {
            **self._split(theta * keep, self.shapes),
            **self._split(self.stack.params["points"], self.point_shapes),
        }
        return self.likelihood.mean(self.network.forward(params, x))
