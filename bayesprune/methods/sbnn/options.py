"""``[sbnn]``: the options of the spike-and-slab BNN and the values they may take."""

import math
from dataclasses import dataclass

from bayesprune.core.objectives import OBJECTIVES
from bayesprune.core.penalties import PENALTIES
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
from bayesprune.models.priors import SpikeSlabPrior

#: The most starts one fit makes (``sbnn.starts``): each is a whole fit.
MAX_STARTS = 32


#: ``sbnn.keep``: how a fit of several starts keeps one.
KEEP_RULES = ("elbo", "validation")


#: ``sbnn.score``: what ranks the weights for pruning (:attr:`SBNNFitted.scores`).
SCORES = ("inclusion", "path")


@dataclass(frozen=True)
class SBNNOptions:
    """``[sbnn]``: prior, guide and objective of the sBNN.

    The defaults below are a config's on packaged or image data; a CSV config takes the packaged
    ``sbnn-table`` config's values (and its ``[optim]``, ``[train]``, ``[model]`` and ``[prune]``) for
    the keys it leaves out: settings chosen on tables' held-out rows (docs/reproductions.md).

    Attributes:
        pi, log_tau0, log_tau1: spike-and-slab prior π, log τ0 < log τ1 (eq. 3.1); the defaults are
            the paper's regression setting (section 4.2).
        init_scale: initial σ of every weight in q.
        objective: a key of :data:`bayesprune.core.objectives.OBJECTIVES`.
        penalty: minibatch penalty scheme, ``uniform`` (eq. 4.2) or ``geometric`` (eq. 4.3).
        local_reparameterization: sample pre-activations instead of weights (linear layers only).
        num_particles: Monte-Carlo draws of W per step.
        predictive_samples: draws W ~ q(W) of the Monte-Carlo predictive.
        starts: one fit per factor, each from the network's initial weights and biases multiplied by
            it (``[1.0]``, the default: the paper's single fit). Not in paper 003, which fits once: on
            UCI the usual start ends in a dense optimum and smaller starts reach sparser ones of higher
            ELBO, whose curves stay flat to 25% removed but not to 50% (docs/reproductions.md, UCI
            regression), so several starts and a rule to keep one.
        keep: which start's fit is kept, by a rule that reads no test data: ``"elbo"``, the highest
            ELBO −J (eq. 3.6) on the training rows (:func:`elbo`), the paper's own objective;
            ``"validation"``, the lowest error on the training rows ``train.validation`` holds out.
        score: what ranks the weights for pruning: ``"inclusion"``, the inclusion logit B − A (eq. 3.8),
            the paper's; ``"path"``, that logit capped by the logit of the importance (section 3.5) of
            the node the weight feeds (:func:`~bayesprune.analysis.importance.path_scores`), so that
            the weights into a hidden unit whose output weights sit in the spike go with the spike.
            Not in paper 003: on UCI energy, whose fit keeps 90% of its input weights in the slab but
            half its hidden units unused, it holds the curve to 50% removed (docs/reproductions.md,
            UCI regression).
    """

    pi: float = 0.5
    log_tau0: float = -6.0
    log_tau1: float = 1.0
    init_scale: float = 0.01
    objective: str = "analytic-kl"
    penalty: str = "uniform"
    local_reparameterization: bool = False
    num_particles: int = 1
    predictive_samples: int = 20
    starts: tuple = (1.0,)
    keep: str = "elbo"
    score: str = "inclusion"

    def __post_init__(self):
        require(is_number(self.pi) and 0 < self.pi < 1, "sbnn.pi", "lie in (0, 1)", self.pi)
        # τ = exp(log τ) is held in float32: beyond ±80 it overflows or vanishes.
        require(
            is_number(self.log_tau0) and abs(self.log_tau0) <= 80, "sbnn.log_tau0", "lie in [-80, 80]", self.log_tau0
        )
        require(
            is_number(self.log_tau1) and abs(self.log_tau1) <= 80, "sbnn.log_tau1", "lie in [-80, 80]", self.log_tau1
        )
        require(
            self.log_tau0 < self.log_tau1,
            "sbnn.log_tau0",
            f"be below sbnn.log_tau1 = {self.log_tau1} (tau0 < tau1)",
            self.log_tau0,
        )
        require(
            is_scale(self.init_scale), "sbnn.init_scale", f"be a positive number up to {MAX_SCALE:g}", self.init_scale
        )
        require(self.objective in OBJECTIVES, "sbnn.objective", f"be one of {sorted(OBJECTIVES)}", self.objective)
        require(self.penalty in PENALTIES, "sbnn.penalty", f"be one of {sorted(PENALTIES)}", self.penalty)
        require(
            isinstance(self.local_reparameterization, bool),
            "sbnn.local_reparameterization",
            "be true or false",
            self.local_reparameterization,
        )
        require(
            is_count(self.num_particles),
            "sbnn.num_particles",
            f"be a positive integer up to {MAX_COUNT}",
            self.num_particles,
        )
        require(
            is_count(self.predictive_samples),
            "sbnn.predictive_samples",
            f"be a positive integer up to {MAX_COUNT}",
            self.predictive_samples,
        )
        require(isinstance(self.starts, (list, tuple)), "sbnn.starts", "be a list", self.starts)
        object.__setattr__(self, "starts", tuple(self.starts))
        require(
            0 < len(self.starts) <= MAX_STARTS
            and all(is_scale(factor) for factor in self.starts)
            and len(set(self.starts)) == len(self.starts),
            "sbnn.starts",
            f"be a list of 1 to {MAX_STARTS} positive numbers without repeats",
            list(self.starts),
        )
        require(self.keep in KEEP_RULES, "sbnn.keep", f"be one of {list(KEEP_RULES)}", self.keep)
        require(self.score in SCORES, "sbnn.score", f"be one of {list(SCORES)}", self.score)

    def prior(self) -> SpikeSlabPrior:
        return SpikeSlabPrior(pi=self.pi, tau0=math.exp(self.log_tau0), tau1=math.exp(self.log_tau1))
