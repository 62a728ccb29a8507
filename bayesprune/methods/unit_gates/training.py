"""Algorithm 1 of paper 004 step by step: the data cost (eq. 16), Adam on weights and gates, and the
units removed while training."""

import math
import time

import torch
import torch.nn.functional as F

from bayesprune.core import distributed
from bayesprune.core.export import check_export, cut
from bayesprune.core.gates import UnitGates, project_unit_weights, unit_weight_norms
from bayesprune.core.precision import autocast_calls
from bayesprune.core.structure import input_shape_of, shrunk
from bayesprune.core.tasks import predict_network
from bayesprune.methods.unit_gates.budget import MacConstraint
from bayesprune.methods.unit_gates.options import UnitGatesOptions


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
        macs_target=None,
        total_steps=1,
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
        self.constraint = None  # the tilt to a MAC target (budget.MacConstraint), with the expected ratio per epoch
        self.expected_macs_ratio = []
        if macs_target is not None:
            clip = (options.theta_low, options.theta_high)
            self.constraint = MacConstraint(
                net, self.gates, target=macs_target, warmup=options.macs_warmup, total_steps=total_steps, clip=clip
            )
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
            "expected_macs_ratio": list(self.expected_macs_ratio),
            "macs_price": None if self.constraint is None else self.constraint.price,
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
        self.expected_macs_ratio = list(state["expected_macs_ratio"])
        if self.constraint is not None:
            self.constraint.price = state["macs_price"]

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
            t.grad.masked_fill_(self.switched_off, 0.0)  # θ = 0 held: its logit's derivative is not finite
        distributed.average_gradients([param for group in self.optimizer.param_groups for param in group["params"]])
        self.optimizer.step()
        self._after_step()
        return cost.detach() / self.num_train

    @torch.no_grad()
    def _after_step(self):
        """Algorithm 1, steps 3-4 after the update: the projection, θ clipped to [θ_l, θ_h] (and, with a MAC
        target, tilted to it: :mod:`~bayesprune.methods.unit_gates.budget`), and every unit meeting the pruning condition removed from the network at once, but a group's floor
        (:meth:`with_floors`); without one, a layer all of whose units meet it keeps them: a layer is
        never emptied while training."""
        options = self.options
        self.steps += 1
        if options.phi_max < math.inf:
            project_unit_weights(self.net, self.gates, options.phi_max)
        theta = self.gates.raw.clamp_(options.theta_low, options.theta_high)
        if self.constraint is not None:
            self.constraint.tilt(self.gates, self.kept_units, self.switched_off, self.steps)
        theta.masked_fill_(self.switched_off, 0.0)  # remove_at = "epoch": switched off until the epoch's end
        if options.condition == "tolerance":
            off = theta < options.theta_tol
        else:
            torch.maximum(self.theta_max, theta, out=self.theta_max)
            if self.steps <= options.n0:
                return
            off = theta < self.theta_max * (1 - options.theta_per)
        if options.remove_at == "step":
            # the network shrinks at this step: the host reads whether a unit meets the condition
            if bool((off & ~self.switched_off).any()):
                self.remove(self.kept(off))
        else:  # held at 0 from now on (a Bernoulli(0) gate: the unit removed, exactly), decided on the device
            self.switched_off = ~torch.cat(self.kept(off))
            theta.masked_fill_(self.switched_off, 0.0)

    def kept(self, off) -> list:
        """The units to keep, per gated group, when those of ``off`` meet the pruning condition: a group
        all of whose units meet it keeps those not yet switched off, unless it has a floor
        (:meth:`with_floors`). Decided on the device (no value read back)."""
        layers = zip(self.gates.per_layer(off), self.gates.per_layer(self.switched_off), self.floors)
        return self.with_floors(
            [
                ~layer_off if floor else torch.where(layer_off.all(), ~switched, ~layer_off)
                for layer_off, switched, floor in layers
            ]
        )

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
        if self.constraint is not None:
            self.expected_macs_ratio.append(
                float(self.constraint.ratio(self.gates.per_layer(self.gates.raw.detach()), self.kept_units))
            )
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
