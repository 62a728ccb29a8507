"""``[sparse-vd]``: the options of Sparse Variational Dropout and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.validation import MAX_COUNT, is_count, is_int, is_number, require
from bayesprune.methods.sparse_vd.distributions import LOG_ALPHA_THRESHOLD


@dataclass(frozen=True)
class SparseVDOptions:
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

    init_log_sigma2: float = -10.0
    threshold: float = LOG_ALPHA_THRESHOLD
    train_clip: bool = True
    kl_anneal_start: int = 5
    kl_anneal_end: int = 20
    linear_lr_decay: bool = True
    lr_decay_start: float = 0.0
    pretrain_epochs: int = 0
    predictive_samples: int = 0

    def __post_init__(self):
        key = "sparse-vd."
        require(
            is_number(self.init_log_sigma2) and -30 <= self.init_log_sigma2 <= 10,
            key + "init_log_sigma2",
            "lie in [-30, 10]",
            self.init_log_sigma2,
        )
        require(
            is_number(self.threshold) and -8 < self.threshold < 8,
            key + "threshold",
            "lie in (-8, 8) (log alpha is clipped to [-8, 8])",
            self.threshold,
        )
        require(isinstance(self.train_clip, bool), key + "train_clip", "be true or false", self.train_clip)
        require(
            is_count(self.kl_anneal_start, 0),
            key + "kl_anneal_start",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.kl_anneal_start,
        )
        require(
            is_int(self.kl_anneal_end) and self.kl_anneal_start <= self.kl_anneal_end <= MAX_COUNT,
            key + "kl_anneal_end",
            f"be an integer from sparse-vd.kl_anneal_start = {self.kl_anneal_start} up to {MAX_COUNT}",
            self.kl_anneal_end,
        )
        require(
            isinstance(self.linear_lr_decay, bool), key + "linear_lr_decay", "be true or false", self.linear_lr_decay
        )
        require(
            is_number(self.lr_decay_start) and 0 <= self.lr_decay_start < 1,
            key + "lr_decay_start",
            "lie in [0, 1)",
            self.lr_decay_start,
        )
        require(
            is_count(self.pretrain_epochs, 0),
            key + "pretrain_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.pretrain_epochs,
        )
        require(
            is_count(self.predictive_samples, 0),
            key + "predictive_samples",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.predictive_samples,
        )
