"""``[pbp]``: the options of PAC-Bayes pruning and the values they may take."""

from dataclasses import dataclass, field

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.gates import PARAMETERIZATIONS
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
from bayesprune.methods.pbp.start import is_start_method, start_method

#: Ways of drawing networks from Q to estimate its Gibbs risk (:func:`gibbs_errors`).
SAMPLING = ("networks", "examples")


#: Most draws per example with ``sampling = "examples"`` (each as costly as hundreds of whole networks).
MAX_PER_EXAMPLE_DRAWS = 100


@dataclass(frozen=True)
class PBPOptions:
    """``[pbp]``: the split, prior, posterior and certificate of PAC-Bayes pruning (paper 000, appendix D.2).

    Stage 3 runs ``train.epochs`` epochs; every stage uses ``[optim]`` and ``data.batch_size``.

    Attributes:
        alpha: fraction α = |S_P| / |S| of the training set the prior is trained on.
        sparsity: expected sparsity s of the prior (eq. 6), weights only.
        start_mask: criterion λ⁰ is initialised from (``magnitude`` in section 7.1), or a registered
            method fitted on S_P in place of stage 1, its mask at ``sparsity`` giving λ⁰ (a certificate for
            that method's mask; :mod:`.start`).
        start_options: that method's own options (its table; its sparsity option is ``sparsity``).
        start_optim: its ``[optim]`` (default: the run's).
        epsilon: ε of eq. 6 (1e-4).
        log_sigma2: log σ⁰² of every slab of the prior (tuned in [−15, −3] in the paper).
        prior_epochs, prior_mask_epochs: stages 1 and 2.
        learn_scale: train the posterior's σ in stage 3.
        parameterization, temperature: of the keep-probabilities (B.1; sigmoid in Fig. 4) and of the
            Concrete relaxation (β = 0.5).
        min_prob: p_min of the bounded cross-entropy (appendix A.3).
        delta: confidence of the certificate (0.05).
        grid_size: hyper-parameter settings searched for this run (the union bound of appendix D.2).
        mc_samples: networks drawn from Q per example to estimate its empirical and test risks.
        sampling: ``"networks"`` (appendix A.3: ``mc_samples`` networks, each on every example) or
            ``"examples"`` (a network of its own for every example and draw; see :func:`gibbs_errors`).
        prior_samples: networks drawn from P to estimate its test error.
    """

    alpha: float = 0.5
    sparsity: float = 0.9
    start_mask: str = "magnitude"
    start_options: dict = field(default_factory=dict)
    start_optim: dict = field(default_factory=dict)
    epsilon: float = 1e-4
    log_sigma2: float = -9.0
    prior_epochs: int = 30
    prior_mask_epochs: int = 30
    learn_scale: bool = True
    parameterization: str = "sigmoid"
    temperature: float = 0.5
    min_prob: float = 1e-4
    delta: float = 0.05
    grid_size: int = 1
    mc_samples: int = 1000
    sampling: str = "networks"
    prior_samples: int = 100

    def __post_init__(self):
        key = "pbp."
        for name in ("alpha", "sparsity", "epsilon", "min_prob", "delta"):
            require(
                is_number(getattr(self, name)) and 0 < getattr(self, name) < 1,
                key + name,
                "lie in (0, 1)",
                getattr(self, name),
            )
        require(
            self.sparsity * self.epsilon / (1 - self.sparsity) < 1,
            key + "epsilon",
            f"satisfy s·ε/(1 − s) < 1 at s = {self.sparsity} (eq. 6)",
            self.epsilon,
        )
        require(
            self.start_mask in CRITERIA or is_start_method(self.start_mask),
            key + "start_mask",
            f"be a criterion of {sorted(CRITERIA)} or a method (other than pbp)",
            self.start_mask,
        )
        for name in ("start_options", "start_optim"):
            require(isinstance(getattr(self, name), dict), key + name, "be a table", getattr(self, name))
            require(
                not getattr(self, name) or is_start_method(self.start_mask),
                key + name,
                "be empty when pbp.start_mask is a criterion",
                getattr(self, name),
            )
        if is_start_method(self.start_mask):
            start_method(self)
        require(
            is_number(self.log_sigma2) and -40 <= self.log_sigma2 <= 10,
            key + "log_sigma2",
            "lie in [-40, 10]",
            self.log_sigma2,
        )
        require(
            self.parameterization in PARAMETERIZATIONS,
            key + "parameterization",
            f"be one of {list(PARAMETERIZATIONS)}",
            self.parameterization,
        )
        require(
            is_scale(self.temperature),
            key + "temperature",
            f"be a positive number up to {MAX_SCALE:g}",
            self.temperature,
        )
        require(isinstance(self.learn_scale, bool), key + "learn_scale", "be true or false", self.learn_scale)
        for name in ("prior_epochs", "prior_mask_epochs"):
            require(
                is_count(getattr(self, name), 0),
                key + name,
                f"be a non-negative integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        for name in ("grid_size", "mc_samples", "prior_samples"):
            require(
                is_count(getattr(self, name)),
                key + name,
                f"be a positive integer up to {MAX_COUNT}",
                getattr(self, name),
            )
        require(self.sampling in SAMPLING, key + "sampling", f"be one of {list(SAMPLING)}", self.sampling)
        require(
            self.sampling == "networks" or self.mc_samples <= MAX_PER_EXAMPLE_DRAWS,
            key + "mc_samples",
            f"be at most {MAX_PER_EXAMPLE_DRAWS} with pbp.sampling = 'examples' (each draw is a network for every "
            "example; 1 already gives m = n)",
            self.mc_samples,
        )
