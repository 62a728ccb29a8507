"""``[probmask]``: the options of ProbMask and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.validation import FLAG, MAX_COUNT, Rule, count, one_of, option, scale, unit, validate

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

    def __post_init__(self):
        validate(self, "probmask")
