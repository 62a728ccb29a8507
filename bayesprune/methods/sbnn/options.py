"""``[sbnn]``: the options of the spike-and-slab BNN and the values they may take."""

import math
from dataclasses import dataclass

from bayesprune.core.objectives import OBJECTIVES
from bayesprune.core.penalties import PENALTIES
from bayesprune.core.validation import (
    FLAG,
    Constraint,
    Rule,
    count,
    interval,
    list_of,
    one_of,
    option,
    scale,
    unit,
    validate,
)
from bayesprune.methods.stages import Stage, Staged
from bayesprune.models.priors import SpikeSlabPrior

#: The most starts one fit makes (``sbnn.starts``): each is a whole fit.
MAX_STARTS = 32


#: ``sbnn.keep``: how a fit of several starts keeps one.
KEEP_RULES = ("elbo", "validation")


#: ``sbnn.init``: where q's means start before ``sbnn.starts`` scales them (:func:`~bayesprune.methods.sbnn.fit.initial_means`).
INITS = ("network", "fan-in")


#: ``sbnn.refit``: the start a fit that did not learn is fitted again from (``"none"``: not fitted again).
REFITS = ("fan-in", "none")


#: ``sbnn.score``: what ranks the weights for pruning (:attr:`SBNNFitted.scores`).
SCORES = ("inclusion", "path")


@dataclass(frozen=True)
class SBNNOptions(Staged):
    """``[sbnn]``: prior, guide and objective of the sBNN.

    The defaults below are a config's on packaged or image data; a CSV config takes the packaged
    ``sbnn-table`` config's values (and its ``[optim]``, ``[train]``, ``[model]`` and ``[prune]``) for
    the keys it leaves out: settings chosen on tables' held-out rows (docs/reproductions.md).

    Attributes:
        pi, log_tau0, log_tau1: spike-and-slab prior π, log τ0 < log τ1 (eq. 3.1); the defaults are
            the paper's regression setting (section 4.2).
        init_scale: initial σ of every weight in q.
        init: where q's means start, before ``starts`` scales them: ``"network"``, the network's own
            initial (or given) weights, the paper's; ``"fan-in"``, every weight tensor of a site of two or
            more dimensions rescaled to the standard deviation sqrt(2 / fan-in) of He et al. (2015), which
            keeps a chain of ReLU layers from shrinking its signal layer after layer (PyTorch's default
            ``Linear`` start is sqrt(6) times smaller), its biases as they are. Not in paper 003: from
            PyTorch's start a user's MLP of two hidden layers of 100 lies inside the spike (weights of sd
            0.06 at fan-in 100, τ0 = e^−2 = 0.135); the spike's pull m / τ0² outweighs the data's gradient,
            a product of three small layers, every mean reaches zero within 50 epochs, where that gradient
            vanishes, and the fit stays at the trivial predictor (docs/reproductions.md, The default
            selection with users' networks). Not the default for a user's network: there it emptied
            the selection on diabetes (docs/reproductions.md); a fit that stays in the spike is fitted again
            from it (``refit``).
        refit: where a fit that did not learn (:mod:`~bayesprune.methods.sbnn.learned`: its error on its
            training rows no better than the trivial predictor's) starts again: ``"fan-in"`` (the default), the
            ``"fan-in"`` start of ``init``, in a stage ``"svi refit"`` that replaces the fit (its seed, minibatch
            order and draws the same); ``"none"``, kept as it is. Only that fit: every fit that learns is left as
            it is (one restart of a run, one member of a stack of restarts). The fit records it (``refitted``
            in ``metrics.json``, ``restarts_refitted`` in ``posterior.nc``), and warns where the refit did not
            learn either. Not in paper 003 (docs/reproductions.md, The default selection with users' networks).
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

    pi: float = option(0.5, unit())
    # τ = exp(log τ) is held in float32: beyond ±80 it overflows or vanishes.
    log_tau0: float = option(-6.0, interval(-80, 80))
    log_tau1: float = option(1.0, interval(-80, 80))
    init_scale: float = option(0.01, scale())
    init: str = option("network", one_of(INITS))
    refit: str = option("fan-in", one_of(REFITS))
    objective: str = option("analytic-kl", one_of(OBJECTIVES, sort=True))
    penalty: str = option("uniform", one_of(PENALTIES, sort=True))
    local_reparameterization: bool = option(False, FLAG)
    num_particles: int = option(1, count())
    predictive_samples: int = option(20, count())
    starts: tuple = option(
        (1.0,),
        Constraint(
            lambda v: list_of(scale(), "").accepts(v) and len(v) <= MAX_STARTS,
            f"be a list of 1 to {MAX_STARTS} positive numbers without repeats",
            refused=([], [1.0, 1.0], [0.0], [1.0] * (MAX_STARTS + 1), 1.0),
            convert=tuple,
        ),
    )
    keep: str = option("elbo", one_of(KEEP_RULES))
    score: str = option("inclusion", one_of(SCORES))

    rules = (
        Rule(
            "log_tau0",
            lambda o: o.log_tau0 < o.log_tau1,
            lambda o: f"be below sbnn.log_tau1 = {o.log_tau1} (tau0 < tau1)",
            example={"log_tau0": 1.0, "log_tau1": 0.0},
        ),
    )

    def fit_stages(self, epochs):
        """One variational stage (``train.epochs``) per start (``"svi"``, then ``"svi from start x<factor>"``),
        and as many again (``"svi refit"``, ...) where the fit did not learn and ``refit`` fits it again."""
        return (Stage("svi", "the spike-and-slab posterior q(W) by the ELBO (eq. 3.6)", epochs),)

    def __post_init__(self):
        validate(self, "sbnn")

    def prior(self) -> SpikeSlabPrior:
        return SpikeSlabPrior(pi=self.pi, tau0=math.exp(self.log_tau0), tau1=math.exp(self.log_tau1))
