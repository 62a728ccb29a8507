"""Pruning criteria MP, OBD, LM, QM (and SNIP, random) with multi-stage schedules and the step-size penalty
(paper 001, sections 3-6, Algorithm 1, appendix B).

The dense network is trained first (``train.epochs``, SGD with momentum and weight decay in the
paper). Then, for every criterion × number of stages π × penalty λ, the trained network is pruned in
π stages to ``sparsity`` without any weight update between the stages (Algorithm 1 without its
fine-tuning), the saliencies being re-estimated at every stage on ``examples_per_stage`` training
examples drawn at random (:func:`prune_in_stages`). Each grid point records

* ΔL(θ, Δθ) = |L(θ ⊙ m) − L(θ)| (eq. 1, the quantity the criteria minimise) of the dense trained
  network θ, L the mean loss the loss-model criteria model (cross-entropy on logits; ½‖u − t‖² for
  regression, :func:`bayesprune.methods.saliency.stages.loss_change`) on a fixed random subset of
  ``loss_examples`` training examples, drawn once from the run's seed (all of them if fewer);
* the error of the test split before pruning, right after pruning, and after fine-tuning the sparse
  network for ``finetune_epochs`` with the mask fixed (pruned weights stay exactly zero). With
  ``data.validation = true`` (MNIST) the test split is the last 10,000 training images, the paper's
  validation set (appendix B.1), so these are *validation* errors, as in the paper's tables.

Every grid point starts from the same trained network and draws its stage examples from the same
seed, so points differ only by criterion, π and λ (common random numbers). Fine-tuning every grid
point is expensive: ``finetune = "best"`` fine-tunes only the point of lowest ΔL over λ for each
criterion and π, ``"all"`` every point (needed for Spearman's ρ of section 6.1, Fig. 3). Two grid
points with the same mask (magnitude pruning is invariant to λ and π) share one fine-tuning: it
starts from the same weights and sees the same minibatches, so it would give the same network.

The run's network is the fine-tuned network of the first criterion's best point (lowest ΔL at the
largest π, the paper's Tables 1-3 report the best λ at π = 140); its scores rank the weights by the
stage at which they were pruned and, within a stage, by their saliency at that stage, so a budget
at ``sparsity`` keeps exactly its mask.
"""

import copy
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bayesprune.core.criteria import CRITERIA, weight_sites
from bayesprune.core.loop import History
from bayesprune.core.pruning import lexicographic_ranks
from bayesprune.core.sites import UNREAD_BY_MASKED_TRAINING
from bayesprune.core.statistics import spearman
from bayesprune.core.tasks import masked_copy, mean_loss, network_test_metric
from bayesprune.core.validation import MAX_COUNT, is_count, is_number, require
from bayesprune.methods import Method, register_method
from bayesprune.methods.base import SparseNetworkFitted
from bayesprune.methods.saliency.schedules import SPARSITY_SCHEDULES
from bayesprune.methods.saliency.stages import loss_change, pruning_stages

FINETUNE_MODES = ("best", "all")


@dataclass(frozen=True)
class SaliencyOptions:
    """``[saliency]``: the grid of criteria, stages and penalties, and the training around it (paper 001,
    appendix B: MLP on MNIST).

    Every training phase uses ``[optim]`` (SGD at 0.01 with momentum 0.9 in the paper; its ``schedule``
    is applied per epoch; its ``weight_decay`` is the paper's l2 of 5e-4) and ``data.batch_size`` (100).

    Attributes:
        criteria: criteria of :data:`bayesprune.core.criteria.CRITERIA` (``magnitude`` = MP, ``obd``, ``lm``,
            ``qm``; also ``snip``, ``random``).
        sparsity: κ, the fraction of the weights removed (biases are never pruned); 0.9885 for the MLP.
        stages: the numbers of pruning stages π to compare (the paper's tables use π = 140).
        penalties: the step-size penalties λ ≥ 0 to compare (λ/2 · θ_k² added to every saliency,
            section 3.2). The default 0 and 1e-3 … 10 by decades spans Fig. 1's range: λ = 0 is the
            criterion as published, λ = 10 already ranks nearly like MP on a trained MLP (and appendix
            B's ImageNet grid is {0, 1e-3, 1e-1, 10}).
        schedule: ``"exponential"`` (κ_i = 1 − (1 − κ)^{i/π}, the paper's choice) or ``"linear"``
            (:func:`bayesprune.methods.saliency.schedules.sparsity_schedule`).
        examples_per_stage: training examples drawn at random at every stage for the saliencies (1000).
        loss_examples: training examples (a fixed random subset, drawn once) on which ΔL is measured;
            all of the training set when it has fewer.
        finetune_epochs: fine-tuning of each pruned network, mask fixed (the paper: the same as training).
        finetune: ``"best"`` fine-tunes the point of lowest ΔL over λ for each criterion and π;
            ``"all"`` fine-tunes every grid point (Spearman's ρ needs it).
    """

    criteria: tuple = ("magnitude", "obd", "lm", "qm")
    sparsity: float = 0.9885
    stages: tuple = (1, 140)
    penalties: tuple = (0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    schedule: str = "exponential"
    examples_per_stage: int = 1000
    loss_examples: int = 10_000
    finetune_epochs: int = 400
    finetune: str = "best"

    def __post_init__(self):
        key = "saliency."
        for name in ("criteria", "stages", "penalties"):
            require(isinstance(getattr(self, name), (list, tuple)), key + name, "be a list", getattr(self, name))
            object.__setattr__(self, name, tuple(getattr(self, name)))
        require(
            len(self.criteria) > 0
            and all(isinstance(c, str) and c in CRITERIA for c in self.criteria)
            and len(set(self.criteria)) == len(self.criteria),
            key + "criteria",
            f"be a non-empty list of distinct names of {sorted(CRITERIA)}",
            list(self.criteria),
        )
        require(is_number(self.sparsity) and 0 < self.sparsity < 1, key + "sparsity", "lie in (0, 1)", self.sparsity)
        require(
            len(self.stages) > 0
            and all(is_count(p) for p in self.stages)
            and len(set(self.stages)) == len(self.stages),
            key + "stages",
            f"be a non-empty list of distinct positive integers up to {MAX_COUNT}",
            list(self.stages),
        )
        require(
            len(self.penalties) > 0
            and all(is_number(p) and p >= 0 for p in self.penalties)
            and len(set(self.penalties)) == len(self.penalties),
            key + "penalties",
            "be a non-empty list of distinct non-negative numbers",
            list(self.penalties),
        )
        object.__setattr__(self, "penalties", tuple(float(p) for p in self.penalties))
        require(
            self.schedule in SPARSITY_SCHEDULES,
            key + "schedule",
            f"be one of {list(SPARSITY_SCHEDULES)}",
            self.schedule,
        )
        for name in ("examples_per_stage", "loss_examples"):
            require(
                is_count(getattr(self, name)),
                key + name,
                f"be a positive integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_count(self.finetune_epochs, 0),
            key + "finetune_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.finetune_epochs,
        )
        require(self.finetune in FINETUNE_MODES, key + "finetune", f"be one of {list(FINETUNE_MODES)}", self.finetune)


def prune_in_stages(net, criterion: str, sparsity: float, *, stages: int, **options) -> tuple:
    """Algorithm 1 of paper 001 without fine-tuning (:func:`.stages.pruning_stages`, same
    arguments): the mask after π = ``stages`` stages, and scores that rank the weights in the order
    they were pruned.

    Returns:
        ``(masks, ranks)``: boolean masks of the weight sites (``floor(κ·D)`` removed), and float64
        ranks 0 … D − 1 without ties ordering the weights by the stage that pruned them (kept weights
        last) and, within a stage, by their saliency at that stage (the last stage's for the kept
        weights), ties by position; a budget at ``sparsity`` over the ranks keeps exactly ``masks``.
    """
    masks = {site: torch.ones_like(net.get_parameter(site), dtype=torch.bool) for site in weight_sites(net)}
    stage_of = {
        site: torch.full(mask.shape, math.inf, dtype=torch.float64, device=mask.device) for site, mask in masks.items()
    }
    value_at = {site: torch.zeros(mask.shape, dtype=torch.float64, device=mask.device) for site, mask in masks.items()}
    for stage, (_, new, scores) in enumerate(
        pruning_stages(net, criterion, sparsity, stages=stages, **options), start=1
    ):
        for site in masks:
            dropped = masks[site] & ~new[site]
            stage_of[site][dropped] = stage
            value_at[site][dropped] = scores[site][dropped]
        masks = new
    for site, mask in masks.items():
        value_at[site][mask] = scores[site][mask]
        stage_of[site][mask] = stages + 1
    return masks, lexicographic_ranks(stage_of, value_at)


def spearman_or_none(a, b):
    """Spearman's rank correlation (:func:`bayesprune.core.statistics.spearman`, ties at their average rank);
    ``None`` with fewer than three pairs, a non-finite value, or a constant sequence (undefined)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 3 or a.size != b.size or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    rho = spearman(a, b)
    return None if math.isnan(rho) else rho


def _mask_key(masks: dict) -> str:
    digest = hashlib.sha256()
    for site, mask in masks.items():
        digest.update(site.encode())
        digest.update(mask.cpu().numpy().tobytes())
    return digest.hexdigest()


def _order_key(value: float):
    """Sort key of a ΔL: a non-finite value (a diverged pruning) is worse than any number."""
    return (0, value) if math.isfinite(value) else (1, 0.0)


@dataclass
class GridPoint:
    """One criterion × π × λ: its mask, ranks, and numbers (``error_after_finetune`` is ``None`` until
    fine-tuned)."""

    criterion: str
    stages: int
    penalty: float
    masks: dict
    ranks: dict
    delta_loss: float
    error_after_pruning: float
    error_after_finetune: float | None = None


class SaliencyFitted(SparseNetworkFitted):
    """The fine-tuned sparse network of the first criterion's best grid point; its scores rank the weights
    by the stage that pruned them and their saliency there, so a budget at ``sparsity`` keeps exactly its
    mask.

    A fit (not a restored run) also holds, in memory only, ``dense`` (the trained network before
    pruning), ``points`` (every :class:`GridPoint`, masks included, in ``grid`` order) and
    ``loss_rows`` (the training rows ΔL is measured on).
    """

    method = "saliency"
    score_name = "pruning-order rank"

    def __init__(self, net, ranks: dict, *, dense=None, points=(), loss_rows=None, **kwargs):
        super().__init__(net, ranks, **kwargs)
        self.dense, self.points, self.loss_rows = dense, list(points), loss_rows


@register_method
class SaliencyMethod(Method):
    """Multi-stage pruning with loss-model criteria and a step-size penalty, then fine-tuning (paper 001)."""

    name = "saliency"
    Options = SaliencyOptions
    sparsity_option = "sparsity"
    quick = ("saliency.finetune_epochs=2", "saliency.stages=[1, 3]")
    summary = "one-shot and multi-stage criteria MP, OBD, LM, QM, SNIP with a step-size penalty"
    paper = (
        "Laurent, Ballas, George, Ballas, Vincent (2020), "
        "[Revisiting loss modelling for unstructured pruning](https://arxiv.org/abs/2006.12279)"
    )
    unsupported = dict(UNREAD_BY_MASKED_TRAINING)

    def one_network(self, table):
        """The grid of the network its row reports: the first criterion at the most stages, its best
        penalty alone fine-tuned (``finetune = "best"``)."""
        criteria, stages = table.get("criteria", SaliencyOptions.criteria), table.get("stages", SaliencyOptions.stages)
        return {**table, "criteria": list(criteria)[:1], "stages": [max(stages)], "finetune": "best"}

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        net = net.to(ctx.device)
        loss = mean_loss(data.task)
        x_train, y_train = data.x_train.to(ctx.device), data.y_train.to(ctx.device)
        start = time.perf_counter()
        history = ctx.train_network(
            "dense", net, ctx.batches(x_train, y_train), epochs=ctx.epochs, loss=loss, validate=True
        )
        net.eval()
        error_before = network_test_metric(net, data)
        loss_rows = torch.randperm(data.num_train, generator=torch.Generator().manual_seed(ctx.seed))[
            : options.loss_examples
        ]
        x_loss, y_loss = x_train[loss_rows.to(ctx.device)], y_train[loss_rows.to(ctx.device)]

        points = []
        for criterion in options.criteria:
            for stages in options.stages:
                for penalty in options.penalties:
                    masks, ranks = prune_in_stages(
                        net,
                        criterion,
                        options.sparsity,
                        x=x_train,
                        y=y_train,
                        stages=stages,
                        schedule=options.schedule,
                        penalty=penalty,
                        examples_per_stage=options.examples_per_stage,
                        loss=loss,
                        generator=torch.Generator().manual_seed(ctx.seed + 1),
                    )
                    pruned = masked_copy(net, masks)
                    points.append(
                        GridPoint(
                            criterion,
                            stages,
                            penalty,
                            masks,
                            ranks,
                            loss_change(net, masks, x_loss, y_loss),
                            network_test_metric(pruned, data),
                        )
                    )

        best = {
            criterion: min(
                (p for p in points if p.criterion == criterion and p.stages == max(options.stages)),
                key=lambda p: _order_key(p.delta_loss),
            )
            for criterion in options.criteria
        }
        if options.finetune == "all":
            chosen = points
        else:
            chosen = [
                min((p for p in points if p.criterion == c and p.stages == s), key=lambda p: _order_key(p.delta_loss))
                for c in options.criteria
                for s in options.stages
            ]
        tuned, first = {}, best[options.criteria[0]]
        for point in chosen:
            key = _mask_key(point.masks)
            if key not in tuned:
                sparse = copy.deepcopy(net)
                sparse.train()
                finetune_history = ctx.train_network(
                    f"fine-tune {point.criterion}, {point.stages} stages, penalty {point.penalty:g}",
                    sparse,
                    ctx.batches(x_train, y_train, seed=ctx.seed + 2),
                    epochs=options.finetune_epochs,
                    loss=loss,
                    mask=point.masks,
                )
                sparse.eval()
                tuned[key] = (sparse, finetune_history, network_test_metric(sparse, data))
            point.error_after_finetune = tuned[key][2]
        final, finetune_history, _ = tuned[_mask_key(first.masks)]
        history = History(
            history.step_losses + finetune_history.step_losses, history.epoch_losses + finetune_history.epoch_losses
        )
        seconds = time.perf_counter() - start
        report = _report(points, best, error_before, options)
        net.train()
        return SaliencyFitted(
            copy.deepcopy(final),
            first.ranks,
            dense=net,
            points=points,
            loss_rows=loss_rows.cpu(),
            history=history,
            seconds=seconds,
            report=report,
            task=data.task,
        )

    def restore(self, net, data, options, ctx, state):
        return SaliencyFitted.restore(net, state, task=data.task)

    def report_sections(self, run_dir, metrics):
        """The best point per criterion (Tables 1-3), ΔL against λ for each π (Fig. 1) and the error gap
        after fine-tuning against ΔL (Fig. 3)."""
        from bayesprune.methods.saliency.plots import plot_delta_loss, plot_gap_against_delta_loss, saliency_table

        if "grid" not in metrics or "delta_loss" not in metrics:
            return []
        folder = Path(run_dir)
        plot_delta_loss(metrics, folder / "delta_loss.png")
        plot_gap_against_delta_loss(metrics, folder / "gap_vs_delta_loss.png")
        return [
            "## Pruning criteria (paper 001)\n\n" + saliency_table(metrics),
            "![ΔL against the penalty λ for each number of stages π](delta_loss.png)",
            "![error gap after fine-tuning against ΔL](gap_vs_delta_loss.png)",
        ]


def _report(points: list, best: dict, error_before: float, options) -> dict:
    """``metrics.json``'s numbers of a grid: lists in ``grid`` order, the best point per criterion and
    Spearman's ρ between ΔL and the gap after fine-tuning."""

    def gap(error):
        return None if error is None else error - error_before

    report = {
        "grid": [[p.criterion, p.stages, p.penalty] for p in points],
        "delta_loss": [p.delta_loss for p in points],
        "error_before_pruning": error_before,
        "error_after_pruning": [p.error_after_pruning for p in points],
        "error_after_finetune": [p.error_after_finetune for p in points],
        "gap_before_finetune": [gap(p.error_after_pruning) for p in points],
        "gap_after_finetune": [gap(p.error_after_finetune) for p in points],
    }
    tuned = [p for p in points if p.error_after_finetune is not None]
    report["best"] = {}
    for criterion, point in best.items():
        own = [p for p in tuned if p.criterion == criterion]
        at_largest = [p for p in points if p.criterion == criterion and p.stages == point.stages]
        report["best"][criterion] = {
            "penalty": point.penalty,
            "stages": point.stages,
            "delta_loss": point.delta_loss,
            "gap_before_finetune": gap(point.error_after_pruning),
            "gap_after_finetune": gap(point.error_after_finetune),
            "rho": spearman_or_none([p.delta_loss for p in own], [gap(p.error_after_finetune) for p in own]),
            "lowest_gap_before_finetune": min(gap(p.error_after_pruning) for p in at_largest),
            "lowest_gap_after_finetune": min(gap(p.error_after_finetune) for p in own),
        }
    report["spearman_rho"] = spearman_or_none(
        [p.delta_loss for p in tuned], [gap(p.error_after_finetune) for p in tuned]
    )
    report["finetuned_points"] = len(tuned)
    return report
