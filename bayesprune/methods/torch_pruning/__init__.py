"""Torch-Pruning's own structured pruner on the plain network (``method = "torch-pruning"``, table
``[torch-pruning]``): the heuristic a practitioner reaches for, run through the library itself
(:mod:`bayesprune.core.channels`), the baseline of structured (unit-level) pruning.

The fit trains the plain network as the ``magnitude`` method does (the runner's plain-network rule), then
Torch-Pruning's ``BasePruner`` removes the fraction ``sparsity`` of the hidden units (channels) with its
magnitude or Taylor importance (Taylor: from the gradient of the mean training loss over every training row),
from each dependency group alike (``scope = "layer"``) or from the lowest-ranked across groups (``"global"``).
Attention loses whole heads at the same ratio: timm's and ``transformers``' through Torch-Pruning's
``prune_num_heads``, an ``nn.MultiheadAttention``'s (torchvision's ViT), which its pruner cannot split, scored
and chosen as Torch-Pruning does those (:func:`bayesprune.core.channels.head_scores`,
:func:`~bayesprune.core.channels.heads_kept`). The network it returns is physically smaller;
``prune.finetune_epochs`` fine-tunes it (the run's sparsity 0) as the plain network was trained, and its
batch-norm statistics are estimated again (``prune.recalibrate``). Its scores are the smaller network's |w|,
so a further sparsity prunes it by magnitude at unit level. Its report holds the plain network's test metric
as ``plain_<metric>``.
"""

from dataclasses import dataclass

from bayesprune.core.channels import (
    IMPORTANCES,
    SCOPES,
    accumulate_gradients,
    check_prunable,
    prune_channels,
    pruned_to_macs,
)
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.export import count_macs
from bayesprune.core.tasks import mean_loss
from bayesprune.core.validation import one_of, option, optional, unit, validate
from bayesprune.methods import register_method
from bayesprune.methods.base import Method
from bayesprune.methods.magnitude import PLAIN_RULE, PlainFitted, fit_plain_network
from bayesprune.methods.stages import Stage, Staged


@dataclass(frozen=True)
class TorchPruningOptions(Staged):
    """``[torch-pruning]``: what Torch-Pruning removes from the plain network, and how it ranks it.

    Attributes:
        sparsity: the fraction of the hidden units (channels) removed, in (0, 1).
        importance: Torch-Pruning's importance, ``"magnitude"`` (L2 norm of a group's weights) or
            ``"taylor"`` (|w · ∂L/∂w| of the mean training loss).
        scope: ``"layer"``: each dependency group loses ``sparsity`` of its channels (Torch-Pruning's
            uniform ``pruning_ratio``); ``"global"``: the lowest-ranked channels of all groups go.
        held_out: as ``magnitude.held_out``: the fraction of the training rows held out to keep the plain
            network's best epoch when the run holds out none.
        macs: in place of ``sparsity``, the fraction of the plain network's MACs to keep, in (0, 1]: the ratio
            Torch-Pruning prunes at is the one, found by bisection, whose network costs the most MACs at or
            below it (:func:`bayesprune.core.channels.pruned_to_macs`), so that its row stands at the MACs of a
            comparison's ``prune.macs`` rows.
    """

    sparsity: float = option(0.5, unit())
    importance: str = option("magnitude", one_of(IMPORTANCES))
    scope: str = option("layer", one_of(SCOPES))
    held_out: float = option(0.2, unit(open_low=False))
    macs: float | None = option(None, optional(unit(open_high=False)))

    def fit_stages(self, epochs):
        return (
            Stage("plain", "the plain network by maximum likelihood (Adam, the runner's plain-network rule)", epochs),
        )

    def __post_init__(self):
        validate(self, "torch-pruning")


class TorchPruningFitted(PlainFitted):
    """The plain network with Torch-Pruning's channels removed (physically smaller than built)."""

    method = "torch-pruning"


@register_method
class TorchPruningMethod(Method):
    """Torch-Pruning's structured pruner on the plain network, the smaller network fine-tuned."""

    name = "torch-pruning"
    Options = TorchPruningOptions
    prune_levels = ("unit",)
    sparsity_option = "sparsity"
    macs_option = "macs"
    baseline = True
    unsupported = PLAIN_RULE
    summary = "baseline: the plain network's units removed by Torch-Pruning, fine-tuned"
    paper = "Fang et al. (2023), [DepGraph](https://arxiv.org/abs/2301.12900)"

    def check(self, net, data, options):
        """Refuse a network Torch-Pruning cannot trace or without hidden units to remove."""
        try:
            check_prunable(net, tuple(data.input_shape))
        except BayesPruneError as error:
            raise ConfigError(str(error)) from None

    def fit(self, net, data, options, ctx):
        history, plain = fit_plain_network(net, data, ctx, held_out=options.held_out)
        if options.importance == "taylor":
            x, y = data.x_train.to(ctx.device), data.y_train.to(ctx.device)
            accumulate_gradients(net, x, y, mean_loss(data.task), batch_size=ctx.batch_size)
        shape, pruning = tuple(data.input_shape), {"importance": options.importance, "scope": options.scope}
        report = {key.replace("baseline_", "plain_"): value for key, value in plain.items()}
        if options.macs is None:
            prune_channels(net, shape, ratio=options.sparsity, **pruning)
        else:
            dense = count_macs(net, shape)
            net, macs, ratio = pruned_to_macs(net, shape, options.macs * dense, **pruning)
            report.update(plain_macs=dense, macs=macs, ratio=ratio)
        net.zero_grad(set_to_none=True)
        return TorchPruningFitted(net.eval(), history=history, report=report, task=data.task, ctx=ctx)

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return TorchPruningFitted(net, task=data.task, ctx=ctx)
