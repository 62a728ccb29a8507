"""Magnitude pruning of the plain network (``method = "magnitude"``, table ``[magnitude]``): the baseline
every method is compared with.

The fit trains the plain network of the run's architecture by the runner's plain-network rule
(:meth:`~bayesprune.methods.FitContext.train_plain`: maximum likelihood with Adam at ``optim.lr``, its
best epoch kept on the run's validation part or on a held-out fraction of the training rows). Its scores
are the weights' magnitudes |w| (float64), so the run's pruning curve is global magnitude pruning at
each sparsity (``prune.scope`` and ``prune.min_keep`` as for any method), and ``prune.finetune_epochs``
fine-tunes each pruned network with its mask fixed (Han et al. 2015's prune-then-retrain, one shot).
Its report holds the plain network's test metric as ``baseline_<metric>``: the fit is that network, so
the packaged configs train no second one (``baseline.enabled = false``).
"""

from dataclasses import dataclass

from torch import nn

from bayesprune.core.tasks import metric_name, network_test_metric
from bayesprune.core.validation import option, unit, validate
from bayesprune.methods import register_method
from bayesprune.methods.base import Method, NetworkFitted
from bayesprune.methods.context import train_plain_together
from bayesprune.methods.stages import Stage, Staged

#: What the plain network's rule does not read, with the reason (:attr:`Method.unsupported`).
PLAIN_RULE = {
    "optim.name": "the plain network is trained with Adam (the runner's plain-network rule)",
    "optim.schedule": "the plain network is trained at the constant rate optim.lr",
    "optim.weight_decay": "the plain network is trained by maximum likelihood alone",
}


@dataclass(frozen=True)
class MagnitudeOptions(Staged):
    """``[magnitude]``: how the plain network keeps its best epoch.

    Attributes:
        held_out: the fraction of the training rows held out to keep the plain network's best epoch when
            the run holds out none (``train.validation = 0``), as ``baseline.validation`` does for the
            runner's plain network (a fifth); 0: the last epoch, trained on every row.
    """

    held_out: float = option(0.2, unit(open_low=False))

    def fit_stages(self, epochs):
        return (
            Stage("plain", "the plain network by maximum likelihood (Adam, the runner's plain-network rule)", epochs),
        )

    def __post_init__(self):
        validate(self, "magnitude")


class PlainFitted(NetworkFitted):
    """A trained network whose scores are its parameters' magnitudes |w| in float64 (higher keeps)."""

    score_name = "|w|"

    def scores(self) -> dict:
        params = dict(self.net.named_parameters())
        return {site: params[site].detach().abs().double() for site in self.sites}

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict()}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])


class MagnitudeFitted(PlainFitted):
    """The plain network, pruned by its weights' magnitudes."""

    method = "magnitude"


def fit_plain_network(net: nn.Module, data, ctx, *, held_out: float) -> tuple:
    """``(history, report)``: ``net`` trained in place as the run's plain network (the stage ``"plain"``) on
    ``ctx``'s device, and ``{"baseline_<metric>": its test metric}``."""
    history = ctx.train_plain("plain", net.to(ctx.device), data, held_out=held_out)
    return history, {f"baseline_{metric_name(data.task)}": network_test_metric(net, data)}


@register_method
class MagnitudeMethod(Method):
    """Global magnitude pruning of the plain network, each pruned network fine-tuned with its mask fixed."""

    name = "magnitude"
    Options = MagnitudeOptions
    prune_levels = ("weight",)
    baseline = True
    unsupported = PLAIN_RULE
    summary = "baseline: the plain network's smallest weights removed, fine-tuned"
    paper = "Han et al. (2015), [Learning both weights and connections](https://arxiv.org/abs/1506.02626)"

    def fit(self, net, data, options, ctx):
        history, report = fit_plain_network(net, data, ctx, held_out=options.held_out)
        return MagnitudeFitted(net, history=history, report=report, task=data.task, ctx=ctx)

    fits_together = True

    def fit_together(self, nets, datasets, options, contexts):
        histories = train_plain_together(contexts, "plain", nets, datasets, held_out=options.held_out)
        return [
            MagnitudeFitted(
                net,
                history=history,
                report={f"baseline_{metric_name(data.task)}": network_test_metric(net, data)},
                task=data.task,
                ctx=ctx,
            )
            for net, history, data, ctx in zip(nets, histories, datasets, contexts)
        ]

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return MagnitudeFitted(net, task=data.task, ctx=ctx)
