"""``[sparse-vd]``: the options of Sparse Variational Dropout and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.validation import (
    FLAG,
    MAX_COUNT,
    Constraint,
    Rule,
    count,
    interval,
    is_number,
    option,
    unit,
    validate,
)
from bayesprune.methods.sparse_vd.distributions import LOG_ALPHA_THRESHOLD
from bayesprune.methods.stages import Stage, Staged


@dataclass(frozen=True)
class SparseVDOptions(Staged):
    """``[sparse-vd]``: the variational family, the objective's schedule and the pruning rule.

    Attributes:
        init_log_sigma2: initial log σ² of every weight (−10 in the authors' code); θ starts at the
            network's initial weights.
        threshold: prune where log α exceeds it (3 in the paper, a dropout rate above ~0.95).
        train_clip: zero the weights above ``threshold`` in the pre-activations while training, as
            the authors' code does for LeNets (training then sees the network that will be kept).
        kl_anneal_start, kl_anneal_end: the KL weight is 0 before epoch ``kl_anneal_start`` (0-based),
            rises linearly to 1 at ``kl_anneal_end`` and stays 1 (the authors' 5 and 20).
        linear_lr_decay: decay the rate of ``[optim]`` linearly to 0 at the last epoch, starting
            after the fraction ``lr_decay_start`` of the epochs (the authors': 0 for LeNet-5, 0.5 for
            LeNet-300-100); needs ``optim.schedule = "constant"``. False uses ``[optim]``'s schedule.
        pretrain_epochs: epochs of plain training of the deterministic network (``[optim]``) before
            the variational fit starts from its weights; 0 starts from the initial weights.
        predictive_samples: weight draws W ~ q (pruned weights zeroed) of the Monte-Carlo predictive.
    """

    init_log_sigma2: float = option(-10.0, interval(-30, 10))
    threshold: float = option(
        LOG_ALPHA_THRESHOLD,
        Constraint(
            lambda v: is_number(v) and -8 < v < 8,
            "lie in (-8, 8) (log alpha is clipped to [-8, 8])",
            refused=(-8, 8, 1e300, "3", True),
            allowed="(-8, 8)",
        ),
    )
    train_clip: bool = option(True, FLAG)
    kl_anneal_start: int = option(5, count(0))
    kl_anneal_end: int = option(20, count(0))
    linear_lr_decay: bool = option(True, FLAG)
    lr_decay_start: float = option(0.0, unit(open_low=False))
    pretrain_epochs: int = option(0, count(0))
    predictive_samples: int = option(0, count(0))

    rules = (
        Rule(
            "kl_anneal_end",
            lambda o: o.kl_anneal_start <= o.kl_anneal_end,
            lambda o: f"be an integer from sparse-vd.kl_anneal_start = {o.kl_anneal_start} up to {MAX_COUNT}",
            example={"kl_anneal_start": 10, "kl_anneal_end": 5},
        ),
    )

    def fit_stages(self, epochs):
        """The optional plain pre-training, then the variational stage (``train.epochs``)."""
        return (
            Stage(
                "pretrain", "the deterministic network by maximum likelihood", self.pretrain_epochs, "pretrain_epochs"
            ),
            Stage("svi", "θ and log σ² of every weight by the SGVLB (eq. 3)", epochs),
        )

    def __post_init__(self):
        validate(self, "sparse-vd")
