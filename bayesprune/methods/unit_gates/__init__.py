"""Bernoulli unit/filter gates with Beta or Flattening hyper-priors, pruning while training (paper 004).

Every hidden unit of fully connected layers and every filter of convolutions carries a gate
ξ ~ Bernoulli(θ) (eq. 1); the weights are MAP estimates under N(0, λ⁻¹) (eqs. 4, 12), the data
term the dataset-scaled sum (N/B)·Σ −log p of one minibatch with one gate sample (eq. 16).
Algorithm 1 runs step by step: the weight gradient of eq. 17, θ's gradient of eq. 19 from an
estimator of C1 − C0 (:mod:`bayesprune.core.gates`) and the hyper-prior's closed form
(:mod:`bayesprune.methods.unit_gates.hyperpriors`), Adam on both, θ clipped to [θ_l, θ_h], each unit's weights
projected to ‖w_b‖² + ‖w_f‖² ≤ 2 φ_max, and a unit switched off for good when (i) θ < θ_tol or
(ii) θ fell by θ_per below its running maximum after n0 steps. A unit meeting the condition leaves
the network, its gates and the optimiser state at the step it does (step 4: "remove them from the
network to reduce the computational cost in further training iterations"), so every later step
costs less. After training, units with θ < ``final_threshold`` go, the rest are kept
deterministically (ξ = 1) and the smaller network is fine-tuned (section 7.1).
"""

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.core import distributed
from bayesprune.core.errors import ConfigError
from bayesprune.core.export import check_export, cut
from bayesprune.core.gates import ESTIMATORS, UnitGates, project_unit_weights, separable_heads, unit_weight_norms
from bayesprune.core.loop import optimizer_step
from bayesprune.core.normalization import recalibrate
from bayesprune.core.precision import autocast_calls
from bayesprune.core.structure import input_shape_of, shrunk, unit_groups
from bayesprune.core.tasks import predict_network
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
from bayesprune.methods import Method, register_method
from bayesprune.methods.base import NetworkFitted
from bayesprune.methods.unit_gates.hyperpriors import BetaHyperPrior, FlatteningHyperPrior, SALHyperPrior

HYPERPRIORS = ("flattening", "beta", "sal")
#: The largest hyper-prior shape (alpha, beta) a config may give: the Beta hyper-prior's default beta is 1e10.
MAX_SHAPE = 1e12
CONDITIONS = ("tolerance", "drop")
REMOVE_AT = ("step", "epoch")


@dataclass(frozen=True)
class UnitGatesOptions:
    """``[unit-gates]``: the model, hyper-prior, estimator and Algorithm 1's settings (paper 004, section 7).

    Attributes:
        weight_precision: λ of the weight prior N(0, λ⁻¹) (eq. 4; 20 in section 7.1).
        hyperprior: ``"flattening"`` (eq. 29), ``"beta"`` (section 4.1) or ``"sal"`` (π* = θ under
            Beta(0.099, 0.99), the baseline of section 7).
        log_gamma: log γ of the Flattening hyper-prior (−25 for LeNet-300-100, −100 for LeNet-5).
        alpha, beta: the Beta hyper-prior's (0.9 and 1e10 by default) or SAL's (0.099, 0.99).
        eps1, eps2: π* is kept in [ε1, 1 − ε2] (eq. 11); the Flattening term is −log γ only where ε1 ≪ γ,
            and a fit with values that leave part of [θ_l, θ_h] off its flat part is refused
            (log γ = −100 needs ε1 < 3.7e-50).
        estimator: ``"taylor"`` (eq. 22), ``"concrete"`` (eq. 23), ``"exact"`` (eq. 25) or ``"hybrid"``.
        temperature: the Concrete relaxation's t.
        hybrid_units: units per step that the hybrid estimator evaluates exactly.
        theta_init: θ(0) of every unit.
        remove_at: ``"step"``: a unit meeting the pruning condition leaves the network at that step
            (Algorithm 1, step 4); ``"epoch"``: its θ is held at 0 from that step (its gate is 0: the
            unit removed, exactly) and the network is rebuilt without such units once at the epoch's
            end. A rebuild of resnet18 costs about one training step (0.25-1 s of CPU against 0.33 s),
            so removing at every step that switches units off can cost more than the smaller network saves.
        theta_lr: Adam's rate for θ (``None``: ``optim.lr``, as the weights). Adam moves θ by about its
            rate a step, so θ(0) = 0.5 reaches θ_tol after about 0.5/rate steps.
        theta_low, theta_high: θ is clipped to [θ_l, θ_h] after every step.
        phi_max: bound on each unit's (‖w_b‖² + ‖w_f‖²) / 2; ``inf`` (the default) skips the
            projection, which the paper finds practically unnecessary at a large φ_max (section 6).
        condition: pruning condition ``"tolerance"`` (i: θ < ``theta_tol``) or ``"drop"`` (ii: θ below
            (1 − ``theta_per``) times its running maximum after ``n0`` steps).
        final_threshold: after training, units with θ below it are removed, the others kept.
        min_keep_fraction: the share of each gated group's starting units that is never removed, those of
            highest θ (rounded up), which then also stand in for a group all of whose units meet the pruning
            condition; 0: Algorithm 1 as written (such a group keeps them all). Not in paper 004, whose
            networks end with 3-30% of a layer's units; on a deep CNN trained from random weights the gates
            of late groups close before the data term holds them (mobilenet_v2 on 1,150 digits: its last 1,280-channel layer went to one,
            84% held-out error; docs/reproductions.md).
        finetune_epochs, finetune_lr: fine-tuning of the deterministic smaller network.
        recalibrate: at the end, the batch norms' running statistics of the returned network are
            estimated again on training batches (:func:`bayesprune.core.normalization.recalibrate`, the
            batches ``prune.recalibrate_batches`` defaults to). Not in the paper: those accumulated
            while training describe networks with Bernoulli(θ) gates and moving weights, not the
            deterministic network returned (resnet18 on 1,150 digits: 42% held-out error with them, 5%
            re-estimated; docs/reproductions.md). A network without batch norms is left as it is.
        input_threshold: after training, first-layer weights with |w| below it are zeroed (section
            7.1.1 uses 1e-4 for LeNet-300-100); 0 turns it off.
    """

    weight_precision: float = 20.0
    hyperprior: str = "flattening"
    log_gamma: float = -25.0
    alpha: float | None = None
    beta: float | None = None
    eps1: float = 1e-30
    eps2: float = 1e-30
    estimator: str = "taylor"
    temperature: float = 0.1
    hybrid_units: int = 10
    theta_init: float = 0.5
    theta_lr: float | None = None
    remove_at: str = "step"
    theta_low: float = 1e-6
    theta_high: float = 1 - 1e-6
    phi_max: float = math.inf
    condition: str = "tolerance"
    theta_tol: float = 1e-3
    theta_per: float = 0.1
    n0: int = 2814
    final_threshold: float = 1e-3
    min_keep_fraction: float = 0.0
    finetune_epochs: int = 10
    finetune_lr: float = 1e-4
    input_threshold: float = 0.0
    recalibrate: bool = True

    def __post_init__(self):
        key = "unit-gates."
        require(
            is_scale(self.weight_precision, positive=False),
            key + "weight_precision",
            f"be a non-negative number up to {MAX_SCALE:g}",
            self.weight_precision,
        )
        require(self.hyperprior in HYPERPRIORS, key + "hyperprior", f"be one of {list(HYPERPRIORS)}", self.hyperprior)
        require(self.estimator in ESTIMATORS, key + "estimator", f"be one of {sorted(ESTIMATORS)}", self.estimator)
        require(self.condition in CONDITIONS, key + "condition", f"be one of {list(CONDITIONS)}", self.condition)
        require(self.remove_at in REMOVE_AT, key + "remove_at", f"be one of {list(REMOVE_AT)}", self.remove_at)
        require(
            self.theta_lr is None or is_scale(self.theta_lr),
            key + "theta_lr",
            f"be a positive number up to {MAX_SCALE:g}",
            self.theta_lr,
        )
        for name in ("temperature", "finetune_lr"):
            require(
                is_scale(getattr(self, name)),
                key + name,
                f"be a positive number up to {MAX_SCALE:g}",
                getattr(self, name),
            )
        require(
            self.phi_max == math.inf or (is_number(self.phi_max) and self.phi_max > 0),
            key + "phi_max",
            "be a positive number or inf",
            self.phi_max,
        )
        for name in ("theta_init", "theta_low", "theta_high", "theta_tol", "theta_per", "final_threshold"):
            require(
                is_number(getattr(self, name)) and 0 < getattr(self, name) < 1,
                key + name,
                "lie in (0, 1)",
                getattr(self, name),
            )
        require(
            self.theta_low < self.theta_init < self.theta_high,
            key + "theta_init",
            "lie between theta_low and theta_high",
            self.theta_init,
        )
        require(isinstance(self.recalibrate, bool), key + "recalibrate", "be true or false", self.recalibrate)
        require(
            is_number(self.min_keep_fraction) and 0 <= self.min_keep_fraction < 1,
            key + "min_keep_fraction",
            "lie in [0, 1)",
            self.min_keep_fraction,
        )
        for name in ("n0", "finetune_epochs", "hybrid_units"):
            require(
                is_count(getattr(self, name), 0),
                key + name,
                f"be a non-negative integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_scale(self.input_threshold, positive=False),
            key + "input_threshold",
            f"be a non-negative number up to {MAX_SCALE:g}",
            self.input_threshold,
        )
        for name in ("alpha", "beta"):  # every option is checked, whichever hyper-prior reads it
            require(
                getattr(self, name) is None
                or (is_number(getattr(self, name)) and 0 < getattr(self, name) <= MAX_SHAPE),
                key + name,
                f"be a positive number up to {MAX_SHAPE:g}",
                getattr(self, name),
            )
        try:
            FlatteningHyperPrior(self.log_gamma, eps1=self.eps1, eps2=self.eps2)  # log_gamma, eps1 and eps2 likewise
            self.hyper_prior()
        except ConfigError as error:
            raise ConfigError(str(error).replace("hyperprior ", key)) from None

    def check_flat_part(self):
        """Refuse a Flattening hyper-prior whose term is not −log γ (eq. 31) wherever θ can be, [θ_l, θ_h]:
        it is flat only for θ in (θ1, θ2) of eq. 30, where logit π* = logit θ + log γ lies in
        [logit ε1, logit(1 − ε2)], and the paper takes ε1, ε2 small enough for that. Otherwise the push on
        θ is another (with log γ = −100 and ε1 = 1e-30: logit θ + 69). Checked before a fit, not when a
        finished run's config is read back."""
        if self.hyperprior != "flattening":
            return
        key = "unit-gates."
        lowest, highest = (math.log(t) - math.log1p(-t) + self.log_gamma for t in (self.theta_low, self.theta_high))
        bound = math.exp(lowest) / (1 + math.exp(lowest))
        require(
            self.eps1 < bound,
            key + "eps1",
            f"lie below {bound:.3g} (γ θ_l/(1 − θ_l), so that the Flattening term is "
            "−log γ, eq. 31, for every θ in [theta_low, theta_high])",
            self.eps1,
        )
        bound = 1 / (1 + math.exp(highest))
        require(
            self.eps2 < bound,
            key + "eps2",
            f"lie below {bound:.3g} (so that the Flattening term is −log γ, eq. 31, "
            "for every θ in [theta_low, theta_high])",
            self.eps2,
        )

    def hyper_prior(self):
        """The :mod:`~bayesprune.methods.unit_gates.hyperpriors` object these options describe."""
        if self.hyperprior == "flattening":
            return FlatteningHyperPrior(self.log_gamma, eps1=self.eps1, eps2=self.eps2)
        if self.hyperprior == "beta":
            return BetaHyperPrior(_given(self.alpha, 0.9), _given(self.beta, 1e10), eps1=self.eps1, eps2=self.eps2)
        return SALHyperPrior(_given(self.alpha, 0.099), _given(self.beta, 0.99))

    def make_estimator(self):
        if self.estimator == "concrete":
            return ESTIMATORS["concrete"](self.temperature)
        if self.estimator == "hybrid":
            return ESTIMATORS["hybrid"](self.hybrid_units)
        return ESTIMATORS[self.estimator]()


def _given(value, default):
    return default if value is None else value


def data_cost(output, y, num_train: int, noise_scale: float | None) -> torch.Tensor:
    """(N/B) Σ −log p(y | x, W, Ξ) of eq. 16: categorical, or Gaussian with fixed scale (eq. 2; 1 by default)."""
    if y.is_floating_point():
        scale = 1.0 if noise_scale is None else noise_scale
        return num_train * F.mse_loss(output.squeeze(-1), y) / (2 * scale**2)
    return num_train * F.cross_entropy(output, y)


def adam(net, lr: float, precision: float, gates=(), gates_lr: float | None = None) -> torch.optim.Adam:
    """Adam on the weights with the gradient λW of eq. 12's λ/2 WᵀW (Adam's ``weight_decay``: the
    L2 term added to the gradient, every parameter, the bias being the weight of eq. 1's constant
    input), and on the gate parameters ``gates`` (θ) in the same fused update, at ``gates_lr`` where
    given. The weight decay adds λθ to θ's gradient too, which θ must not get: :meth:`GateTraining.step`
    takes it out beforehand."""
    if gates_lr is None:
        return torch.optim.Adam([*net.parameters(), *gates], lr=lr, weight_decay=precision, fused=True)
    groups = [{"params": list(net.parameters())}, {"params": list(gates), "lr": gates_lr}]
    return torch.optim.Adam(groups, lr=lr, weight_decay=precision, fused=True)


class GateTraining:
    """Algorithm 1 on one network: the :func:`bayesprune.core.loop.train` step, which removes the units that
    meet the pruning condition, and the epoch callback that records the network's size, θ and test
    error. ``net``, ``gates`` and ``optimizer`` are replaced when units go."""

    def __init__(
        self,
        net,
        options: UnitGatesOptions,
        *,
        num_train: int,
        lr: float,
        noise_scale=None,
        input_shape=None,
        test=None,
    ):
        self.net, self.options, self.num_train, self.noise_scale = net, options, num_train, noise_scale
        self.test = test  # (x, y): the test error of the current network after each epoch (Fig. 3), classification
        self.input_shape = input_shape
        self.gates = UnitGates(net, init=options.theta_init, input_shape=input_shape)
        self.hyper_prior, self.estimator = options.hyper_prior(), options.make_estimator()
        self.optimizer = adam(net, lr, options.weight_precision, [self.gates.raw], options.theta_lr)
        self.theta_max = self.gates.raw.detach().clone()  # running maximum, condition (ii)
        self.switched_off = torch.zeros_like(self.theta_max, dtype=torch.bool)  # remove_at = "epoch": θ held at 0
        self.steps = 0
        self.checked_sites = set()  # layers whose unit removal check_export has verified
        self.units_alive, self.epoch_seconds, self.epoch_test_error = [], [], []
        self.theta_trajectories = []  # per epoch: θ of every starting unit (0 once removed)
        self.starting_units = list(self.gates.units)
        self.floors = [math.ceil(options.min_keep_fraction * units) for units in self.starting_units]
        self.kept_units = [torch.arange(units) for units in self.gates.units]  # starting index of each unit
        self._epoch_start = time.perf_counter()

    def state_dict(self) -> dict:
        """Everything the training changes, with the starting index of every unit still in the network
        (:meth:`load_state_dict` removes the others first)."""
        return {
            "kept_units": [k.clone() for k in self.kept_units],
            "net": self.net.state_dict(),
            "theta": [t.detach().clone() for t in self.gates.theta],
            "optimizer": self.optimizer.state_dict(),
            "theta_max": [m.clone() for m in self.gates.per_layer(self.theta_max)],
            "steps": self.steps,
            "units_alive": list(self.units_alive),
            "epoch_seconds": list(self.epoch_seconds),
            "epoch_test_error": list(self.epoch_test_error),
            "theta_trajectories": list(self.theta_trajectories),
        }

    def load_state_dict(self, state: dict):
        self.remove([torch.isin(now, saved) for now, saved in zip(self.kept_units, state["kept_units"])])
        self.net.load_state_dict(state["net"])
        with torch.no_grad():
            for t, saved in zip(self.gates.theta, state["theta"]):
                t.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        self.theta_max = torch.cat(state["theta_max"]).to(self.gates.raw.device)
        self.steps = state["steps"]
        self.units_alive, self.epoch_seconds = list(state["units_alive"]), list(state["epoch_seconds"])
        self.epoch_test_error, self.theta_trajectories = (
            list(state["epoch_test_error"]),
            list(state["theta_trajectories"]),
        )

    def step(self, x, y, index, num_batches):
        gates = self.gates
        theta = gates.raw_tensors()
        values = self.estimator.values(gates)
        self.optimizer.zero_grad(set_to_none=True)
        net = autocast_calls(self.net, x.device)
        with gates.applied(self.net, gates.per_layer(values[0])):
            cost = data_cost(net(x), y, self.num_train, self.noise_scale)
        cost.backward()

        def cost_of(gate_values):
            with torch.no_grad(), gates.applied(self.net, gates.per_layer(gate_values[0])):
                return data_cost(net(x), y, self.num_train, self.noise_scale)

        norms = [torch.cat(unit_weight_norms(self.net, gates))] if self.options.estimator == "hybrid" else None
        data = self.estimator.data_gradient(theta, values, cost_of, norms)
        for t, d in zip(theta, data):  # eq. 19, less the λθ the optimiser's weight decay adds back
            t.grad = d.add_(self.hyper_prior.theta_gradient(t.detach())).sub_(
                t.detach(), alpha=self.options.weight_precision
            )
            t.grad[self.switched_off] = 0.0  # θ = 0 held: its logit's derivative is not finite
        distributed.average_gradients([param for group in self.optimizer.param_groups for param in group["params"]])
        self.optimizer.step()
        self._after_step()
        return cost.detach() / self.num_train

    @torch.no_grad()
    def _after_step(self):
        """Algorithm 1, steps 3-4 after the update: the projection, θ clipped to [θ_l, θ_h], and every
        unit meeting the pruning condition removed from the network at once, but a group's floor
        (:meth:`with_floors`); without one, a layer all of whose units meet it keeps them: a layer is
        never emptied while training."""
        options = self.options
        self.steps += 1
        if options.phi_max < math.inf:
            project_unit_weights(self.net, self.gates, options.phi_max)
        theta = self.gates.raw.clamp_(options.theta_low, options.theta_high)
        theta[self.switched_off] = 0.0  # remove_at = "epoch": switched off until the epoch's end
        if options.condition == "tolerance":
            off = theta < options.theta_tol
        else:
            torch.maximum(self.theta_max, theta, out=self.theta_max)
            if self.steps <= options.n0:
                return
            off = theta < self.theta_max * (1 - options.theta_per)
        if not bool((off & ~self.switched_off).any()):
            return
        layers = zip(self.gates.per_layer(off), self.gates.per_layer(self.switched_off), self.floors)
        keep = self.with_floors(
            [~layer_off if floor or not bool(layer_off.all()) else ~switched for layer_off, switched, floor in layers]
        )
        if options.remove_at == "step":
            self.remove(keep)
        else:  # held at 0 from now on (a Bernoulli(0) gate: the unit removed, exactly)
            self.switched_off = ~torch.cat(keep)
            theta[self.switched_off] = 0.0

    def with_floors(self, keep: list) -> list:
        """``keep`` (a bool mask per gated group) with each group's floor (``min_keep_fraction`` of its
        starting units) of highest θ kept as well."""
        kept = []
        for k, theta, floor in zip(keep, self.gates.theta, self.floors):
            top = torch.zeros_like(k)
            top[theta.detach().topk(min(floor, len(theta))).indices] = True
            kept.append(k | top)
        return kept

    def on_epoch(self, epoch, history):
        if bool(self.switched_off.any()):  # remove_at = "epoch": one rebuild for the epoch's switched-off units
            self.remove([~switched for switched in self.gates.per_layer(self.switched_off)])
        now = time.perf_counter()
        self.epoch_seconds.append(now - self._epoch_start)
        self.units_alive.append(self.gates.raw.numel())
        self.theta_trajectories.append(self.theta_by_original_unit())
        if self.test is not None:  # every gate of the smaller network at 1: the network fine-tuning would start from
            # in eval mode: batch norms read their running statistics and keep them (test rows must not enter them)
            predicted = predict_network(self.net, self.test[0], "classification").argmax(-1).cpu()
            self.epoch_test_error.append(100 * float((predicted != self.test[1].cpu()).float().mean()))
        self._epoch_start = time.perf_counter()

    def theta_by_original_unit(self) -> list:
        """θ of every unit of the starting network, per layer (0 for a removed unit)."""
        out = []
        for original, t, start in zip(self.kept_units, self.gates.theta, self.starting_units):
            full = torch.zeros(start)
            full[original] = t.detach().cpu()
            out.append(full.tolist())
        return out

    def remove(self, keep: list):
        """Remove the units where ``keep`` is false: a smaller network, gates and optimiser whose
        state (Adam's moments and step counts) is the kept units' own.

        One removal gives the smaller network and the cuts of the moments (:func:`shrunk`). Whether
        removing a layer's units computes the gated network is a property of the network's structure,
        so it is checked (:func:`check_export`) the first time each layer loses units, not at every step
        that removes some.
        """
        if all(bool(k.all()) for k in keep):
            return
        masks = {site: k.cpu() for site, k in zip(self.gates.sites, keep)}
        net, cuts = shrunk(self.net, masks, input_shape=self.input_shape)
        first = {site for site, mask in masks.items() if site not in self.checked_sites and not bool(mask.all())}
        if first:
            check_export(self.net, net, {}, masks, input_shape_of(self.net, self.input_shape))
            self.checked_sites |= first
        old_params = dict(self.net.named_parameters())
        shapes = {name: param.shape for name, param in old_params.items()}
        old_state = {name: self.optimizer.state.get(param, {}) for name, param in old_params.items()}
        theta_state = self.optimizer.state.get(self.gates.raw, {})
        kept = torch.cat(keep)
        gates = self.gates.restricted(net, keep)
        optimizer = adam(
            net, self.optimizer.param_groups[0]["lr"], self.options.weight_precision, [gates.raw], self.options.theta_lr
        )
        for key in ("exp_avg", "exp_avg_sq"):
            moments = cut({name: state[key] for name, state in old_state.items() if key in state}, cuts, shapes)
            for name, param in net.named_parameters():
                if name in moments:
                    optimizer.state[param][key] = moments[name].clone()
            if key in theta_state:
                optimizer.state[gates.raw][key] = theta_state[key][kept]
        for name, param in net.named_parameters():
            if "step" in old_state[name]:
                optimizer.state[param]["step"] = old_state[name]["step"].clone()
        if "step" in theta_state:
            optimizer.state[gates.raw]["step"] = theta_state["step"].clone()
        self.kept_units = [o[k.cpu()] for o, k in zip(self.kept_units, keep)]
        self.theta_max = self.theta_max[kept]
        self.switched_off = self.switched_off[kept]
        self.net, self.gates, self.optimizer = net, gates, optimizer


class UnitGatesFitted(NetworkFitted):
    """The fine-tuned smaller network; its scores are the logits of the final θ of every kept unit."""

    method = "unit-gates"
    score_name = "gate logit"

    def __init__(self, net, theta: dict, *, history=None, seconds=0.0, report=None, task="classification"):
        super().__init__(net, history=history, seconds=seconds, report=report, task=task)
        self.theta = theta

    def scores(self) -> dict:
        return {site: torch.logit(t.double()) for site, t in self.theta.items()}

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "theta": {site: t.detach().clone() for site, t in self.theta.items()}}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.theta = {site: t.clone() for site, t in state["theta"].items()}


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
    summary = "Bernoulli gates on units and filters with Beta or Flattening hyper-priors; units removed while training"
    paper = (
        "Guenter, Sideris (2022), "
        "[Robust learning of parsimonious deep neural networks](https://arxiv.org/abs/2205.04650)"
    )

    prune_levels = ("unit",)
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
        (:meth:`UnitGatesOptions.check_flat_part`)."""
        options.check_flat_part()
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
        torch.manual_seed(ctx.seed)
        net = separable_heads(net.to(ctx.device), data.input_shape)
        starting = _weights(net)
        test = (data.x_test, data.y_test) if data.task == "classification" else None
        training = GateTraining(
            net,
            options,
            num_train=data.num_train,
            lr=ctx.optim.lr,
            noise_scale=ctx.noise_scale,
            input_shape=data.input_shape,
            test=test,
        )
        batches = ctx.batches(data.x_train, data.y_train)
        start = time.perf_counter()
        history = ctx.train(
            "gates", training.step, batches, epochs=ctx.epochs, callbacks=[training], state={"training": training}
        )
        keep = [t.detach() >= options.final_threshold for t in training.gates.theta]
        keep = [
            k if floor or bool(k.any()) else t.detach() == t.detach().max()
            for k, t, floor in zip(keep, training.gates.theta, training.floors)
        ]
        training.remove(training.with_floors(keep))
        final = training.net
        theta = {site: t.detach().clone() for site, t in zip(training.gates.sites, training.gates.theta)}
        structured = 1 - _weights(final) / starting
        first = next(p for name, p in final.named_parameters() if name.endswith("weight"))
        input_mask = (first.detach().abs() >= options.input_threshold) if options.input_threshold > 0 else None
        if options.finetune_epochs > 0:
            _fine_tune(ctx, final, batches, options, data.num_train, first, input_mask)
        if options.recalibrate:
            recalibrate(final, data.x_train, batch_size=ctx.batch_size, seed=ctx.seed)
        seconds = time.perf_counter() - start
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
        }
        return UnitGatesFitted(
            final,
            _split_groups(final, training.gates, theta, data.input_shape),
            history=history,
            seconds=seconds,
            report=report,
            task=data.task,
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
        return UnitGatesFitted(net, dict(state["theta"]), task=data.task)


def _split_groups(net, gates, theta: dict, input_shape) -> dict:
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
    input weights stay zero."""
    optimizer = adam(net, options.finetune_lr, options.weight_precision)

    def loss_fn(x, y):
        return data_cost(net(x), y, num_train, ctx.noise_scale)

    callbacks = []
    if input_mask is not None:
        with torch.no_grad():
            first.mul_(input_mask)
        callbacks.append(_KeepZero(first, input_mask))
    ctx.train(
        "fine-tune",
        optimizer_step(loss_fn, optimizer),
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
