"""The spike-and-slab BNN's :class:`~bayesprune.methods.base.Method`."""

import torch

from bayesprune.analysis.diagnostics import NOT_LEARNED_ATTRIBUTE, REFIT_START_ATTRIBUTE, REFITTED_ATTRIBUTE
from bayesprune.analysis.importance import (
    node_importance,
    node_layer_names,
    scaled_importance,
    weight_inclusion_matrices,
)
from bayesprune.analysis.inference_data import PREDICTIVE_TEST_POINTS, to_inference_data
from bayesprune.core.chain import layer_chain
from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.errors import ConfigError
from bayesprune.core.validation import require
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods import register_method
from bayesprune.methods.base import Method
from bayesprune.methods.context import fit_one_after_another
from bayesprune.methods.sbnn.fit import (
    build_model,
    fit_posterior,
    fit_starts,
    initial_means,
    keep_start,
    site_prior,
)
from bayesprune.methods.sbnn.fitted import SBNNFitted
from bayesprune.methods.sbnn.learned import not_learned_text
from bayesprune.methods.sbnn.options import SBNNOptions
from bayesprune.methods.sbnn.refit import check_and_refit, check_and_refit_stack, refitted_text
from bayesprune.methods.sbnn.together import fit_together


@register_method
class SBNN(Method):
    """Spike-and-slab BNN (paper 003): variational inclusion probabilities score every weight."""

    name = "sbnn"
    Options = SBNNOptions
    summary = (
        "spike-and-slab posterior over every weight; inclusion probabilities, feature importance, variable selection"
    )
    paper = (
        "Saha, Liu, Liang (2024), "
        "[Efficient model compression for Bayesian neural networks](https://arxiv.org/abs/2411.00273)"
    )
    #: Restarts pooled on a table under ``chains = "auto"``: one fit's ψ ranks the inputs by where its
    #: optimisation ended; breast cancer and diabetes (docs/usage.md, Feature importance) need several.
    table_chains = 4
    #: The packaged config whose settings a CSV config takes for the keys it leaves out (chosen on tables'
    #: held-out rows; the general defaults are the paper's regression prior and digits' optimisation).
    table_config = "sbnn-table"
    #: Options of ``table_config`` chosen for its own network (the packaged MLP), not taken for the user's
    #: (``model.factory``, other hidden layers): q's means started at 0.3 times the initial weights collapse a
    #: user's MLP of two hidden layers of 100 into the spike (every inclusion probability 0.19, test RMSE 2.76,
    #: the fit of the mean, on a simulation; 0.45, the same output scale, as well), where the default start
    #: (1.0) fits it (2.05; benchmarks/importance_default.py, docs/reproductions.md).
    table_network_options = ("starts",)
    places_priors = True
    unsupported = {"optim.weight_decay": "the spike-and-slab prior regularises the weights; set it in [sbnn]"}
    legacy_keys = {
        "prior.name": None,
        "prior.pi": "pi",
        "prior.log_tau0": "log_tau0",
        "prior.log_tau1": "log_tau1",
        "guide.name": None,
        "guide.init_scale": "init_scale",
        "objective.name": "objective",
        "objective.penalty": "penalty",
        "objective.local_reparameterization": "local_reparameterization",
        "objective.num_particles": "num_particles",
        "train.predictive_samples": "predictive_samples",
    }

    def check(self, net, data, options):
        require(
            options.keep != "elbo" or list(options.starts) == [1] or torch.is_tensor(data.x_train),
            "sbnn.keep",
            "be 'validation' for training rows read a minibatch at a time (data.stream): 'elbo' scores each "
            "start on every training row at once",
            options.keep,
        )
        if options.score == "path":
            try:
                layer_chain(net)
            except ValueError as error:
                raise ConfigError(f"sbnn.score: 'path' needs a chain of Linear/Conv2d layers: {error}") from None

    def fit(self, net, data, options, ctx):
        """The fit of ``options`` (one start or several, :func:`keep_start`), checked
        (:func:`~bayesprune.methods.sbnn.learned.learning_check`) and fitted again from ``sbnn.refit``'s start
        where it did not learn (:func:`~bayesprune.methods.sbnn.refit.check_and_refit`), with a warning where
        that did not learn either."""
        return check_and_refit(self._fit_once, net, data, options, ctx)

    @staticmethod
    def _fit_once(net, data, options, ctx, stage):
        if len(options.starts) == 1 and options.starts[0] == 1:
            return fit_posterior(initial_means(net, options, ctx.sites(net)), data, options, ctx, stage=stage)
        require(
            options.keep != "validation" or ctx.validation is not None,
            "sbnn.keep",
            "be 'elbo' when train.validation is 0 (no training rows held out to compare the starts on)",
            options.keep,
        )
        return keep_start(fit_starts(net, data, options, ctx, stage), data, options, ctx)

    fits_together = True

    def fit_together(self, nets, datasets, options, contexts):
        """:meth:`fit` of several seeds' fits trained as one stack (:func:`.together.fit_together`; those that did
        not learn refitted as a stack of their own, :func:`~bayesprune.methods.sbnn.refit.check_and_refit_stack`),
        or one after another where the stack does not hold them (several starts, a learned noise scale)."""
        fits = check_and_refit_stack(fit_together, nets, datasets, options, contexts)
        if fits is None:
            return fit_one_after_another(self, nets, datasets, options, contexts)
        return fits

    def restore(self, net, data, options, ctx, state):
        model = build_model(net, data, site_prior(net, options, ctx), noise_scale=ctx.noise_scale, sites=ctx.sites(net))
        guide = SpikeSlabGuide(model, init_scale=options.init_scale)
        load_module_state(model, state["model"])
        load_module_state(guide, state["guide"])
        return SBNNFitted(model, guide, score=options.score, predictive_samples=options.predictive_samples, ctx=ctx)

    def report_sections(self, run_dir, metrics):
        """Where the fit was refitted and where it did not learn, and the prior of every site: ``[sbnn]``'s, or
        that of the ``[[model.priors]]`` table that claims it."""
        sections = [
            text(metrics[key])
            for key, text in (("refitted", refitted_text), ("not_learned", not_learned_text))
            if isinstance(metrics.get(key), dict)
        ]
        priors = metrics.get("site_priors")
        if not priors:
            return sections
        rows = "\n".join(f"| `{site}` | {prior} |" for site, prior in priors.items())
        return [
            *sections,
            f"## Priors\n\nThe prior of every site (`[sbnn]`'s, or a `[[model.priors]]` table's).\n\n| site | prior |\n|---|---|\n{rows}",
        ]

    def inference_data(self, fits, dataset, *, seed):
        """ArviZ data of the chains, with ψ, φ (eqs. 3.18–3.19) and the importance of every hidden
        node (``node_importance.<layer>``) when the network is a chain of layers."""
        structure = fits[0].model

        def importance(inclusion):
            psi, *nodes, _ = node_importance(weight_inclusion_matrices(inclusion, structure))
            values = {"psi": psi, "phi": scaled_importance(psi)}
            for layer, value in zip(hidden, nodes):
                values[f"node_importance.{layer}"] = (f"node_{len(value)}", value)  # shared by layers of one width
            return values

        try:
            _, *hidden, _ = node_layer_names(structure)
            weight_inclusion_matrices(fits[0].inclusion_probabilities(), structure)
            feature_importance = importance
        except ValueError:  # not a plain Linear/Conv2d chain (branches, batch norm, grouped convolutions)
            feature_importance = None
        chains = [(fitted.model, fitted.guide, fitted.history) for fitted in fits]
        idata = to_inference_data(  # as many predictive draws as the Monte-Carlo predictive: one knob for their cost
            chains,
            dataset,
            feature_importance=feature_importance,
            seed=seed,
            max_test_points=PREDICTIVE_TEST_POINTS,
            num_predictive_draws=fits[0].predictive_samples,
            predictive_outputs=[
                None if fitted.unpruned_draws is None else fitted.unpruned_draws.outputs() for fitted in fits
            ],
        )
        flagged = [chain for chain, fitted in enumerate(fits) if fitted.not_learned is not None]
        refitted = [chain for chain, fitted in enumerate(fits) if fitted.refitted is not None]
        attrs = {
            **({NOT_LEARNED_ATTRIBUTE: flagged} if flagged else {}),
            **(
                {REFITTED_ATTRIBUTE: refitted, REFIT_START_ATTRIBUTE: fits[refitted[0]].refitted["start"]}
                if refitted
                else {}
            ),
        }
        if attrs:  # a fresh dict: the groups share their attributes' dict
            idata.sample_stats.attrs = {**idata.sample_stats.attrs, **attrs}
        return idata
