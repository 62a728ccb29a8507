"""ProbMask's :class:`~bayesprune.methods.base.Method`."""

import copy
from pathlib import Path

import torch

from bayesprune.core.criteria import saliency
from bayesprune.core.pruning import Budget, lexicographic_ranks, prune
from bayesprune.core.sites import UNREAD_BY_MASKED_TRAINING
from bayesprune.core.tasks import masked_copy, mean_loss, network_test_metric
from bayesprune.core.validation import one_of
from bayesprune.methods import Method, register_method
from bayesprune.methods.metrics import FRACTION, NONNEGATIVE, numbers, table_of
from bayesprune.methods.probmask.fitted import ProbMaskFitted
from bayesprune.methods.probmask.options import SCOPES, ProbMaskOptions
from bayesprune.methods.probmask.training import ProbMaskTraining, best_draw, layer_report

#: Training examples the final mask draws are compared on.
SELECTION_EXAMPLES = 10_000


@register_method
class ProbMaskMethod(Method):
    """Probabilistic masking under a global sparsity budget (paper 002)."""

    name = "probmask"
    Options = ProbMaskOptions
    sparsity_option = "sparsity"
    quick = ("probmask.t1=1", "probmask.t2=2", "probmask.finetune_epochs=2")
    metrics_keys = {
        "test_error_before_finetune": NONNEGATIVE,
        "sparsity": FRACTION,
        "scope": one_of(SCOPES),
        "remaining_ratio_per_layer": table_of(FRACTION, "fractions of a layer's weights kept"),
        "share_s_near_binary": FRACTION,
        "s_histogram": numbers(NONNEGATIVE, "counts of weights"),
        "magnitude_test_error": NONNEGATIVE,
    }
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

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        generator = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
        net = net.to(ctx.device)
        loss = mean_loss(data.task)
        batches = ctx.batches(data.x_train, data.y_train)
        dense = copy.deepcopy(net)
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
        return ProbMaskFitted(net, ranks, keep=keep, history=history, report=report, task=data.task, ctx=ctx)

    def restore(self, net, data, options, ctx, state):
        return ProbMaskFitted.restore(net, state, task=data.task, ctx=ctx)

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
    mask = prune(saliency("magnitude", dense), Budget(sparsity=options.sparsity))
    ctx.train_network(
        "magnitude baseline: fine-tune", dense, batches, epochs=options.finetune_epochs, loss=loss, mask=mask
    )
    return network_test_metric(dense, data)
