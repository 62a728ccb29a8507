"""``[probmask]``: the options of ProbMask and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_int, is_number, is_scale, require

SCOPES = ("global", "layer")


@dataclass(frozen=True)
class ProbMaskOptions:
    """``[probmask]``: budget, schedules and the final mask (paper 002, Algorithm 1, Table 4).

    Training runs ``train.epochs`` = T epochs.

    Attributes:
        sparsity: target fraction of the weights removed (1 − k_f).
        scope: ``"global"`` (one budget for the network) or ``"layer"`` (each layer its own).
        samples: relaxed masks I per step (eq. 5).
        probability_lr: Adam's rate for s (6e-3).
        clip_norm: the gradients of weights and s together are clipped to this norm (3).
        t1, t2: epochs between which k falls from 1 to 1 − ``sparsity`` (eq. 7).
        final_draws: masks drawn from s at the end; the lowest training loss is kept.
        finetune_epochs: fine-tuning of the sparse network.
        supermask: weights frozen at initialisation, only s trained, no fine-tuning (appendix A.2).
        baseline: also run global magnitude pruning + fine-tuning with the same total epochs.
    """

    sparsity: float = 0.99
    scope: str = "global"
    samples: int = 1
    probability_lr: float = 6e-3
    clip_norm: float = 3.0
    t1: int = 16
    t2: int = 60
    final_draws: int = 10
    finetune_epochs: int = 10
    supermask: bool = False
    baseline: bool = True

    def __post_init__(self):
        key = "probmask."
        require(is_number(self.sparsity) and 0 < self.sparsity < 1, key + "sparsity", "lie in (0, 1)", self.sparsity)
        require(self.scope in SCOPES, key + "scope", f"be one of {list(SCOPES)}", self.scope)
        for name in ("probability_lr", "clip_norm"):
            require(
                is_scale(getattr(self, name)),
                key + name,
                f"be a positive number up to {MAX_SCALE:g}",
                getattr(self, name),
            )
        for name in ("samples", "final_draws"):
            require(
                is_count(getattr(self, name)),
                key + name,
                f"be a positive integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        for name in ("t1", "finetune_epochs"):
            require(
                is_count(getattr(self, name), 0),
                key + name,
                f"be a non-negative integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_int(self.t2) and self.t1 < self.t2 <= MAX_COUNT,
            key + "t2",
            f"be an integer above probmask.t1 = {self.t1} up to {MAX_COUNT}",
            self.t2,
        )
        for name in ("supermask", "baseline"):
            require(isinstance(getattr(self, name), bool), key + name, "be true or false", getattr(self, name))
