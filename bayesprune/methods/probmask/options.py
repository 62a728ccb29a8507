"""``[probmask]``: the options of ProbMask and the values they may take."""

import math
from dataclasses import dataclass, replace

from bayesprune.core.validation import FLAG, MAX_COUNT, Rule, count, one_of, option, scale, unit, validate
from bayesprune.methods.stages import Stage, Staged

SCOPES = ("global", "layer")


@dataclass(frozen=True)
class ProbMaskOptions(Staged):
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

    sparsity: float = option(0.99, unit())
    scope: str = option("global", one_of(SCOPES))
    samples: int = option(1, count())
    probability_lr: float = option(6e-3, scale())
    clip_norm: float = option(3.0, scale())
    t1: int = option(16, count(0))
    t2: int = option(60, count(0))
    final_draws: int = option(10, count())
    finetune_epochs: int = option(10, count(0))
    supermask: bool = option(False, FLAG)
    baseline: bool = option(True, FLAG)

    rules = (
        Rule(
            "t2",
            lambda o: o.t1 < o.t2,
            lambda o: f"be an integer above probmask.t1 = {o.t1} up to {MAX_COUNT}",
            example={"t1": 10, "t2": 10},
        ),
    )

    def fit_stages(self, epochs):
        """The masks' stage (``train.epochs``), the fine-tuning of the sparse network (none for a
        supermask) and, with ``baseline``, the magnitude baseline's dense training and fine-tuning."""
        finetune = 0 if self.supermask else self.finetune_epochs
        own = (
            Stage("masks", "the weights and the masks' probabilities s under the budget (Algorithm 1)", epochs),
            Stage("fine-tune", "the sparse network, its mask fixed", finetune, "finetune_epochs"),
        )
        if not self.baseline or self.supermask:
            return own
        return (
            *own,
            Stage("magnitude baseline: dense", "the dense network of the magnitude baseline", epochs),
            Stage(
                "magnitude baseline: fine-tune", "the magnitude baseline's sparse network", finetune, "finetune_epochs"
            ),
        )

    def one_network(self):
        """Without its magnitude baseline (a comparison has its own)."""
        return replace(self, baseline=False)

    def with_epochs(self, epochs, factor):
        """t1 and t2, the epochs between which k falls (eq. 7), at the same fractions of the shorter (or
        longer) main stage: t1 rounded down, t2 rounded and after t1."""
        t1 = math.floor(self.t1 * factor)
        return replace(self, **epochs, t1=t1, t2=max(t1 + 1, round(self.t2 * factor)))

    def __post_init__(self):
        validate(self, "probmask")
