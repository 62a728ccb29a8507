"""``[saliency]``: the options of one-shot and multi-stage saliency pruning and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.validation import MAX_COUNT, is_count, is_number, require
from bayesprune.methods.saliency.schedules import SPARSITY_SCHEDULES

FINETUNE_MODES = ("best", "all")


@dataclass(frozen=True)
class SaliencyOptions:
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

    criteria: tuple = ("magnitude", "obd", "lm", "qm")
    sparsity: float = 0.9885
    stages: tuple = (1, 140)
    penalties: tuple = (0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    schedule: str = "exponential"
    examples_per_stage: int = 1000
    loss_examples: int = 10_000
    finetune_epochs: int = 400
    finetune: str = "best"

    def __post_init__(self):
        key = "saliency."
        for name in ("criteria", "stages", "penalties"):
            require(isinstance(getattr(self, name), (list, tuple)), key + name, "be a list", getattr(self, name))
            object.__setattr__(self, name, tuple(getattr(self, name)))
        require(
            len(self.criteria) > 0
            and all(isinstance(c, str) and c in CRITERIA for c in self.criteria)
            and len(set(self.criteria)) == len(self.criteria),
            key + "criteria",
            f"be a non-empty list of distinct names of {sorted(CRITERIA)}",
            list(self.criteria),
        )
        require(is_number(self.sparsity) and 0 < self.sparsity < 1, key + "sparsity", "lie in (0, 1)", self.sparsity)
        require(
            len(self.stages) > 0
            and all(is_count(p) for p in self.stages)
            and len(set(self.stages)) == len(self.stages),
            key + "stages",
            f"be a non-empty list of distinct positive integers up to {MAX_COUNT}",
            list(self.stages),
        )
        require(
            len(self.penalties) > 0
            and all(is_number(p) and p >= 0 for p in self.penalties)
            and len(set(self.penalties)) == len(self.penalties),
            key + "penalties",
            "be a non-empty list of distinct non-negative numbers",
            list(self.penalties),
        )
        object.__setattr__(self, "penalties", tuple(float(p) for p in self.penalties))
        require(
            self.schedule in SPARSITY_SCHEDULES,
            key + "schedule",
            f"be one of {list(SPARSITY_SCHEDULES)}",
            self.schedule,
        )
        for name in ("examples_per_stage", "loss_examples"):
            require(
                is_count(getattr(self, name)),
                key + name,
                f"be a positive integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_count(self.finetune_epochs, 0),
            key + "finetune_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.finetune_epochs,
        )
        require(self.finetune in FINETUNE_MODES, key + "finetune", f"be one of {list(FINETUNE_MODES)}", self.finetune)
