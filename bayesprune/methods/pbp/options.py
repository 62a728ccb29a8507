"""``[pbp]``: the options of PAC-Bayes pruning and the values they may take."""

from dataclasses import dataclass, replace

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.gates import PARAMETERIZATIONS
from bayesprune.core.validation import (
    FLAG,
    TABLE,
    Constraint,
    Rule,
    count,
    interval,
    one_of,
    option,
    scale,
    unit,
    validate,
)
from bayesprune.methods.pbp.start import is_start_method, start_method
from bayesprune.methods.stages import Stage, Staged, stages_of

#: Ways of drawing networks from Q to estimate its Gibbs risk (:func:`gibbs_errors`).
SAMPLING = ("networks", "examples")


#: Most draws per example with ``sampling = "examples"`` (each as costly as hundreds of whole networks).
MAX_PER_EXAMPLE_DRAWS = 100


@dataclass(frozen=True)
class PBPOptions(Staged):
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

    alpha: float = option(0.5, unit())
    sparsity: float = option(0.9, unit())
    start_mask: str = option(
        "magnitude",
        Constraint(
            lambda v: isinstance(v, str) and (v in CRITERIA or is_start_method(v)),
            f"be a criterion of {sorted(CRITERIA)} or a method (other than pbp)",
            refused=("no-such-criterion", "pbp", 1),
            allowed=f"a criterion of {sorted(CRITERIA)} or a method (other than pbp)",
        ),
    )
    start_options: dict = option(constraint=TABLE, factory=dict)
    start_optim: dict = option(constraint=TABLE, factory=dict)
    epsilon: float = option(1e-4, unit())
    log_sigma2: float = option(-9.0, interval(-40, 10))
    prior_epochs: int = option(30, count(0))
    prior_mask_epochs: int = option(30, count(0))
    learn_scale: bool = option(True, FLAG)
    parameterization: str = option("sigmoid", one_of(PARAMETERIZATIONS))
    temperature: float = option(0.5, scale())
    min_prob: float = option(1e-4, unit())
    delta: float = option(0.05, unit())
    grid_size: int = option(1, count())
    mc_samples: int = option(1000, count())
    sampling: str = option("networks", one_of(SAMPLING))
    prior_samples: int = option(100, count())

    rules = (
        Rule(
            "epsilon",
            lambda o: o.sparsity * o.epsilon / (1 - o.sparsity) < 1,
            lambda o: f"satisfy s·ε/(1 − s) < 1 at s = {o.sparsity} (eq. 6)",
            example={"sparsity": 0.99, "epsilon": 0.5},
        ),
        *(
            Rule(
                name,
                lambda o, name=name: not getattr(o, name) or is_start_method(o.start_mask),
                lambda o: "be empty when pbp.start_mask is a criterion",
                example={"start_mask": "magnitude", name: {"lr": 0.1}},
            )
            for name in ("start_options", "start_optim")
        ),
        Rule(
            "mc_samples",
            lambda o: o.sampling == "networks" or o.mc_samples <= MAX_PER_EXAMPLE_DRAWS,
            lambda o: (
                f"be at most {MAX_PER_EXAMPLE_DRAWS} with pbp.sampling = 'examples' (each draw is a network for "
                "every example; 1 already gives m = n)"
            ),
            example={"sampling": "examples", "mc_samples": MAX_PER_EXAMPLE_DRAWS + 1},
        ),
    )

    def fit_stages(self, epochs):
        """Stage 1 (the network on S_P for ``prior_epochs``, or the stages of the method ``start_mask``
        names, its main stage ``prior_epochs`` long and its other stages as its own options set them),
        stage 2 (the prior's masks) and stage 3 (the posterior, ``train.epochs``)."""
        if is_start_method(self.start_mask):
            method, own, _ = start_method(self)
            first = tuple(
                replace(stage, option="prior_epochs" if stage.option is None else f"start_options.{stage.option}")
                for stage in stages_of(own, self.prior_epochs)
            )
        else:
            first = (Stage("stage 1", "the network on S_P", self.prior_epochs, "prior_epochs"),)
        return (
            *first,
            Stage("stage 2", "the prior's keep-probabilities on S_P", self.prior_mask_epochs, "prior_mask_epochs"),
            Stage("stage 3", "the posterior Q by the PAC-Bayes bound on S \\ S_P", epochs),
        )

    def __post_init__(self):
        validate(self, "pbp")
        if is_start_method(self.start_mask):
            start_method(self)  # the start method's own table and [optim], checked by their own declarations
