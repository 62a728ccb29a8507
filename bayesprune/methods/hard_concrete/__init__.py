"""Hard-concrete unit gates under a MAC budget (Louizos, Welling and Kingma 2018, "Learning sparse
neural networks through L0 regularization", ICLR), as a method plug-in (``method = "hard-concrete"``,
table ``[hard-concrete]``).

Made to start from a trained network (``model.weights``, or the module passed from Python): every
unit of the network's unit groups (:func:`bayesprune.core.structure.unit_groups`: coupled channels,
attention heads, MLP neurons) gets a hard-concrete gate (eqs. 10-11, :mod:`.gates`); the weights and
log α train together on the expected loss plus the MAC-weighted expected-L0 term of eq. 12 held to
the target ``hard-concrete.macs`` by a Lagrangian (:mod:`.training`). The network is then cut: the
units of largest log α whose MACs fit the target (each group keeping ``min_keep_fraction`` of its
units), the test-time gates ẑ of the kept units folded into the weights that read them, the units
removed from every coupled layer (:func:`bayesprune.core.structure.shrunk`), and the batch norms'
statistics estimated again. The fine-tuning after it is the run's (``prune.finetune_epochs``).

Deviations from the paper: the L0 term is weighted by MACs and its multiplier set by the MAC
constraint instead of a fixed λ; gates are per unit group, not per weight or per neuron of one layer;
the network returned is deterministic (gates ẑ folded), cut to the MAC target.

Scores are log α of every kept unit, in float64 (higher keeps).
"""

import copy
import math

import torch

from bayesprune.core.gates import separable_heads
from bayesprune.core.normalization import recalibrate
from bayesprune.core.structure import shrunk
from bayesprune.core.unit_macs import ExpectedMacs, cut_to_macs
from bayesprune.methods import Method, register_method
from bayesprune.methods.base import NetworkFitted
from bayesprune.methods.hard_concrete.gates import HardConcreteGates, fold_gates, kept_gate_values
from bayesprune.methods.hard_concrete.options import HardConcreteOptions
from bayesprune.methods.hard_concrete.training import GateStage
from bayesprune.methods.metrics import ARCHITECTURE, NONNEGATIVE, SOME_NUMBERS, numbers, same_length


class HardConcreteFitted(NetworkFitted):
    """The cut network; its scores are log α of every kept unit."""

    method = "hard-concrete"
    score_name = "gate log alpha"

    def __init__(self, net, log_alpha: dict, **kwargs):
        super().__init__(net, **kwargs)
        self.gate_log_alpha = log_alpha

    def scores(self) -> dict:
        return {site: value.double() for site, value in self.gate_log_alpha.items()}

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "log_alpha": {site: v.clone() for site, v in self.gate_log_alpha.items()}}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.gate_log_alpha = {site: v.clone() for site, v in state["log_alpha"].items()}


def learned_network(net, gates: HardConcreteGates, macs: ExpectedMacs, options) -> tuple:
    """``(smaller network, log α of its units per site, keep masks)``: ``net`` cut to ``options.macs`` of its
    dense MACs by log α (:func:`~bayesprune.core.unit_macs.cut_to_macs`), the kept units'
    gates (:func:`~bayesprune.methods.hard_concrete.gates.kept_gate_values`) folded into their consumers."""
    log_alpha = [t.detach() for t in gates.per_layer(gates.raw)]
    floors = [max(1, math.ceil(options.min_keep_fraction * units)) for units in gates.units]
    keep = cut_to_macs(log_alpha, macs, options.macs * macs.dense(), floors)
    fold_gates(net, gates, gates.per_layer(kept_gate_values(gates.raw.detach(), gates.beta)))
    masks = dict(zip(gates.sites, keep))
    smaller, _ = shrunk(net, masks, input_shape=gates.input_shape)
    kept = {site: a[k.to(a.device)].cpu() for site, a, k in zip(gates.sites, log_alpha, keep)}
    return smaller, kept, keep


@register_method
class HardConcreteMethod(Method):
    """Hard-concrete unit gates with a MAC-weighted expected-L0 constraint (Louizos et al. 2018)."""

    name = "hard-concrete"
    Options = HardConcreteOptions
    prune_levels = ("unit",)
    macs_option = "macs"
    quick = ("prune.finetune_epochs=1",)
    metrics_keys = {
        "dense_macs": NONNEGATIVE,
        "learned_macs": NONNEGATIVE,
        "starting_architecture": ARCHITECTURE,
        "learned_architecture": ARCHITECTURE,
        "expected_macs_ratio": numbers(NONNEGATIVE, "non-negative numbers", nonempty=False),
        "multipliers": SOME_NUMBERS,
    }
    metrics_rules = (same_length("learned_architecture", "starting_architecture"),)
    summary = "hard-concrete unit gates under a MAC budget"
    paper = "[Louizos et al. (2018)](https://arxiv.org/abs/1712.01312), L0"
    unsupported = {
        "validation": "the gates train to the end; settings are chosen on train.validation by separate runs",
        "train.kernels": "it has no per-weight variational formulas to compile",
        "optim.name": "the gates and weights train with Adam",
        "optim.momentum": "the gates and weights train with Adam",
        "optim.schedule": "the gate stage trains at a constant rate",
        "optim.weight_decay": "its only penalty is the MAC constraint",
        "model.expose": "its gates are the units of the network's unit groups",
        "model.hide": "its gates are the units of the network's unit groups",
    }

    def check(self, net, data, options):
        from bayesprune.core.errors import ConfigError

        try:
            net = separable_heads(copy.deepcopy(net), data.input_shape)
            gates = HardConcreteGates(net, init_open=options.init_open, beta=options.beta, input_shape=data.input_shape)
        except ValueError as error:
            raise ConfigError(f"model: hard-concrete gates the units of the network's unit groups; {error}") from None
        if not gates.groups:
            raise ConfigError("model: hard-concrete found no unit group to gate (every layer feeds the output)")

    def fit(self, net, data, options, ctx):
        torch.manual_seed(ctx.seed)
        net = separable_heads(net.to(ctx.device), data.input_shape)
        gates = HardConcreteGates(net, init_open=options.init_open, beta=options.beta, input_shape=data.input_shape)
        macs = ExpectedMacs(net, gates)
        batches = ctx.batches(data.x_train, data.y_train)
        stage = GateStage(
            net, options, macs, gates, lr=ctx.optim.lr, total_steps=ctx.epochs * len(batches), task=data.task
        )
        history = ctx.train("gates", stage.step, batches, epochs=ctx.epochs, callbacks=[stage], state={"stage": stage})
        dense = macs.dense()
        smaller, log_alpha, keep = learned_network(net, gates, macs, options)
        if options.recalibrate:
            recalibrate(smaller, data.x_train, batch_size=ctx.batch_size, seed=ctx.seed)
        report = {
            "dense_macs": dense,
            "learned_macs": float(macs([k.float().to(gates.raw.device) for k in keep])),
            "starting_architecture": list(gates.units),
            "learned_architecture": [int(k.sum()) for k in keep],
            "expected_macs_ratio": stage.expected_ratio,
            "multipliers": stage.multipliers.values.detach().cpu().tolist(),
        }
        return HardConcreteFitted(smaller, log_alpha, history=history, report=report, task=data.task, ctx=ctx)

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return HardConcreteFitted(net, dict(state["log_alpha"]), task=data.task, ctx=ctx)
