"""PAC-Bayes pruning's :class:`~bayesprune.methods.base.Method`: its three stages and its certificate (paper 000, section 6)."""

import math
from dataclasses import replace
from pathlib import Path

import pyro
import torch

from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.criteria import CRITERIA, saliency, weight_sites
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.gates import block_isotropic
from bayesprune.core.tasks import mean_loss, rows_at
from bayesprune.methods import SERVICES, Method, get_method, register_method
from bayesprune.methods.pbp import bounds
from bayesprune.methods.pbp.certificate import bound_examples, examples_digest, gibbs_errors, network_kl, split_rows
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.pbp.fitted import PBPFitted
from bayesprune.methods.pbp.objectives import GibbsRisk, PACBayesBound
from bayesprune.methods.pbp.options import MAX_PER_EXAMPLE_DRAWS, PBPOptions
from bayesprune.methods.pbp.stages import (
    model_and_guide,
    posterior,
    prior_distributions,
    start_distributions,
    variational_stage,
)
from bayesprune.methods.pbp.start import fit_start, is_start_method, start_method
from bayesprune.models import Categorical

#: Examples of S_P a data-dependent start criterion (SNIP) reads, as PFT's ``saliency_examples``.
SALIENCY_EXAMPLES = 1000


@register_method
class PBPMethod(Method):
    """PAC-Bayes pruning: a sparse stochastic network and its generalisation certificate (paper 000, section 6)."""

    name = "pbp"
    Options = PBPOptions
    sparsity_option = "sparsity"
    quick = ("pbp.prior_epochs=2", "pbp.prior_mask_epochs=2", "pbp.mc_samples=20", "pbp.prior_samples=5")
    summary = "PAC-Bayes pruning with a data-dependent prior and a certificate on the test error"
    paper = "the same paper as `pft`"
    sweep_sets = ("grid_size",)

    def certifying(self, table, mask_of, *, mask_table, mask_optim, epochs):
        """PBP started from ``mask_of``'s mask (section 6, stage 1 replaced; :mod:`.start`): a one-shot
        criterion of that name (``magnitude``: PBP's own magnitude start) or that method fitted on S_P with
        its own table (its sparsity option left to ``pbp.sparsity``), optimiser and ``epochs``; ``None`` for
        PBP itself and a method whose mask removes units (PBP's prior keeps or drops single weights)."""
        if mask_of == self.name:
            return None
        if not is_start_method(mask_of):
            return {**table, "start_mask": mask_of} if mask_of in CRITERIA else None
        method = get_method(mask_of)
        if "weight" not in method.prune_levels:
            return None
        own = {key: value for key, value in mask_table.items() if key != method.sparsity_option}
        return {
            **table,
            "start_mask": mask_of,
            "start_options": own,
            "start_optim": dict(mask_optim),
            "prior_epochs": epochs,
        }

    def certified(self, table):
        """The criterion or method PBP's prior starts from (``pbp.start_mask``): the mask it certifies."""
        return table.get("start_mask", PBPOptions().start_mask)

    def swept(self, table, points):
        """The union bound over the sweep's grid (appendix D.2): ``grid_size`` times the ``points``."""
        return {**table, "grid_size": points * table.get("grid_size", PBPOptions().grid_size)}

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
        loss = mean_loss(data.task)
        scores = self._start_scores(net, data, options, ctx, prior_rows, prior_batches, loss)
        keep = block_isotropic(scores, options.sparsity, options.epsilon)
        initial = start_distributions(net, keep, options, ctx.sites(net))
        prior_model, prior_guide = model_and_guide(
            net, initial, Categorical(len(prior_rows)), options, learn_scale=False
        )
        histograms = {"keep_probability_histogram_start": prior_guide.masks.histogram()}
        variational_stage(
            ctx,
            "stage 2: prior P on S_P",
            prior_model,
            prior_guide,
            prior_batches,
            objective=GibbsRisk(dataset_size=len(prior_rows)),
            epochs=options.prior_mask_epochs,
        )
        priors = prior_distributions(prior_guide)
        histograms["keep_probability_histogram_prior"] = prior_guide.masks.histogram()
        prior_test = gibbs_errors(
            prior_model, prior_guide, data.x_test.to(device), data.y_test.to(device), samples=options.prior_samples
        )

        pyro.clear_param_store()
        model, guide = posterior(net, priors, n=len(bound_rows), options=options)
        delta_theorem = options.delta / (2 * options.grid_size)
        history = variational_stage(
            ctx,
            "stage 3: posterior Q by the bound",
            model,
            guide,
            ctx.batches(x_bound, y_bound),
            objective=PACBayesBound(n=len(bound_rows), delta=delta_theorem),
            epochs=ctx.epochs,
        )
        loaded = data.extras.get("train_rows", torch.arange(data.num_train))  # rows of the training split as loaded
        fit = {
            "bound_rows": loaded[bound_rows].clone(),
            "alpha": options.alpha,
            "history": history,
            "bound_digest": examples_digest(x_bound, y_bound),
            "ctx": ctx,
        }
        report = {
            **self.certificate(PBPFitted(model, guide, priors, **fit), data, options),
            "prior_test_error": 100 * float(prior_test.mean()),
            "prior_mc_samples": options.prior_samples,
            "prior_expected_sparsity": prior_guide.masks.expected_sparsity(),
            **histograms,
            "keep_probability_histogram_posterior": guide.masks.histogram(),
        }
        return PBPFitted(model, guide, priors, report=report, **fit)

    @staticmethod
    def _start_scores(net, data, options, ctx, prior_rows, prior_batches, loss) -> dict:
        """Stage 1: the scores λ⁰ is set from, of ``options.start_mask`` on S_P: a criterion on the network
        trained there, or another method fitted on S_P alone (:mod:`.start`)."""
        if is_start_method(options.start_mask):
            prior_data = replace(
                data,
                x_train=rows_at(data.x_train, prior_rows),
                y_train=data.y_train[prior_rows],
                extras={key: value for key, value in data.extras.items() if key != "train_rows"},
            )
            scores = fit_start(net, prior_data, options, ctx)
            return {site: scores[site].to(ctx.device) for site in weight_sites(net)}
        ctx.train_network(
            "stage 1: network on S_P", net, prior_batches, epochs=options.prior_epochs, loss=loss, validate=True
        )
        first = prior_rows[:SALIENCY_EXAMPLES]
        x, y = rows_at(data.x_train, first).to(ctx.device), data.y_train[first].to(ctx.device)
        return saliency(options.start_mask, net, x=x, y=y, loss=loss)

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
        model, guide = posterior(net, priors, n=n, options=options)
        load_module_state(guide, state["guide"])
        if "model" in state:  # the point estimates and batch norm's statistics (checkpoints before them had none)
            load_module_state(model, state["model"])
        return PBPFitted(model, guide, priors, bound_rows=rows, bound_digest=digest, alpha=alpha, ctx=ctx)
