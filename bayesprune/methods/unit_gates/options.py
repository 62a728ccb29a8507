"""``[unit-gates]``: the options of Bernoulli unit gates and the values they may take."""

import math
from dataclasses import dataclass

from bayesprune.core.errors import ConfigError
from bayesprune.core.gates import ESTIMATORS
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
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
