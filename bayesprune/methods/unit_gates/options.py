"""``[unit-gates]``: the options of Bernoulli unit gates and the values they may take."""

import math
from dataclasses import dataclass, replace

from bayesprune.core.estimators import ESTIMATORS
from bayesprune.core.validation import (
    FLAG,
    Constraint,
    Rule,
    count,
    interval,
    is_number,
    one_of,
    option,
    optional,
    require,
    scale,
    unit,
    validate,
)
from bayesprune.methods.stages import Stage, Staged
from bayesprune.methods.unit_gates.hyperpriors import BetaHyperPrior, FlatteningHyperPrior, SALHyperPrior

HYPERPRIORS = ("flattening", "beta", "sal")


#: The largest hyper-prior shape (alpha, beta) a config may give: the Beta hyper-prior's default beta is 1e10.
MAX_SHAPE = 1e12

#: A hyper-prior shape (alpha, beta): a positive number up to :data:`MAX_SHAPE`.
SHAPE = Constraint(
    lambda v: is_number(v) and 0 < v <= MAX_SHAPE,
    f"be a positive number up to {MAX_SHAPE:g}",
    refused=(0, -1.0, 1e300, "1", True),
)

CONDITIONS = ("tolerance", "drop")


REMOVE_AT = ("step", "epoch")


@dataclass(frozen=True)
class UnitGatesOptions(Staged):
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
        macs: the fraction of the starting network's MACs to keep (:func:`bayesprune.core.export.count_macs`):
            the gates' expected MACs are held to it while they train and the learned network cut to at most
            it (:mod:`~bayesprune.methods.unit_gates.budget`, not in paper 004). Unset: the largest of
            ``prune.macs`` where that is given (a run's smaller targets are then cut from the fitted network by
            θ), else none (Algorithm 1 as written).
        macs_warmup: the share of Algorithm 1's steps over which the target falls from the starting gates'
            expected MACs to ``macs``.
        finetune_epochs, finetune_lr: fine-tuning of the deterministic smaller network.
        recalibrate: at the end, the batch norms' running statistics of the returned network are
            estimated again on training batches (:func:`bayesprune.core.normalization.recalibrate`, the
            batches ``prune.recalibrate_batches`` defaults to). Not in the paper: those accumulated
            while training describe networks with Bernoulli(θ) gates and moving weights, not the
            deterministic network returned (resnet18 on 1,150 digits: 42% held-out error with them, 5%
            re-estimated; docs/reproductions.md). A network without batch norms is left as it is.
        input_threshold: after training, first-layer weights with |w| below it are zeroed (section
            7.1.1 uses 1e-4 for LeNet-300-100); 0 turns it off.
        reference_rows: the number of training rows N₀ that ``log_gamma`` and ``weight_precision`` are given
            for; a fit on N rows uses log γ · N/N₀ and λ · N/N₀ (:meth:`for_rows`). Unset: they are used as
            given. Section 6 of paper 004 matches both to the data: C0 − C1, the total cost a unit saves, and
            the constants κ, η that bound λ grow linearly with N, so log γ (the least C0 − C1 a unit must
            show to stay, eq. 31) and λ (eq. 12) are per-row quantities times N. The paper's λ = 20 and
            log γ = −25 are for MNIST's N₀ = 60,000 rows; taken as given on 1,150 rows they weigh 52 times
            as much against the data (mobilenet_v3_small on digits: 24.7% held-out error, 4.2% scaled;
            docs/reproductions.md). Only with the Flattening hyper-prior, whose push is −log γ alone.
    """

    weight_precision: float = option(20.0, scale(positive=False))
    hyperprior: str = option("flattening", one_of(HYPERPRIORS))
    log_gamma: float = option(
        -25.0,
        Constraint(
            lambda v: is_number(v) and v < 0,
            "be negative (γ < 1, section 4.2)",
            refused=(0.0, 1.0, 1e300, "-25", True),
            allowed="a negative number",
        ),
    )
    alpha: float | None = option(None, optional(SHAPE))  # every option is checked, whichever hyper-prior reads it
    beta: float | None = option(None, optional(SHAPE))
    eps1: float = option(1e-30, interval(0, 0.5, open_low=True, open_high=True))
    eps2: float = option(1e-30, interval(0, 0.5, open_low=True, open_high=True))
    estimator: str = option("taylor", one_of(ESTIMATORS, sort=True))
    temperature: float = option(0.1, scale())
    hybrid_units: int = option(10, count(0))
    theta_init: float = option(0.5, unit())
    theta_lr: float | None = option(None, optional(scale()))
    remove_at: str = option("step", one_of(REMOVE_AT))
    theta_low: float = option(1e-6, unit())
    theta_high: float = option(1 - 1e-6, unit())
    phi_max: float = option(
        math.inf,
        Constraint(
            lambda v: v == math.inf or (is_number(v) and v > 0),
            "be a positive number or inf",
            refused=(0, -1.0, "inf", True),
            allowed="a positive number or inf",
        ),
    )
    condition: str = option("tolerance", one_of(CONDITIONS))
    theta_tol: float = option(1e-3, unit())
    theta_per: float = option(0.1, unit())
    n0: int = option(2814, count(0))
    final_threshold: float = option(1e-3, unit())
    min_keep_fraction: float = option(0.0, unit(open_low=False))
    macs: float | None = option(None, optional(unit(open_high=False)))
    macs_warmup: float = option(0.5, unit(open_low=False, open_high=False))
    finetune_epochs: int = option(10, count(0))
    finetune_lr: float = option(1e-4, scale())
    input_threshold: float = option(0.0, scale(positive=False))
    recalibrate: bool = option(True, FLAG)
    reference_rows: int | None = option(None, optional(count(1)))

    rules = (
        Rule(
            "reference_rows",
            lambda o: o.reference_rows is None or o.hyperprior == "flattening",
            lambda o: "be unset unless unit-gates.hyperprior = 'flattening' (it scales log_gamma)",
            example={"hyperprior": "beta", "reference_rows": 60000},
        ),
        Rule(
            "theta_init",
            lambda o: o.theta_low < o.theta_init < o.theta_high,
            lambda o: "lie between theta_low and theta_high",
            example={"theta_low": 0.5, "theta_init": 0.4},
        ),
        Rule(
            "beta",
            lambda o: o.hyperprior != "beta" or _given(o.beta, 1e10) > 1,
            lambda o: "be above 1 with unit-gates.hyperprior = 'beta' (eq. 26)",
            example={"hyperprior": "beta", "beta": 0.5},
        ),
    )

    def fit_stages(self, epochs):
        """The gates' stage (``train.epochs``, units removed while it trains), then the smaller network's
        fine-tuning (section 7.1)."""
        return (
            Stage("gates", "the weights and the unit gates θ", epochs),
            Stage("fine-tune", "the smaller network at finetune_lr", self.finetune_epochs, "finetune_epochs"),
        )

    def __post_init__(self):
        validate(self, "unit-gates")

    def for_rows(self, rows: int) -> "UnitGatesOptions":
        """These options for a fit on ``rows`` training rows: log γ and λ times rows/``reference_rows``,
        ``reference_rows`` then unset (the values are the fit's own); unchanged where it is unset."""
        if self.reference_rows is None:
            return self
        ratio = rows / self.reference_rows
        return replace(
            self,
            log_gamma=self.log_gamma * ratio,
            weight_precision=self.weight_precision * ratio,
            reference_rows=None,
        )

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
