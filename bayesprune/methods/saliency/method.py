"""The saliency method's :class:`~bayesprune.methods.base.Method`: the grid of criteria and stages, the
best point and its fine-tuning."""

import copy
import hashlib
import math
from pathlib import Path

import torch

from bayesprune.core.loop import History
from bayesprune.core.sites import UNREAD_BY_MASKED_TRAINING
from bayesprune.core.tasks import mean_loss, network_test_metric
from bayesprune.core.validation import Constraint, interval, is_count, is_number, optional
from bayesprune.methods import Method, register_method
from bayesprune.methods.metrics import COUNT, NONNEGATIVE, SOME_NUMBERS, numbers, same_length, table_of
from bayesprune.methods.saliency.fitted import SaliencyFitted
from bayesprune.methods.saliency.grid import grid_points, spearman_or_none
from bayesprune.methods.saliency.options import SaliencyOptions


def _mask_key(masks: dict) -> str:
    digest = hashlib.sha256()
    for site, mask in masks.items():
        digest.update(site.encode())
        digest.update(mask.cpu().numpy().tobytes())
    return digest.hexdigest()


def _order_key(value: float):
    """Sort key of a ΔL: a non-finite value (a diverged pruning) is worse than any number."""
    return (0, value) if math.isfinite(value) else (1, 0.0)


#: The keys of ``metrics.json`` holding one value per grid point (:func:`_report`).
_PER_POINT = ("delta_loss", "error_after_pruning", "error_after_finetune", "gap_before_finetune", "gap_after_finetune")
#: A grid point of ``metrics.json``: ``[criterion, stages π, penalty λ]``.
GRID_POINT = Constraint(
    lambda v: (
        isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and is_count(v[1]) and NONNEGATIVE.accepts(v[2])
    ),
    "be a [criterion, stages, penalty] list",
)
#: A criterion's best point in ``metrics.json`` (``best``): its π, λ, ΔL, gaps and ρ.
BEST_POINT = Constraint(
    lambda v: (
        isinstance(v, dict)
        and is_count(v.get("stages"))
        and NONNEGATIVE.accepts(v.get("penalty"))
        and all(
            k in v and (v[k] is None or is_number(v[k]))
            for k in ("delta_loss", "gap_before_finetune", "gap_after_finetune", "rho")
        )
    ),
    "be a table of stages, penalty, delta_loss, gaps and rho",
)


@register_method
class SaliencyMethod(Method):
    """Multi-stage pruning with loss-model criteria and a step-size penalty, then fine-tuning (paper 001)."""

    name = "saliency"
    Options = SaliencyOptions
    sparsity_option = "sparsity"
    quick = ("saliency.finetune_epochs=2", "saliency.stages=[1, 3]")
    metrics_keys = {
        "grid": numbers(GRID_POINT, "[criterion, stages, penalty] points"),
        **dict.fromkeys(_PER_POINT, SOME_NUMBERS),
        "error_before_pruning": NONNEGATIVE,
        "best": table_of(BEST_POINT, "each criterion's best point"),
        "spearman_rho": optional(interval(-1, 1)),
        "finetuned_points": COUNT,
    }
    metrics_rules = tuple(same_length(key, "grid") for key in _PER_POINT)
    summary = "one-shot and multi-stage criteria MP, OBD, LM, QM, SNIP with a step-size penalty"
    paper = (
        "Laurent, Ballas, George, Ballas, Vincent (2020), "
        "[Revisiting loss modelling for unstructured pruning](https://arxiv.org/abs/2006.12279)"
    )
    unsupported = dict(UNREAD_BY_MASKED_TRAINING)

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        net = net.to(ctx.device)
        loss = mean_loss(data.task)
        x_train, y_train = data.x_train.to(ctx.device), data.y_train.to(ctx.device)
        history = ctx.train_network(
            "dense", net, ctx.batches(x_train, y_train), epochs=ctx.epochs, loss=loss, validate=True
        )
        net.eval()
        error_before = network_test_metric(net, data)
        loss_rows = torch.randperm(data.num_train, generator=torch.Generator().manual_seed(ctx.seed))[
            : options.loss_examples
        ]
        x_loss, y_loss = x_train[loss_rows.to(ctx.device)], y_train[loss_rows.to(ctx.device)]

        points = grid_points(net, data, options, (x_train, y_train), (x_loss, y_loss), loss=loss, seed=ctx.seed)

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
        report = _report(points, best, error_before, options)
        net.train()
        return SaliencyFitted(
            copy.deepcopy(final),
            first.ranks,
            dense=net,
            points=points,
            loss_rows=loss_rows.cpu(),
            history=history,
            report=report,
            task=data.task,
            ctx=ctx,
        )

    def restore(self, net, data, options, ctx, state):
        return SaliencyFitted.restore(net, state, task=data.task, ctx=ctx)

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
