"""``[saliency]``: the options of one-shot and multi-stage saliency pruning and the values they may take."""

from dataclasses import dataclass, replace

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.validation import MAX_COUNT, Constraint, count, list_of, one_of, option, scale, unit, validate
from bayesprune.methods.saliency.schedules import SPARSITY_SCHEDULES
from bayesprune.methods.stages import Stage, Staged

FINETUNE_MODES = ("best", "all")


@dataclass(frozen=True)
class SaliencyOptions(Staged):
    """``[saliency]``: the grid of criteria, stages and penalties, and the training around it (paper 001,
    appendix B: MLP on MNIST).

    Every training phase uses ``[optim]`` (SGD at 0.01 with momentum 0.9 in the paper; its ``schedule``
    is applied per epoch; its ``weight_decay`` is the paper's l2 of 5e-4) and ``data.batch_size`` (100).

    Attributes:
        criteria: criteria of :data:`bayesprune.core.criteria.CRITERIA` (``magnitude`` = MP, ``obd``, ``lm``,
            ``qm``; also ``snip``, ``random``).
        sparsity: κ, the fraction of the weights removed (biases are never pruned); 0.9885 for the MLP.
        stages: the numbers of pruning stages π to compare (the paper's tables use π = 140).
        penalties: the step-size penalties λ ≥ 0 to compare (λ/2 · θ_k² added to every saliency,
            section 3.2). The default 0 and 1e-3 … 10 by decades spans Fig. 1's range: λ = 0 is the
            criterion as published, λ = 10 already ranks nearly like MP on a trained MLP (and appendix
            B's ImageNet grid is {0, 1e-3, 1e-1, 10}).
        schedule: ``"exponential"`` (κ_i = 1 − (1 − κ)^{i/π}, the paper's choice) or ``"linear"``
            (:func:`bayesprune.methods.saliency.schedules.sparsity_schedule`).
        examples_per_stage: training examples drawn at random at every stage for the saliencies (1000).
        loss_examples: training examples (a fixed random subset, drawn once) on which ΔL is measured;
            all of the training set when it has fewer.
        finetune_epochs: fine-tuning of each pruned network, mask fixed (the paper: the same as training).
        finetune: ``"best"`` fine-tunes the point of lowest ΔL over λ for each criterion and π;
            ``"all"`` fine-tunes every grid point (Spearman's ρ needs it).
    """

    criteria: tuple = option(
        ("magnitude", "obd", "lm", "qm"),
        Constraint(
            list_of(one_of(CRITERIA), "").accepts,
            f"be a non-empty list of distinct names of {sorted(CRITERIA)}",
            refused=([], ["magnitude", "magnitude"], ["no-such-criterion"], "magnitude"),
            convert=tuple,
        ),
    )
    sparsity: float = option(0.9885, unit())
    stages: tuple = option((1, 140), list_of(count(), f"positive integers up to {MAX_COUNT}"))
    penalties: tuple = option(
        (0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0),
        list_of(scale(positive=False), "non-negative numbers", convert=lambda v: tuple(map(float, v))),
    )
    schedule: str = option("exponential", one_of(SPARSITY_SCHEDULES))
    examples_per_stage: int = option(1000, count())
    loss_examples: int = option(10_000, count())
    finetune_epochs: int = option(400, count(0))
    finetune: str = option("best", one_of(FINETUNE_MODES))

    def fit_stages(self, epochs):
        """The dense network (``train.epochs``), then the fine-tuning of each pruned network it keeps
        (mask fixed; the pruning stages between train nothing)."""
        return (
            Stage("dense", "the dense network", epochs),
            Stage("fine-tune", "each kept pruned network, its mask fixed", self.finetune_epochs, "finetune_epochs"),
        )

    def one_network(self):
        """The grid of the network its row reports: the first criterion at the most stages, its best
        penalty alone fine-tuned (``finetune = "best"``)."""
        return replace(self, criteria=self.criteria[:1], stages=(max(self.stages),), finetune="best")

    def __post_init__(self):
        validate(self, "saliency")
