"""PAC-Bayes pruning (PBP) with a self-bounded certificate (paper 000, sections 5-6; appendices A, B, D.2).

The training set S is split at random into S_P (a fraction α) and S \\ S_P (n = (1 − α)|S| examples).

1. Stage 1 trains the network on S_P.
2. Stage 2 sets keep-probabilities λ⁰ from a one-shot criterion on those weights (block-isotropic,
   eq. 6) and trains the stochastic network (1 − λ⁰)δ₀ + λ⁰N(W⁰, σ⁰²) (eq. 5) on S_P by its
   empirical Gibbs risk, in λ⁰ and W⁰ with σ⁰ fixed (appendix D.2 tunes one σ⁰ on a grid). This is
   the data-dependent prior P.
3. Stage 3 starts the posterior Q of the same family at P and minimises Theorem 1 (eq. 4) in λ, μ
   and σ through SVI (:class:`~bayesprune.core.objectives.PACBayesBound`), with the bounded cross-entropy
   (appendix A.3) as the [0, 1]-valued surrogate loss. Its empirical term is measured on S \\ S_P,
   the examples the bound's empirical risk is taken on (the paper says stage 3 uses "all the training
   data S"; the bound holds for any Q, but the term it contains is R̂ on S \\ S_P, and that is what is
   minimised here).

S is the training data the fit is given: with ``train.validation`` > 0, what is left once the
validation rows are held out (they are neither S_P nor S \\ S_P). The certificate
(:func:`bayesprune.core.bounds.certificate`) bounds the 0-1 Gibbs risk of Q: its empirical risk on
S \\ S_P estimated from networks drawn from Q (``mc_samples`` networks on every example, appendix A.3,
or with ``sampling = "examples"`` a network of its own for every example), with its own confidence
bound, in Theorem 1 and Theorem 2 under a union over δ and the ``grid_size`` hyper-parameter settings searched.
Theorem 1 holds for a prior chosen without the n examples the risk is measured on, so the fit records
those rows (their indices in the training split as loaded, and a digest of their examples) and
``bayesprune certify`` measures the risk on exactly them, never on rows rebuilt from a config.
Biases carry Gaussian slabs with λ = λ⁰ = 1, so the KL covers every parameter.
"""

import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyro
import torch
from pyro.optim import PyroLRScheduler
from torch.distributions import kl_divergence

from bayesprune.core import bounds
from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.criteria import CRITERIA, saliency, weight_sites
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.gates import PARAMETERIZATIONS, block_isotropic
from bayesprune.core.loop import check_stop, svi_step
from bayesprune.core.optim import build_optim
from bayesprune.core.tasks import chunks, mean_loss, rows_at
from bayesprune.core.validation import MAX_COUNT, MAX_SCALE, is_count, is_number, is_scale, require
from bayesprune.methods import SERVICES, Method, register_method
from bayesprune.methods.base import GuideFitted
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.pbp.guide import DiracSpikeSlabGuide
from bayesprune.methods.pbp.objectives import GibbsRisk, PACBayesBound
from bayesprune.methods.pbp.start import fit_start, is_start_method, start_method
from bayesprune.models import BayesianNetwork, BoundedCategorical, Categorical
from bayesprune.models.priors import GivenPrior

#: Rows per forward pass when a sampled network is scored on a data split.
EVALUATION_CHUNK = 10_000
#: Ways of drawing networks from Q to estimate its Gibbs risk (:func:`gibbs_errors`).
SAMPLING = ("networks", "examples")
#: Weights drawn at once when every example has a network of its own (about 64 MB of float32).
PER_EXAMPLE_WEIGHTS = 2**24
#: Most draws per example with ``sampling = "examples"`` (each as costly as hundreds of whole networks).
MAX_PER_EXAMPLE_DRAWS = 100
#: Examples of S_P a data-dependent start criterion (SNIP) reads, as PFT's ``saliency_examples``.
SALIENCY_EXAMPLES = 1000


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


def split_rows(num_train: int, alpha: float, seed: int) -> tuple:
    """Row indices of S_P (the first ⌊α·N⌋ of a permutation drawn from ``seed``) and of S \\ S_P."""
    order = torch.randperm(num_train, generator=torch.Generator().manual_seed(seed))
    cut = math.floor(alpha * num_train)
    return order[:cut], order[cut:]


def examples_digest(x, y) -> str:
    """SHA-256 of the examples ``(x, y)`` in their order: the fingerprint of S \\ S_P a certificate checks."""
    digest = hashlib.sha256()
    for tensor in (*chunks(x, EVALUATION_CHUNK), y):  # x's rows in order: the bytes of the whole tensor
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def bound_examples(fitted, data) -> tuple:
    """``(x, y)`` of the fit's S \\ S_P, found in ``data`` by the rows the fit recorded: ``data`` is the
    training split as loaded (``bayesprune certify``) or the part of it the fit was given
    (``extras["train_rows"]``, :func:`bayesprune.core.early_stopping.hold_out`).

    Raises:
        BayesPruneError: the fit recorded no rows (a checkpoint before they were), ``data`` lacks one of
            them, or its examples there are not the ones the fit certified on (the data changed).
    """
    if fitted.bound_rows is None:
        raise BayesPruneError(
            "this PBP fit was saved before the rows of S \\ S_P were recorded; fit it again to certify it"
        )
    given = data.extras.get("train_rows", torch.arange(data.num_train))
    position = torch.full((max(int(given.max()), int(fitted.bound_rows.max())) + 1,), -1, dtype=torch.int64)
    position[given] = torch.arange(len(given))
    local = position[fitted.bound_rows]
    if (
        bool((local < 0).any())
        or examples_digest(rows_at(data.x_train, local), data.y_train[local]) != fitted.bound_digest
    ):
        raise BayesPruneError(
            f"the training data does not hold the {len(local)} examples of S \\ S_P this fit certified on, "
            "at the rows it recorded (its data or data options changed)"
        )
    return rows_at(data.x_train, local), data.y_train[local]


@torch.no_grad()
def gibbs_errors(model, guide, x, y, *, samples: int, sampling: str = "networks") -> torch.Tensor:
    """Independent estimates, each in [0, 1], whose mean estimates the 0-1 Gibbs risk of ``guide`` on (x, y).

    ``"networks"`` (appendix A.3, Langford & Caruana's sample convergence): the error of each of
    ``samples`` networks drawn from Q on all of (x, y), one value per network. ``"examples"``: the
    0-1 loss of a network drawn for each example and draw, ``samples`` · len(y) values. Both means have
    the Gibbs risk as their expectation, and both sets are independent variables in [0, 1], so the
    kl form of Hoeffding's inequality (Hoeffding 1963, Thm. 1, which does not need them identically
    distributed) bounds the Gibbs risk by :func:`bayesprune.core.bounds.sample_risk_bound` of their mean with
    m = the number of values. The per-example draws give m = n instead of the number of networks, so a
    much smaller slack for the same number of weight draws (a deviation from the paper's procedure,
    not from its theorem).
    """
    if sampling == "examples":
        return _per_example_errors(model, guide, x, y, draws=samples)
    errors = []
    for _ in range(samples):
        check_stop("while drawing networks from the posterior")
        params = guide.sample_params()
        wrong = sum(
            int((model.network(params, xs).argmax(-1) != ys).sum())
            for xs, ys in zip(chunks(x, EVALUATION_CHUNK), torch.split(y, EVALUATION_CHUNK))
        )
        errors.append(wrong / len(y))
    return torch.tensor(errors, dtype=torch.float64)


def _per_example_errors(model, guide, x, y, *, draws: int) -> torch.Tensor:
    """The 0-1 loss of a network drawn from ``guide`` for each example of (x, y), ``draws`` times."""
    posteriors = guide.posteriors()
    weights = sum(q.loc.numel() for q in posteriors.values())
    chunk = max(1, min(EVALUATION_CHUNK, PER_EXAMPLE_WEIGHTS // weights))
    forward = torch.func.vmap(lambda params, example: model.network(params, example[None])[0])
    wrong = []
    for _ in range(draws):
        for xs, ys in zip(chunks(x, chunk), torch.split(y, chunk)):
            check_stop("while drawing networks from the posterior")
            params = {name: q.sample((len(xs),)) for name, q in posteriors.items()}
            wrong.append(forward(params, xs).argmax(-1) != ys)
    return torch.cat(wrong).double().cpu()


def network_kl(guide, priors: dict) -> float:
    """KL(Q ‖ P) summed over every site of the guide, in float64 (the term of eqs. 4 and 7)."""
    with torch.no_grad():
        return float(sum(kl_divergence(q, priors[name]).double().sum() for name, q in guide.posteriors().items()))


class PBPFitted(GuideFitted):
    """The posterior Q of PAC-Bayes pruning: its point estimate is the most probable mask on μ, its
    Monte-Carlo predictive the Gibbs predictor's average; scores are logit λ of every weight."""

    method = "pbp"
    score_name = "keep logit"

    def __init__(
        self,
        model,
        guide,
        priors: dict,
        *,
        bound_rows,
        bound_digest,
        alpha: float,
        history=None,
        seconds=0.0,
        report=None,
        predictive_samples: int = 20,
    ):
        super().__init__(model, guide, history=history, seconds=seconds, predictive_samples=predictive_samples)
        # S \ S_P, the rows the prior never saw: the certificate is valid on these rows only, so they are
        # kept with the fit (indices in the training split as loaded, and their examples' digest), never
        # rebuilt from an editable config; None for a checkpoint written before they were recorded.
        self.priors, self.bound_rows, self.bound_digest, self.alpha = priors, bound_rows, bound_digest, alpha
        self.report = report or {}

    def scores(self) -> dict:
        return self.guide.masks.logits()

    def metrics(self) -> dict:
        return dict(self.report)

    def state_dict(self) -> dict:
        return {
            "guide": {k: v.detach().clone() for k, v in self.guide.state_dict().items()},
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "prior": {
                name: {"probs": p.probs.clone(), "loc": p.loc.clone(), "scale": p.scale.clone()}
                for name, p in self.priors.items()
            },
            **(
                {}
                if self.bound_rows is None
                else {"bound_rows": self.bound_rows.clone(), "bound_digest": self.bound_digest}
            ),
            "alpha": self.alpha,
        }

    def load_state_dict(self, state):
        load_module_state(self.guide, state["guide"])
        load_module_state(self.model, state["model"])


def _prior_distributions(guide) -> dict:
    """The stage-2 guide's distributions, detached: the data-dependent prior P of stage 3."""
    with torch.no_grad():
        return {
            name: DiracSpikeSlab(q.probs.detach().clone(), q.loc.detach().clone(), q.scale.detach().clone())
            for name, q in guide.posteriors().items()
        }


def _model_and_guide(net, priors: dict, likelihood, options, *, learn_scale: bool) -> tuple:
    """The network under ``priors`` observed through ``likelihood``, and the guide started at the prior:
    λ and μ of every site set to the prior's (``net``'s parameters are overwritten with μ), σ to σ⁰. The
    sites are ``priors``' keys; other parameters (normalisation layers) are point estimates."""
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name in priors:
                param.copy_(priors[name].loc)
    model = BayesianNetwork(net, GivenPrior(priors), likelihood, sites=list(priors))
    keep = {name: priors[name].probs for name in weight_sites(net) if name in priors}
    guide = DiracSpikeSlabGuide(
        model,
        keep,
        scale=math.exp(options.log_sigma2 / 2),
        learn_scale=learn_scale,
        parameterization=options.parameterization,
        temperature=options.temperature,
    )
    return model, guide


def _variational_stage(ctx, name: str, model, guide, batches, *, objective, epochs: int):
    """A stage of SVI on ``objective`` with the run's optimiser and schedule."""
    optim = build_optim(ctx.optim, epochs=epochs)
    step = svi_step(model, guide, objective=objective, optim=optim)
    return ctx.train(
        name,
        step,
        batches,
        epochs=epochs,
        state={"guide": guide, "optimizer": optim},
        scheduler=optim if isinstance(optim, PyroLRScheduler) else None,
    )


def _posterior(net, priors: dict, *, n: int, options) -> tuple:
    """Stage 3's model (prior P, bounded cross-entropy on the n examples of S \\ S_P) and Q started at P."""
    return _model_and_guide(
        net, priors, BoundedCategorical(n, min_prob=options.min_prob), options, learn_scale=options.learn_scale
    )


@register_method
class PBPMethod(Method):
    """PAC-Bayes pruning: a sparse stochastic network and its generalisation certificate (paper 000, section 6)."""

    name = "pbp"
    Options = PBPOptions
    sparsity_option = "sparsity"
    quick = ("pbp.prior_epochs=2", "pbp.prior_mask_epochs=2", "pbp.mc_samples=20", "pbp.prior_samples=5")
    summary = "PAC-Bayes pruning with a data-dependent prior and a certificate on the test error"
    paper = "the same paper as `pft`"

    def unsupported_for(self, options) -> dict:
        if not options.prior_epochs:
            return {
                "validation": "early stopping acts on stage 1 (the network trained on S_P), and pbp.prior_epochs is 0"
            }
        if is_start_method(options.start_mask):  # stage 1 is that method's fit: what it does not support
            method, own, _ = start_method(options)
            return {
                service: f"stage 1 is method {method.name!r} (pbp.start_mask): {why}"
                for service, why in method.unsupported_for(own).items()
                if service in SERVICES
            }
        return {}

    def check(self, net, data, options):
        """Refuse an α that leaves S_P or S \\ S_P without an example."""
        cut = math.floor(options.alpha * data.num_train)
        if not 0 < cut < data.num_train:
            empty = "S_P" if cut == 0 else "S \\ S_P"
            raise ConfigError(
                f"pbp.alpha = {options.alpha} leaves {empty} empty "
                f"(α·N = {options.alpha * data.num_train:.3g} of N = {data.num_train} training examples)"
            )

    def fit(self, net, data, options, ctx):
        self.check(net, data, options)  # on the rows left after train.validation
        if data.task != "classification":
            raise ConfigError("pbp certifies the 0-1 error of classifiers; data.dataset is a regression set")
        pyro.clear_param_store()
        torch.manual_seed(ctx.seed)
        device = ctx.device
        net = net.to(device)
        prior_rows, bound_rows = split_rows(data.num_train, options.alpha, ctx.seed)
        x_prior, y_prior = rows_at(data.x_train, prior_rows).to(device), data.y_train[prior_rows].to(device)
        x_bound, y_bound = rows_at(data.x_train, bound_rows).to(device), data.y_train[bound_rows].to(device)
        prior_batches = ctx.batches(x_prior, y_prior)
        start = time.perf_counter()
        loss = mean_loss(data.task)
        if is_start_method(options.start_mask):
            prior_data = replace(
                data,
                x_train=rows_at(data.x_train, prior_rows),
                y_train=data.y_train[prior_rows],
                extras={key: value for key, value in data.extras.items() if key != "train_rows"},
            )
            scores = fit_start(net, prior_data, options, ctx)
            scores = {site: scores[site].to(device) for site in weight_sites(net)}
        else:
            ctx.train_network(
                "stage 1: network on S_P", net, prior_batches, epochs=options.prior_epochs, loss=loss, validate=True
            )
            scores = saliency(
                options.start_mask, net, x=x_prior[:SALIENCY_EXAMPLES], y=y_prior[:SALIENCY_EXAMPLES], loss=loss
            )
        keep = block_isotropic(scores, options.sparsity, options.epsilon)
        params = dict(net.named_parameters())
        initial = {
            name: DiracSpikeSlab(
                keep[name] if name in keep else torch.ones_like(params[name]),
                params[name].detach().clone(),
                torch.full_like(params[name], math.exp(options.log_sigma2 / 2)),
            )
            for name in ctx.sites(net)
        }
        prior_model, prior_guide = _model_and_guide(
            net, initial, Categorical(len(prior_rows)), options, learn_scale=False
        )
        histograms = {"keep_probability_histogram_start": prior_guide.masks.histogram()}
        _variational_stage(
            ctx,
            "stage 2: prior P on S_P",
            prior_model,
            prior_guide,
            prior_batches,
            objective=GibbsRisk(dataset_size=len(prior_rows)),
            epochs=options.prior_mask_epochs,
        )
        priors = _prior_distributions(prior_guide)
        histograms["keep_probability_histogram_prior"] = prior_guide.masks.histogram()
        prior_test = gibbs_errors(
            prior_model, prior_guide, data.x_test.to(device), data.y_test.to(device), samples=options.prior_samples
        )

        pyro.clear_param_store()
        model, guide = _posterior(net, priors, n=len(bound_rows), options=options)
        delta_theorem = options.delta / (2 * options.grid_size)
        history = _variational_stage(
            ctx,
            "stage 3: posterior Q by the bound",
            model,
            guide,
            ctx.batches(x_bound, y_bound),
            objective=PACBayesBound(n=len(bound_rows), delta=delta_theorem),
            epochs=ctx.epochs,
        )
        seconds = time.perf_counter() - start
        loaded = data.extras.get("train_rows", torch.arange(data.num_train))  # rows of the training split as loaded
        fitted = PBPFitted(
            model,
            guide,
            priors,
            bound_rows=loaded[bound_rows].clone(),
            alpha=options.alpha,
            history=history,
            bound_digest=examples_digest(x_bound, y_bound),
            seconds=seconds,
        )
        fitted.report = {
            **self.certificate(fitted, data, options),
            "prior_test_error": 100 * float(prior_test.mean()),
            "prior_mc_samples": options.prior_samples,
            "prior_expected_sparsity": prior_guide.masks.expected_sparsity(),
            **histograms,
            "keep_probability_histogram_posterior": guide.masks.histogram(),
        }
        return fitted

    def certificate(self, fitted, data, options, *, samples: int | None = None) -> dict:
        """The certificate of ``fitted`` (Theorems 1 and 2 on the 0-1 loss, δ, the union over the grid),
        its Gibbs test error and expected sparsity, from ``samples`` networks drawn from Q (default
        ``pbp.mc_samples``), on the device the fit is on. The empirical risk is measured on the rows of
        S \\ S_P the fit recorded (:func:`bound_examples`), whatever ``data``'s split options say."""
        samples = samples or options.mc_samples
        if options.sampling == "examples" and samples > MAX_PER_EXAMPLE_DRAWS:
            raise BayesPruneError(
                f"--samples: at most {MAX_PER_EXAMPLE_DRAWS} draws per example with pbp.sampling = "
                f"'examples' (each is a network for every example), got {samples}"
            )
        device = next(fitted.net.parameters()).device
        x_bound, y_bound = (tensor.to(device) for tensor in bound_examples(fitted, data))
        empirical = gibbs_errors(
            fitted.model, fitted.guide, x_bound, y_bound, samples=samples, sampling=options.sampling
        )
        test = gibbs_errors(
            fitted.model,
            fitted.guide,
            data.x_test.to(device),
            data.y_test.to(device),
            samples=samples,
            sampling=options.sampling,
        )
        kl = network_kl(fitted.guide, fitted.priors)
        result = bounds.certificate(
            mean_risk=float(empirical.mean()),
            samples=len(empirical),
            kl=kl,
            n=len(y_bound),
            delta=options.delta,
            grid_size=options.grid_size,
        ).to_dict()
        return {
            "bound": result["bound"],
            "bound_kl_inverse": result["bound_kl_inverse"],
            "empirical_risk": result["empirical_risk"],
            "empirical_risk_bound": result["empirical_risk_bound"],
            "posterior_test_error": 100 * float(test.mean()),
            "kl": kl,
            "n_bound": len(y_bound),
            "sparsity": fitted.guide.masks.expected_sparsity(),
            "alpha": fitted.alpha,
            "delta": options.delta,
            "grid_size": options.grid_size,
            "mc_samples": samples,
            "sampling": options.sampling,
            "risk_draws": len(empirical),
        }

    def inference_data(self, fits, data, *, seed):
        """q and the data-dependent prior p of every parameter, one chain per fit
        (:func:`.inference_data.dirac_spike_slab_inference_data`)."""
        from bayesprune.methods.pbp.inference_data import dirac_spike_slab_inference_data

        return dirac_spike_slab_inference_data(
            [fit.guide.posteriors() for fit in fits], [fit.priors for fit in fits], seed=seed
        )

    def report_sections(self, run_dir, metrics):
        """The certificate beside the measured errors (Fig. 4's quantities for this run)."""
        from bayesprune.analysis.plots import plot_keep_probabilities
        from bayesprune.analysis.tables import markdown_table

        if "bound" not in metrics:
            return []
        rows = [
            {"quantity": label, "value": metrics[key]}
            for label, key in (
                ("certificate, Theorem 1 (0-1 error)", "bound"),
                ("certificate, Theorem 2 (kl inverse)", "bound_kl_inverse"),
                ("empirical Gibbs risk on S \\ S_P", "empirical_risk"),
                ("its Monte-Carlo upper bound", "empirical_risk_bound"),
                ("posterior Q test error (%)", "posterior_test_error"),
                ("prior P test error (%)", "prior_test_error"),
                ("KL(Q ‖ P)", "kl"),
                ("n, examples of S \\ S_P", "n_bound"),
                ("expected sparsity of Q", "sparsity"),
                ("alpha", "alpha"),
                ("delta", "delta"),
                ("grid size (union bound)", "grid_size"),
                ("Monte-Carlo networks", "mc_samples"),
            )
        ]
        rows += [
            {"quantity": label, "value": metrics[key]}
            for label, key in (  # absent from runs before pbp.sampling
                ("networks drawn (sampling)", "sampling"),
                ("Monte-Carlo draws m of the risk bound", "risk_draws"),
            )
            if key in metrics
        ]
        sections = []
        if "keep_probability_histogram_posterior" in metrics:
            plot_keep_probabilities(
                {
                    label: metrics[f"keep_probability_histogram_{key}"]
                    for label, key in (
                        ("start (eq. 6)", "start"),
                        ("prior P after stage 2", "prior"),
                        ("posterior Q after stage 3", "posterior"),
                    )
                },
                Path(run_dir) / "keep_probabilities.png",
            )
            sections.append(
                "![keep-probabilities at the start, of P and of Q (paper 000, Fig. 11)](keep_probabilities.png)"
            )
        if metrics["bound"] < 1:
            claim = (
                f"With probability at least {1 - metrics['delta']:g} over the training data, the Gibbs classifier Q "
                f"errs on at most {100 * metrics['bound']:.2f}% of new examples."
            )
        else:
            claim = (
                f"The certificate is vacuous: its bound, {100 * metrics['bound']:.2f}%, says nothing about the error "
                "on new examples (too few examples in S \\ S_P for KL(Q ‖ P), or too few epochs)."
            )
        return [
            "## PAC-Bayes certificate (paper 000, Theorems 1-2)\n\n" + claim + "\n\n" + markdown_table(rows),
            *sections,
        ]

    def restore(self, net, data, options, ctx, state):
        # the fit's S \ S_P (checkpoints before it was recorded: n from alpha, no certificate; alpha
        # from the config before it was saved)
        rows, digest, alpha = state.get("bound_rows"), state.get("bound_digest"), state.get("alpha", options.alpha)
        if not (isinstance(alpha, float) and 0 < alpha < 1):
            raise ValueError(f"alpha {alpha!r} is not a fraction")
        if rows is None:
            n = data.num_train - math.floor(alpha * data.num_train)
        elif not (
            torch.is_tensor(rows)
            and rows.dtype == torch.int64
            and rows.dim() == 1
            and len(rows) > 0
            and int(rows.min()) >= 0
            and isinstance(digest, str)
        ):
            raise ValueError("bound_rows is not a list of row indices with its digest")
        else:
            n = len(rows)
        if not 0 < n < data.num_train:
            raise ValueError(f"S \\ S_P of {n} examples does not fit {data.num_train} training examples")
        priors = {name: DiracSpikeSlab(p["probs"], p["loc"], p["scale"]) for name, p in state["prior"].items()}
        model, guide = _posterior(net, priors, n=n, options=options)
        load_module_state(guide, state["guide"])
        if "model" in state:  # the point estimates and batch norm's statistics (checkpoints before them had none)
            load_module_state(model, state["model"])
        return PBPFitted(model, guide, priors, bound_rows=rows, bound_digest=digest, alpha=alpha)
