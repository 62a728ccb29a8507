"""ProbMask: masks in probability space under one global sparsity budget (paper 002, section 3, Algorithm 1).

Every weight carries a keep-probability s_i ∈ [0, 1], started at 1 (dense). Weights and s are
trained together on the expected loss (problem 2) through ``samples`` = I two-Gumbel relaxed masks
σ((log s − log(1 − s) + g₁ − g₀)/τ) per step (eqs. 3-5), the gradients clipped to a norm of 3 as in
the authors' code; after every step s is projected exactly onto C = {s ∈ [0, 1]ⁿ, Σ s ≤ K}
(Theorem 1, :mod:`.projection`), K = k·n for the whole network (``scope = "global"``) or
k·n_l for each layer (``"layer"``, the comparison of section 4.3). Per epoch t of T the temperature is
τ = 0.97(1 − t/T) + 0.03 and k follows the cubic schedule of eq. 7 from 1 to 1 − ``sparsity``
between epochs t₁ and t₂. At the end masks m ~ Bernoulli(s) are drawn, the one with the lowest
training loss is kept and the sparse network is fine-tuned. ``supermask`` freezes the weights at
their random initialisation (appendix A.2).

The s optimiser is Adam at 6e-3 (Table 4, the paper's only searched hyper-parameter); the weights'
is ``[optim]``. Biases are not masked. The baseline (``baseline = true``) is global magnitude
pruning at the same sparsity of the network trained densely for as many epochs, fine-tuned as long.
"""

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.func import functional_call

from bayesprune.core import distributed
from bayesprune.core.criteria import saliency, weight_sites
from bayesprune.core.gates import StochasticMasks
from bayesprune.core.optim import torch_optimizer
from bayesprune.core.precision import autocast_calls
from bayesprune.core.pruning import Budget, apply_masks, lexicographic_ranks, prune
from bayesprune.core.sites import UNREAD_BY_MASKED_TRAINING
from bayesprune.core.tasks import masked_copy, mean_loss, network_test_metric
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_int, is_number, is_scale, require
from bayesprune.methods import Method, register_method
from bayesprune.methods.base import SparseNetworkFitted
from bayesprune.methods.probmask.projection import project_onto_budget
from bayesprune.methods.probmask.schedules import annealed_temperature, cubic_keep_ratio

SCOPES = ("global", "layer")
#: Training examples the final mask draws are compared on.
SELECTION_EXAMPLES = 10_000


@dataclass(frozen=True)
class ProbMaskOptions:
    """``[probmask]``: budget, schedules and the final mask (paper 002, Algorithm 1, Table 4).

    Training runs ``train.epochs`` = T epochs.

    Attributes:
        sparsity: target fraction of the weights removed (1 − k_f).
        scope: ``"global"`` (one budget for the network) or ``"layer"`` (each layer its own).
        samples: relaxed masks I per step (eq. 5).
        probability_lr: Adam's rate for s (6e-3).
        clip_norm: the gradients of weights and s together are clipped to this norm (3).
        t1, t2: epochs between which k falls from 1 to 1 − ``sparsity`` (eq. 7).
        final_draws: masks drawn from s at the end; the lowest training loss is kept.
        finetune_epochs: fine-tuning of the sparse network.
        supermask: weights frozen at initialisation, only s trained, no fine-tuning (appendix A.2).
        baseline: also run global magnitude pruning + fine-tuning with the same total epochs.
    """

    sparsity: float = 0.99
    scope: str = "global"
    samples: int = 1
    probability_lr: float = 6e-3
    clip_norm: float = 3.0
    t1: int = 16
    t2: int = 60
    final_draws: int = 10
    finetune_epochs: int = 10
    supermask: bool = False
    baseline: bool = True

    def __post_init__(self):
        key = "probmask."
        require(is_number(self.sparsity) and 0 < self.sparsity < 1, key + "sparsity", "lie in (0, 1)", self.sparsity)
        require(self.scope in SCOPES, key + "scope", f"be one of {list(SCOPES)}", self.scope)
        for name in ("probability_lr", "clip_norm"):
            require(
                is_scale(getattr(self, name)),
                key + name,
                f"be a positive number up to {MAX_SCALE:g}",
                getattr(self, name),
            )
        for name in ("samples", "final_draws"):
            require(
                is_count(getattr(self, name)),
                key + name,
                f"be a positive integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        for name in ("t1", "finetune_epochs"):
            require(
                is_count(getattr(self, name), 0),
                key + name,
                f"be a non-negative integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_int(self.t2) and self.t1 < self.t2 <= MAX_COUNT,
            key + "t2",
            f"be an integer above probmask.t1 = {self.t1} up to {MAX_COUNT}",
            self.t2,
        )
        for name in ("supermask", "baseline"):
            require(isinstance(getattr(self, name), bool), key + name, "be true or false", getattr(self, name))


class ProbMaskTraining:
    """Algorithm 1 as a :func:`bayesprune.core.loop.train` step and epoch callback over ``net`` and its masks."""

    def __init__(self, net, options: ProbMaskOptions, optim_config, *, epochs: int, loss):
        self.net, self.options, self.epochs, self.loss = net, options, epochs, loss
        sites = weight_sites(net)
        params = dict(net.named_parameters())
        self.masks = StochasticMasks(
            {site: torch.ones_like(params[site]) for site in sites},
            parameterization="clamp",
            temperature=annealed_temperature(1, epochs),
        )
        self.weight_optimizer = None if options.supermask else torch_optimizer(optim_config, net.parameters())
        self.probability_optimizer = torch.optim.Adam(self.masks.parameters(), lr=options.probability_lr)
        self.keep = cubic_keep_ratio(1, start=options.t1, end=options.t2, final=1 - options.sparsity)

    def state_dict(self) -> dict:
        """The masks, both optimisers and the schedule's place (temperature, keep ratio); the network
        is checkpointed on its own."""
        return {
            "masks": self.masks.state_dict(),
            "temperature": self.masks.temperature,
            "keep": self.keep,
            "probability_optimizer": self.probability_optimizer.state_dict(),
            **({"weight_optimizer": self.weight_optimizer.state_dict()} if self.weight_optimizer else {}),
        }

    def load_state_dict(self, state: dict):
        self.masks.load_state_dict(state["masks"])
        self.masks.temperature, self.keep = state["temperature"], state["keep"]
        self.probability_optimizer.load_state_dict(state["probability_optimizer"])
        if self.weight_optimizer:
            self.weight_optimizer.load_state_dict(state["weight_optimizer"])

    def step(self, x, y, index, num_batches):
        optimizers = [self.probability_optimizer] + ([self.weight_optimizer] if self.weight_optimizer else [])
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        params = {
            name: param if self.weight_optimizer else param.detach() for name, param in self.net.named_parameters()
        }
        forward, total = autocast_calls(functional_call, x.device), 0.0
        for _ in range(self.options.samples):
            value = (
                self.loss(forward(self.net, apply_masks(params, self.masks.relaxed()), (x,)), y) / self.options.samples
            )
            value.backward()
            total = total + value.detach()
        trained = [*self.masks.parameters(), *self.net.parameters()]
        distributed.average_gradients(trained)
        torch.nn.utils.clip_grad_norm_(trained, self.options.clip_norm)
        for optimizer in optimizers:
            optimizer.step()
        self.project()
        return total

    @torch.no_grad()
    def project(self):
        """s ← proj_C(s) with the current budget: one projection of all sites, or one per layer."""
        raw = self.masks.raw
        if self.options.scope == "global":
            raw.copy_(project_onto_budget(raw, self.keep * raw.numel()))
            return
        start = 0
        for shape in self.masks.shapes.values():
            chunk = raw[start : start + shape.numel()]
            chunk.copy_(project_onto_budget(chunk, self.keep * shape.numel()))
            start += shape.numel()

    def on_epoch(self, epoch, history):
        following = epoch + 2  # Algorithm 1 sets τ and k at the start of epoch t = 1, ..., T
        self.masks.temperature = annealed_temperature(min(following, self.epochs), self.epochs)
        self.keep = cubic_keep_ratio(
            following, start=self.options.t1, end=self.options.t2, final=1 - self.options.sparsity
        )


@torch.no_grad()
def best_draw(net, masks: StochasticMasks, x, y, *, draws: int, loss, generator=None) -> dict:
    """The mask m ~ Bernoulli(s) with the lowest loss on ``(x, y)`` among ``draws`` draws (Algorithm 1, line 12)."""
    params = dict(net.named_parameters())
    best, best_loss = None, float("inf")
    for _ in range(draws):
        mask = {site: sample.bool() for site, sample in masks.sample(generator).items()}
        value = float(loss(functional_call(net, apply_masks(params, mask), (x,)), y))
        if value < best_loss:
            best, best_loss = mask, value
    return best


def layer_report(mask: dict, masks: StochasticMasks) -> dict:
    """Remaining ratio per layer (Fig. 3), the share of s within 0.01 of 0 or 1, and the histogram of s (Fig. 5)."""
    s = torch.cat([p.detach().flatten() for p in masks.probabilities().values()])
    return {
        "remaining_ratio_per_layer": {site: float(m.float().mean()) for site, m in mask.items()},
        "share_s_near_binary": float(((s <= 0.01) | (s >= 0.99)).float().mean()),
        "s_histogram": masks.histogram(),
    }


class ProbMaskFitted(SparseNetworkFitted):
    """The fine-tuned sparse network; its scores keep exactly its mask under a budget at its sparsity
    (mask first, then s: the kept weights rank above the removed ones)."""

    method = "probmask"
    score_name = "rank by mask, then keep-probability"


@register_method
class ProbMaskMethod(Method):
    """Probabilistic masking under a global sparsity budget (paper 002)."""

    name = "probmask"
    Options = ProbMaskOptions
    sparsity_option = "sparsity"
    quick = ("probmask.t1=1", "probmask.t2=2", "probmask.finetune_epochs=2")
    summary = "masks in probability space under one global sparsity budget"
    paper = (
        "Zhou, Zhang, Xu, Zhang (2021), "
        "[Effective sparsification of neural networks with global sparsity constraint]"
        "(https://arxiv.org/abs/2105.01571), CVPR"
    )

    unsupported = {
        "validation": "its sparsity budget tightens until epoch t2 and its temperature anneals to the last "
        "epoch (Algorithm 1), so an earlier epoch does not meet the budget",
        **UNREAD_BY_MASKED_TRAINING,
    }

    def one_network(self, table):
        """Without its magnitude baseline (a comparison has its own)."""
        return {**table, "baseline": False}

    def main_stage_scaled(self, table, factor):
        """t1 and t2, the epochs between which k falls (eq. 7), at the same fractions of the shorter (or
        longer) stage: t1 rounded down, t2 rounded and after t1."""
        t1 = math.floor(table.get("t1", ProbMaskOptions.t1) * factor)
        return {**table, "t1": t1, "t2": max(t1 + 1, round(table.get("t2", ProbMaskOptions.t2) * factor))}

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        generator = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
        net = net.to(ctx.device)
        loss = mean_loss(data.task)
        batches = ctx.batches(data.x_train, data.y_train)
        dense = copy.deepcopy(net)
        start = time.perf_counter()
        training = ProbMaskTraining(net, options, ctx.optim, epochs=ctx.epochs, loss=loss)
        history = ctx.train(
            "masks",
            training.step,
            batches,
            epochs=ctx.epochs,
            callbacks=[training],
            state={"net": net, "training": training},
        )
        rows = torch.randperm(data.num_train, generator=torch.Generator().manual_seed(ctx.seed))[:SELECTION_EXAMPLES]
        mask = best_draw(
            net,
            training.masks,
            data.x_train[rows].to(ctx.device),
            data.y_train[rows].to(ctx.device),
            draws=options.final_draws,
            loss=loss,
            generator=generator,
        )
        report = {"test_error_before_finetune": network_test_metric(masked_copy(net, mask), data)}
        finetune_epochs = 0 if options.supermask else options.finetune_epochs
        ctx.train_network("fine-tune", net, batches, epochs=finetune_epochs, loss=loss, mask=mask)
        seconds = time.perf_counter() - start
        removed = sum(int((~m).sum()) for m in mask.values())
        report.update(
            sparsity=removed / sum(m.numel() for m in mask.values()),
            scope=options.scope,
            **layer_report(mask, training.masks),
        )
        if options.baseline and not options.supermask:
            report["magnitude_test_error"] = _magnitude_baseline(dense, options, batches, data, loss, ctx)
        keep = training.masks.probabilities()
        ranks = lexicographic_ranks({site: m.double() for site, m in mask.items()}, keep)
        return ProbMaskFitted(net, ranks, keep=keep, history=history, seconds=seconds, report=report, task=data.task)

    def restore(self, net, data, options, ctx, state):
        return ProbMaskFitted.restore(net, state, task=data.task)

    def inference_data(self, fits, data, *, seed):
        """s after training: q(m) = Bernoulli(s) of every weight (paper 002, eq. 6)."""
        return ProbMaskFitted.inference_data(fits, seed=seed)

    def report_sections(self, run_dir, metrics):
        """Remaining ratio per layer (paper 002, Fig. 3) and the histogram of s (Fig. 5)."""
        from bayesprune.analysis.plots import plot_keep_probabilities
        from bayesprune.methods.probmask.plots import plot_remaining_ratio

        if "remaining_ratio_per_layer" not in metrics:
            return []
        plot_remaining_ratio(metrics["remaining_ratio_per_layer"], Path(run_dir) / "remaining_ratio.png")
        plot_keep_probabilities({"s after training": metrics["s_histogram"]}, Path(run_dir) / "keep_probabilities.png")
        baseline = metrics.get("magnitude_test_error")
        return [
            f"## ProbMask (paper 002)\n\n{metrics['scope']} budget, sparsity {100 * metrics['sparsity']:.2f}% of the weights, "
            f"test error {metrics['test_error_before_finetune']:.2f}% before fine-tuning"
            + ("" if baseline is None else f"; global magnitude pruning with the same epochs: {baseline:.2f}%")
            + f". {100 * metrics['share_s_near_binary']:.1f}% of s end within 0.01 of 0 or 1.",
            "![remaining ratio per layer](remaining_ratio.png)",
            "![histogram of s](keep_probabilities.png)",
        ]


def _magnitude_baseline(dense, options, batches, data, loss, ctx) -> float:
    """Global magnitude pruning at ``options.sparsity`` of the network trained densely for ``train.epochs``,
    then fine-tuned for ``finetune_epochs``: ProbMask's total epochs."""
    ctx.train_network("magnitude baseline: dense", dense, batches, epochs=ctx.epochs, loss=loss)
    mask = prune(saliency("magnitude", dense), Budget(fraction=options.sparsity))
    ctx.train_network(
        "magnitude baseline: fine-tune", dense, batches, epochs=options.finetune_epochs, loss=loss, mask=mask
    )
    return network_test_metric(dense, data)
