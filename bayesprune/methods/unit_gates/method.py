"""Bernoulli unit gates' :class:`~bayesprune.methods.base.Method`: gated training, the units kept, the fine-tuning."""

import copy
from pathlib import Path

import torch
from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.core.gates import UnitGates, separable_heads
from bayesprune.core.loop import optimizer_step
from bayesprune.core.normalization import recalibrate
from bayesprune.core.structure import unit_groups
from bayesprune.core.validation import Rule, list_of
from bayesprune.methods import Method, register_method
from bayesprune.methods.metrics import (
    ARCHITECTURE,
    COUNT,
    FRACTION,
    NONNEGATIVE,
    NUMBER,
    SOME_NUMBERS,
    numbers,
    same_length,
)
from bayesprune.methods.unit_gates.fitted import UnitGatesFitted
from bayesprune.methods.unit_gates.options import UnitGatesOptions
from bayesprune.methods.unit_gates.training import GateTraining, adam, data_cost


def _weights(net) -> int:
    """Weights (not biases) of the Linear and convolution layers: the count of paper 004's pruning ratio."""
    return sum(
        module.weight.numel() for module in net.modules() if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd))
    )


@register_method
class UnitGatesMethod(Method):
    """Bernoulli unit/filter gates pruned while training (paper 004, Algorithm 1)."""

    name = "unit-gates"
    Options = UnitGatesOptions
    # the digits config of the golden recording (before log gamma and the rates were chosen held out)
    quick = (
        "unit-gates.finetune_epochs=2",
        "unit-gates.log_gamma=-25.0",
        "optim.lr=0.001",
        "unit-gates.finetune_lr=1e-4",
    )
    metrics_keys = {
        "pruning_ratio": FRACTION,
        "pruning_ratio_with_input_threshold": FRACTION,
        "learned_architecture": ARCHITECTURE,
        "starting_architecture": ARCHITECTURE,
        "kept_units": numbers(list_of(COUNT, "unit indices", nonempty=False), "lists of unit indices"),
        "units_alive": numbers(COUNT, "unit counts"),
        "epoch_seconds": numbers(NONNEGATIVE, "non-negative numbers"),
        "epoch_test_error": numbers(NONNEGATIVE, "non-negative numbers", nonempty=False),
        "theta_trajectories": numbers(numbers(SOME_NUMBERS, "lists of θ"), "lists of θ per layer"),
        "expected_macs_ratio": numbers(NONNEGATIVE, "non-negative numbers", nonempty=False),
        "log_gamma": NUMBER,
        "weight_precision": NONNEGATIVE,
    }
    metrics_rules = (
        same_length("learned_architecture", "starting_architecture"),
        same_length("kept_units", "starting_architecture"),
        same_length("epoch_seconds", "units_alive"),
        same_length("theta_trajectories", "units_alive"),
        Rule(
            "learned_architecture",
            lambda m: all(
                k <= n for k, n in zip(m.get("learned_architecture", ()), m.get("starting_architecture", ()))
            ),
            lambda m: "keep at most the starting units of each layer",
        ),
    )
    summary = "Bernoulli gates on units and filters with Beta or Flattening hyper-priors; units removed while training"
    paper = (
        "Guenter, Sideris (2022), "
        "[Robust learning of parsimonious deep neural networks](https://arxiv.org/abs/2205.04650)"
    )

    prune_levels = ("unit",)
    macs_option = "macs"
    unsupported = {
        "validation": "units leave the network for good while it trains; it keeps training to the end",
        "train.kernels": "it has no per-weight variational formulas to compile",
        "optim.name": "Algorithm 1 trains with Adam (paper 004, section 7)",
        "optim.momentum": "Algorithm 1 trains with Adam (paper 004, section 7)",
        "optim.schedule": "Algorithm 1 trains at a constant rate (optim.lr, then unit-gates.finetune_lr)",
        "optim.weight_decay": "the weights' prior precision is unit-gates.weight_precision (eq. 12)",
        "model.expose": "its gates are the units of the Linear and convolution layers",
        "model.hide": "its gates are the units of the Linear and convolution layers",
    }

    def check(self, net, data, options):
        """Algorithm 1 gates the units of the network's unit groups (paper 004; one gate per group of
        coupled channels, :class:`~bayesprune.core.gates.UnitGates`), a closed gate computing the network
        with its units removed, under a Flattening term that is flat where θ can be
        (:meth:`UnitGatesOptions.check_flat_part`) at the log γ of the data's rows
        (:meth:`UnitGatesOptions.for_rows`)."""
        options.for_rows(data.num_train).check_flat_part()
        try:
            net = separable_heads(copy.deepcopy(net), data.input_shape)
            gates = UnitGates(net, input_shape=data.input_shape)
            if not gates.groups:
                weighted = [
                    name for name, m in net.named_modules() if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))
                ]
                ungated = "".join(f"; {name!r}: {why}" for name, why in gates.ungated.items())
                raise ValueError(
                    f"no units of its layers {str(weighted[:8])[1:-1]} can be gated: they are the network's "
                    f"outputs, or a LayerNorm/GroupNorm normalises across them{ungated}"
                )
            gates.check_removal(net)
        except ValueError as error:
            raise ConfigError(f"model: unit-gates gates the units of the network's unit groups; {error}") from None

    def fit(self, net, data, options, ctx):
        options = options.for_rows(data.num_train)
        torch.manual_seed(ctx.seed)
        net = separable_heads(net.to(ctx.device), data.input_shape)
        starting = _weights(net)
        test = (data.x_test, data.y_test) if data.task == "classification" else None
        batches = ctx.batches(data.x_train, data.y_train)
        training = GateTraining(
            net,
            options,
            num_train=data.num_train,
            lr=ctx.optim.lr,
            noise_scale=ctx.noise_scale,
            input_shape=data.input_shape,
            test=test,
            macs_target=macs_target(options, ctx),
            total_steps=ctx.epochs * len(batches),
        )
        history = ctx.train(
            "gates", training.step, batches, epochs=ctx.epochs, callbacks=[training], state={"training": training}
        )
        keep = [t.detach() >= options.final_threshold for t in training.gates.theta]
        keep = [
            k if floor or bool(k.any()) else t.detach() == t.detach().max()
            for k, t, floor in zip(keep, training.gates.theta, training.floors)
        ]
        keep = training.with_floors(keep)
        if training.constraint is not None:
            keep = training.constraint.cut(training.gates.theta, keep, training.kept_units, training.floors)
        training.remove(keep)
        final = training.net
        theta = {site: t.detach().clone() for site, t in zip(training.gates.sites, training.gates.theta)}
        structured = 1 - _weights(final) / starting
        first = next(p for name, p in final.named_parameters() if name.endswith("weight"))
        input_mask = (first.detach().abs() >= options.input_threshold) if options.input_threshold > 0 else None
        if options.finetune_epochs > 0:
            _fine_tune(ctx, final, batches, options, data.num_train, first, input_mask)
        if options.recalibrate:
            recalibrate(final, data.x_train, batch_size=ctx.batch_size, seed=ctx.seed)
        removed_inputs = 0 if input_mask is None else int((~input_mask).sum())
        report = {
            "pruning_ratio": structured,
            "pruning_ratio_with_input_threshold": 1 - (_weights(final) - removed_inputs) / starting,
            "learned_architecture": [t.numel() for t in theta.values()],
            "starting_architecture": training.starting_units,
            "kept_units": [original.tolist() for original in training.kept_units],
            "units_alive": training.units_alive,
            "epoch_seconds": [round(s, 3) for s in training.epoch_seconds],
            "epoch_test_error": training.epoch_test_error,
            "theta_trajectories": training.theta_trajectories,
            **({} if training.constraint is None else {"expected_macs_ratio": training.expected_macs_ratio}),
            "log_gamma": options.log_gamma,  # as fitted: scaled to the data's rows where reference_rows is set
            "weight_precision": options.weight_precision,
        }
        return UnitGatesFitted(
            final,
            split_groups(final, training.gates, theta, data.input_shape),
            history=history,
            report=report,
            task=data.task,
            ctx=ctx,
        )

    def inference_data(self, fits, data, *, seed):
        """q(ξ) = Bernoulli(θ) of every kept unit, one chain per fit
        (:func:`~bayesprune.analysis.inference_data.gate_inference_data`); fits that learned another
        architecture than the first have no units in common with it and are left out."""
        from bayesprune.analysis.inference_data import gate_inference_data

        shapes = {site: t.shape for site, t in fits[0].theta.items()}
        same = [fit for fit in fits if {site: t.shape for site, t in fit.theta.items()} == shapes]
        return gate_inference_data([fit.theta for fit in same], seed=seed)

    def report_sections(self, run_dir, metrics):
        """Units alive and test error per epoch (paper 004, Fig. 3) and θ of every unit (Fig. 4)."""
        from bayesprune.methods.unit_gates.plots import plot_unit_gates

        if "units_alive" not in metrics:
            return []
        plot_unit_gates(metrics, Path(run_dir) / "units.png", Path(run_dir) / "theta.png")
        start, end = metrics["starting_architecture"], metrics["learned_architecture"]
        seconds = metrics["epoch_seconds"]
        return [
            "## Units pruned while training (paper 004)\n\n"
            f"Hidden units per layer: {' – '.join(map(str, start))} at the start, {' – '.join(map(str, end))} learned. "
            f"Pruning ratio {100 * metrics['pruning_ratio']:.2f}% of the starting weights "
            f"({100 * metrics['pruning_ratio_with_input_threshold']:.2f}% with the input-weight threshold). "
            f"First epoch {seconds[0]:.2f} s, last {seconds[-1]:.2f} s.",
            "![units alive and test error per epoch](units.png)",
            "![θ of every unit per epoch](theta.png)",
        ]

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return UnitGatesFitted(net, dict(state["theta"]), task=data.task, ctx=ctx)


def macs_target(options, ctx) -> float | None:
    """The MAC fraction the gates are held to while training: ``unit-gates.macs``, else the largest of the
    run's ``prune.macs`` (its smaller targets are cut from the fitted network by θ), else none."""
    if options.macs is not None:
        return options.macs
    targets = ((ctx.config or {}).get("prune") or {}).get("macs") or ()
    targets = [targets] if isinstance(targets, (int, float)) else list(targets)
    return max(targets) if targets else None


def split_groups(net, gates, theta: dict, input_shape) -> dict:
    """``theta`` with the θ of every unit group of the smaller ``net`` that is no gated group: a depthwise
    convolution left one channel is a group of its own to Torch-Pruning (it takes it for an ordinary
    convolution), holding the one unit of the gated group it belonged to, and its θ."""
    owner = {producer: group.gate_site for group in gates.groups for producer in group.producers}
    theta = dict(theta)
    for group in unit_groups(net, input_shape):
        source = owner.get(group.name)
        if group.gate_site not in theta and source is not None and theta[source].numel() == group.units:
            theta[group.gate_site] = theta[source].clone()
    return theta


def _fine_tune(ctx, net, batches, options, num_train, first, input_mask):
    """Section 7.1: the deterministic smaller network trained further at ``finetune_lr``; zeroed
    input weights stay zero. Its gradient is eq. 16's (N/B) Σ's (the weight precision weighs against it);
    its progress bar and history show the loss per example, as the gates stage's."""
    net.train()
    optimizer = adam(net, options.finetune_lr, options.weight_precision)

    def loss_fn(x, y):
        return data_cost(net(x), y, num_train, ctx.noise_scale)

    callbacks = []
    if input_mask is not None:
        with torch.no_grad():
            first.mul_(input_mask)
        callbacks.append(_KeepZero(first, input_mask))
    step = optimizer_step(loss_fn, optimizer)

    def per_example(x, y, index, num_batches):
        """The step of eq. 16's (N/B) Σ, its loss shown per example: the scale of the gates stage's."""
        return step(x, y, index, num_batches) / num_train

    ctx.train(
        "fine-tune",
        per_example,
        batches,
        epochs=options.finetune_epochs,
        callbacks=callbacks,
        state={"net": net, "optimizer": optimizer},
    )


class _KeepZero:
    def __init__(self, param, mask):
        self.param, self.mask = param, mask

    def on_step(self, epoch, index, loss):
        with torch.no_grad():
            self.param.mul_(self.mask)
