"""Probabilistic fine-tuning's :class:`~bayesprune.methods.base.Method`: the grid of one-shot masks, each
fine-tuned by PFT."""

import copy
from pathlib import Path

import torch

from bayesprune.core.criteria import saliency
from bayesprune.core.gates import StochasticMasks, block_isotropic, isotropic
from bayesprune.core.loop import History
from bayesprune.core.pruning import Budget, prune
from bayesprune.core.sites import UNREAD_BY_MASKED_TRAINING
from bayesprune.core.tasks import mean_loss, network_test_metric
from bayesprune.methods import Method, register_method
from bayesprune.methods.pft.fitted import Pair, PFTFitted
from bayesprune.methods.pft.options import PFTOptions
from bayesprune.methods.pft.training import mask_overlap, perturbation_increase, train_masks, weight_rms


@register_method
class PFTMethod(Method):
    """Probabilistic fine-tuning of one-shot pruning masks (paper 000, section 2.1)."""

    name = "pft"
    Options = PFTOptions
    sparsity_option = "sparsities"
    quick = ("pft.pretrain_epochs=2", "pft.finetune_epochs=2", "pft.perturbation_draws=1")
    summary = "probabilistic fine-tuning of a one-shot mask (magnitude, SNIP, random)"
    paper = (
        "Hayou, He, Dziugaite (2021), "
        "[Probabilistic fine-tuning of pruning masks and PAC-Bayes self-bounded learning]"
        "(https://arxiv.org/abs/2110.11804)"
    )

    unsupported = dict(UNREAD_BY_MASKED_TRAINING)

    def unsupported_for(self, options) -> dict:
        if options.at_initialization or options.masks_only or not options.pretrain_epochs:
            return {
                **self.unsupported,
                "validation": "early stopping acts on the dense pre-training, which this config skips",
            }
        return dict(self.unsupported)

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        generator = torch.Generator().manual_seed(ctx.seed)
        net = net.to(ctx.device)
        loss = mean_loss(data.task)
        batches = ctx.batches(data.x_train, data.y_train)
        history = History()
        if options.pretrain_epochs and not (options.at_initialization or options.masks_only):
            history = ctx.train_network(
                "pretrain", net, batches, epochs=options.pretrain_epochs, loss=loss, validate=True
            )
        rows = torch.randperm(data.num_train, generator=generator)[: options.saliency_examples]
        x_saliency, y_saliency = data.x_train[rows].to(ctx.device), data.y_train[rows].to(ctx.device)
        grid, results, first = [], [], None
        for criterion in options.start_masks:
            scores = saliency(criterion, net, x=x_saliency, y=y_saliency, loss=loss, generator=generator)
            for sparsity in options.sparsities:
                pair = self._pair(net, scores, criterion, sparsity, batches, data, options, ctx)
                grid.append([criterion, sparsity])
                results.append(pair.numbers)
                if first is None:
                    first = pair
                    history = History(
                        history.step_losses + pair.history.step_losses, history.epoch_losses + pair.history.epoch_losses
                    )
        tuned, ranks, masks = first.net, first.ranks, first.masks
        report = {"grid": grid, **{key: [row[key] for row in results] for key in results[0]}}
        report["keep_probability_histogram"] = masks.histogram()
        report["perturbation_scales"] = list(options.perturbation_scales)
        noise = {
            "rms": weight_rms(net),
            "scales": options.perturbation_scales,
            "draws": options.perturbation_draws,
            "generator": generator,
        }
        report["perturbation_increase_dense"] = perturbation_increase(net, data, **noise)
        report["perturbation_increase_pft"] = perturbation_increase(tuned, data, **noise)
        return PFTFitted(
            tuned, ranks, keep=masks.probabilities(), history=history, report=report, task=data.task, ctx=ctx
        )

    @staticmethod
    def _pair(net, scores: dict, criterion: str, sparsity: float, batches, data, options, ctx) -> "Pair":
        """OSP and PFT from one criterion's ``scores`` at one sparsity, both fine-tuned for the same epochs."""
        loss = mean_loss(data.task)
        label = f"{criterion} {sparsity:g}"
        finetune_epochs = 0 if options.masks_only else options.finetune_epochs
        start_mask = prune(scores, Budget(sparsity=sparsity))
        osp = copy.deepcopy(net)
        ctx.train_network(
            f"one-shot fine-tune {label}", osp, batches, epochs=finetune_epochs, loss=loss, mask=start_mask
        )
        osp_test_error = network_test_metric(osp, data)
        if options.equal_budget_baseline and not options.masks_only:
            ctx.train_network(
                f"one-shot equal budget {label}", osp, batches, epochs=ctx.epochs, loss=loss, mask=start_mask
            )
        init = (
            block_isotropic(scores, sparsity, options.epsilon)
            if options.init == "block"
            else isotropic(scores, sparsity)
        )
        masks = StochasticMasks(init, parameterization=options.parameterization, temperature=options.temperature).to(
            ctx.device
        )
        tuned = copy.deepcopy(net)
        mask_history = train_masks(
            ctx,
            f"masks {label}",
            tuned,
            masks,
            batches,
            epochs=ctx.epochs,
            loss=loss,
            weights=not options.masks_only,
            mask_lr=options.mask_lr,
        )
        params = dict(tuned.named_parameters())
        ranks = masks.ranks({site: params[site].abs() for site in masks.sites})
        end_mask = prune(ranks, Budget(sparsity=sparsity))
        finetune_history = ctx.train_network(
            f"fine-tune {label}", tuned, batches, epochs=finetune_epochs, loss=loss, mask=end_mask
        )
        numbers = {
            "osp_test_error": osp_test_error,
            "pft_test_error": network_test_metric(tuned, data),
            "mask_overlap": mask_overlap(start_mask, end_mask),
            "pft_expected_sparsity": masks.expected_sparsity(),
        }
        if options.equal_budget_baseline and not options.masks_only:
            numbers["osp_equal_epochs_test_error"] = network_test_metric(osp, data)
        history = History(
            mask_history.step_losses + finetune_history.step_losses,
            mask_history.epoch_losses + finetune_history.epoch_losses,
        )
        return Pair(numbers, tuned, masks, ranks, history)

    def restore(self, net, data, options, ctx, state):
        return PFTFitted.restore(net, state, task=data.task, ctx=ctx)

    def inference_data(self, fits, data, *, seed):
        """λ of the first (start mask, sparsity) pair: q(b) = Bernoulli(λ) of every weight."""
        return PFTFitted.inference_data(fits, seed=seed)

    def report_sections(self, run_dir, metrics):
        """OSP against PFT per start mask and sparsity (Fig. 1), mask overlap (Fig. 2 left), noise
        robustness (Fig. 2 right) and the histogram of λ (Fig. 11)."""
        from bayesprune.methods.pft.plots import pft_table, plot_pft

        if "grid" not in metrics:
            return []
        plot_pft(metrics, Path(run_dir))
        return [
            "## Probabilistic fine-tuning (paper 000)\n\n" + pft_table(metrics),
            "![mask overlap against sparsity](mask_overlap.png)",
            "![test error increase under weight noise](perturbation.png)",
            "![histogram of keep-probabilities](keep_probabilities.png)",
        ]
