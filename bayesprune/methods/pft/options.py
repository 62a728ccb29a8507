"""``[pft]``: the options of probabilistic fine-tuning and the values they may take."""

from dataclasses import dataclass

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.gates import INITS, PARAMETERIZATIONS
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require


@dataclass(frozen=True)
class PFTOptions:
    """``[pft]``: start masks, sparsities and the stages of PFT (paper 000, appendix D.3).

    The mask stage runs ``train.epochs`` epochs; every stage uses ``[optim]`` (SGD with momentum 0.9 at
    0.01 in the paper) and ``data.batch_size``.

    Attributes:
        start_masks: criteria of :data:`bayesprune.core.criteria.CRITERIA` (``magnitude``, ``snip``, ``random``).
        sparsities: target sparsities s (fraction of the weights removed; biases are not pruned).
        init: ``"block"`` (block-isotropic λ⁰ of eq. 6) or ``"isotropic"`` (λ⁰ = 1 − s, appendix A.1).
        epsilon: ε of eq. 6.
        parameterization: ``"clamp"`` (Fig. 1) or ``"sigmoid"`` (appendix B.1).
        temperature: β of the Concrete relaxation (0.5).
        mask_lr: learning rate of λ in the mask stage (no weight decay); ``None`` for ``optim.lr``, as in
            the paper (appendix D.3: stage 2's rate, 0.01 on MNIST). At 0.01 a λ ∈ [0, 1] moves about
            0.1 in 30 epochs on LeNet-300-100 (∂L/∂λ ≈ w·∂L/∂w ~ 1e-4) and PFT kept 99.86-99.99% of
            every start mask; the packaged MNIST configs deviate with 2.0, chosen on held-out
            training images (issue 27, ``docs/reproductions.md``).
        pretrain_epochs, finetune_epochs: stage 1 and the fine-tuning of the sparse network.
        at_initialization: skip stage 1: the masks are found on the weights at initialisation (E.2).
        masks_only: train λ alone on the weights at initialisation, no weight training at all (E.3).
        saliency_examples: training examples the data-dependent criteria (SNIP) read.
        perturbation_scales: standard deviations, relative to each layer's weight RMS in the dense
            network, of the Gaussian noise added to the kept weights of the dense and the PFT network
            (Fig. 2 right).
        perturbation_draws: noise draws per scale.
        equal_budget_baseline: also fine-tune the one-shot mask for ``train.epochs`` more epochs, so that
            it has trained as long as PFT's mask and fine-tuning stages together
            (``osp_equal_epochs_test_error``): the paper's comparison gives PFT those extra epochs.
    """

    start_masks: tuple = ("magnitude", "snip", "random")
    sparsities: tuple = (0.95, 0.99)
    init: str = "block"
    epsilon: float = 1e-4
    parameterization: str = "clamp"
    temperature: float = 0.5
    mask_lr: float | None = None
    pretrain_epochs: int = 30
    finetune_epochs: int = 30
    at_initialization: bool = False
    masks_only: bool = False
    saliency_examples: int = 1000
    perturbation_scales: tuple = (0.1, 0.2, 0.5, 1.0)
    perturbation_draws: int = 5
    equal_budget_baseline: bool = True

    def __post_init__(self):
        key = "pft."
        for name in ("start_masks", "sparsities", "perturbation_scales"):
            require(isinstance(getattr(self, name), (list, tuple)), key + name, "be a list", getattr(self, name))
            object.__setattr__(self, name, tuple(getattr(self, name)))
        require(
            len(self.start_masks) > 0
            and all(name in CRITERIA for name in self.start_masks)
            and len(set(self.start_masks)) == len(self.start_masks),
            key + "start_masks",
            f"be a non-empty list of {sorted(CRITERIA)} without repeats",
            list(self.start_masks),
        )
        require(
            len(self.sparsities) > 0
            and all(is_number(s) and 0 < s < 1 for s in self.sparsities)
            and len(set(self.sparsities)) == len(self.sparsities),
            key + "sparsities",
            "be a non-empty list of numbers in (0, 1) without repeats",
            list(self.sparsities),
        )
        require(self.init in INITS, key + "init", f"be one of {list(INITS)}", self.init)
        require(
            self.parameterization in PARAMETERIZATIONS,
            key + "parameterization",
            f"be one of {list(PARAMETERIZATIONS)}",
            self.parameterization,
        )
        require(is_number(self.epsilon) and 0 < self.epsilon < 1, key + "epsilon", "lie in (0, 1)", self.epsilon)
        if self.init == "block":
            worst = max(self.sparsities)
            require(
                worst * self.epsilon / (1 - worst) < 1,
                key + "epsilon",
                f"satisfy s·ε/(1 − s) < 1 at s = {worst} (eq. 6)",
                self.epsilon,
            )
        require(
            is_scale(self.temperature),
            key + "temperature",
            f"be a positive number up to {MAX_SCALE:g}",
            self.temperature,
        )
        require(
            self.mask_lr is None or is_scale(self.mask_lr),
            key + "mask_lr",
            f"be a positive number up to {MAX_SCALE:g} (or absent, for optim.lr)",
            self.mask_lr,
        )
        for name in ("pretrain_epochs", "finetune_epochs", "perturbation_draws"):
            require(
                is_count(getattr(self, name), 0),
                key + name,
                f"be a non-negative integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(
            is_count(self.saliency_examples),
            key + "saliency_examples",
            f"be a positive integer up to {MAX_COUNT}",
            self.saliency_examples,
        )
        for name in ("at_initialization", "masks_only", "equal_budget_baseline"):
            require(isinstance(getattr(self, name), bool), key + name, "be true or false", getattr(self, name))
        require(
            all(is_number(s) and s > 0 for s in self.perturbation_scales),
            key + "perturbation_scales",
            "be a list of positive numbers",
            list(self.perturbation_scales),
        )
