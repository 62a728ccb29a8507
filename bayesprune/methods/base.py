"""The two types every method shares: :class:`Method` (options, fit, restore) and :class:`Fitted`.

Downstream code (the runner, evaluation, pruning, export, reports, the command line) reads a
:class:`Fitted` and nothing else, so it never depends on one method's internals.
"""

import copy
from typing import ClassVar

import torch
from torch import nn

from bayesprune.core.normalization import changes, has_running_stats, running_statistics, statistics_replaced
from bayesprune.core.sites import site_names
from bayesprune.core.tasks import masked_copy, predictive_mean


class Fitted:
    """What a method hands over after fitting (or restoring from a checkpoint).

    Attributes:
        method: the registered name of the method that produced it.
        net: the architecture in its current structure (smaller than built if the method removed
            units while training); its parameter names are the site names.
        history: the training :class:`~bayesprune.core.loop.History` its method reports (``None`` when
            restored); what the fit cost over all its stages, seconds included, is its context's
            :meth:`~bayesprune.methods.FitContext.training_cost`.
        predictive_samples: Monte-Carlo draws of the predictive; 0 for a method without a posterior.
        score_name: what :meth:`scores` are, for tables and plots (``"inclusion logit"``).
        calibration: the training inputs a masked network's normalisation statistics are estimated
            on (:class:`bayesprune.core.normalization.Calibration`), the context's it was built with (the
            runner, ``load_run`` and ``fit_method`` give one unless ``prune.recalibrate = false``); ``None``:
            masked predictions use the statistics of the fit.
        unpruned_draws: the network's outputs under the Monte-Carlo draws of the unpruned model that the
            pruning curve made (:class:`bayesprune.core.predict.DrawOutputs`), the context's it was built with
            (the runner gives the run's first fit one), which its posterior predictive (``inference_data``)
            reuses; ``None``: none.

    Everything it holds is given to its constructor: nothing is set on it after the fit.
    """

    method: str = ""
    score_name: str = "score"

    def __init__(self, net: nn.Module, *, history=None, predictive_samples: int = 0, ctx=None):
        """``ctx``: the :class:`~bayesprune.methods.FitContext` of the fit or restore, whose ``calibration``
        and ``unpruned_draws`` it takes (``None``: neither)."""
        self.net = net
        self.history = history
        self.predictive_samples = predictive_samples
        self.calibration = None if ctx is None else ctx.calibration
        self.unpruned_draws = None if ctx is None else ctx.unpruned_draws

    @property
    def sites(self) -> dict:
        """Site name → shape of every prunable tensor (:func:`bayesprune.core.sites.site_names`), in network order."""
        params = dict(self.net.named_parameters())
        return {name: params[name].shape for name in site_names(self.net)}

    @property
    def n_weights(self) -> int:
        """How many entries the sites hold in all (biases included): what a sparsity is a fraction of."""
        return sum(shape.numel() for shape in self.sites.values())

    def scores(self) -> dict:
        """Site name → importance score tensor (higher = keep), as :func:`bayesprune.core.pruning.prune` reads.

        Scores must not saturate: a probability that rounds to 1.0 ties with its neighbours, and a
        tied budget removes the earlier entries in network order. Return logits or float64 values.
        """
        raise NotImplementedError

    def inclusion_probabilities(self):
        """Site name → inclusion probability of every weight, for importance paths (paper 003, eqs.
        3.18-3.19); ``None`` for a method without them."""
        return None

    def predict(self, x: torch.Tensor, *, masks=None, num_samples: int = 0) -> torch.Tensor:
        """Predictive mean (class probabilities, or regression means in training units) at inputs ``x``.

        ``num_samples = 0`` evaluates the point estimate; ``S > 0`` averages over S posterior draws.
        ``masks`` (site name → bool tensor) zero the pruned entries in every evaluation.

        When the masks zero a weight of the point estimate, the network keeps running statistics
        (batch norm) and :attr:`calibration` is set, those statistics are estimated again for the
        masked network (:meth:`masked_network`) and used for this prediction only: once, on the
        masked point estimate, and the same for every one of the S draws. The fit's own are left as
        they were.
        """
        return self.predictions(x, masks=masks, samples=(num_samples,))[0]

    def predictions(self, x: torch.Tensor, *, masks=None, samples=(0,)) -> list:
        """:meth:`predict` with each number of draws of ``samples``, under one estimate of the masked
        network's statistics (the point estimate and the Monte-Carlo predictive of a pruning curve)."""
        if type(self).predict is not Fitted.predict:  # a method that predicts in its own way
            return [self.predict(x, masks=masks, num_samples=count) for count in samples]
        if self.calibration is None or not masks or not has_running_stats(self.net):
            return [self._predict(x, masks=masks, num_samples=count) for count in samples]
        with statistics_replaced(self.net, running_statistics(self.masked_network(masks))):
            return [self._predict(x, masks=masks, num_samples=count) for count in samples]

    def _predict(self, x: torch.Tensor, *, masks=None, num_samples: int = 0) -> torch.Tensor:
        """:meth:`predict` with the normalisation statistics ``self.net`` holds: what a method implements."""
        raise NotImplementedError

    def masked_network(self, masks: dict) -> nn.Module:
        """:meth:`network` with the entries ``masks`` remove zeroed and, where :attr:`calibration` is set
        and that zeroes a weight that was not zero, its normalisation statistics estimated again on the
        training batches it holds (:func:`bayesprune.core.normalization.recalibrate`)."""
        net = self.network()
        masked = masked_copy(net, masks)
        return self.calibration.apply(masked) if self.calibration is not None and changes(net, masks) else masked

    def network(self) -> nn.Module:
        """A plain ``nn.Module`` (a copy) holding the point estimate the method predicts with."""
        raise NotImplementedError

    def metrics(self) -> dict:
        """The method's own numbers for ``metrics.json`` (beside the shared test metrics)."""
        return {}

    def state_dict(self) -> dict:
        """Tensors and plain data that :meth:`Method.restore` rebuilds this from (``weights_only`` loadable)."""
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        """Put a :meth:`state_dict` of this same fit back in place (early stopping's best epoch)."""
        raise NotImplementedError


class NetworkFitted(Fitted):
    """A :class:`Fitted` whose result is one deterministic network (no posterior): it predicts with the
    network, masked entries zeroed, and reports the method's numbers in ``report``."""

    def __init__(self, net: nn.Module, *, history=None, report=None, task: str = "classification", ctx=None):
        super().__init__(net, history=history, ctx=ctx)
        self.report, self.task = report or {}, task

    def _predict(self, x, *, masks=None, num_samples=0):
        net = masked_copy(self.network(), masks or {}).eval()
        with torch.no_grad():
            output = net(x)
        return predictive_mean(output, self.task)

    def network(self):
        return copy.deepcopy(self.net)

    def metrics(self) -> dict:
        return dict(self.report)


class SparseNetworkFitted(NetworkFitted):
    """A :class:`NetworkFitted` whose network is already sparse, with scores that are ranks without ties
    (float64, 0 … D − 1), so that a budget at the network's sparsity keeps exactly its mask.

    ``keep`` (site → keep-probability of every weight) is the learned Bernoulli mask distribution of a
    method that has one (PFT's λ, ProbMask's s); :meth:`inference_data` writes it to ``posterior.nc``.
    """

    def __init__(self, net: nn.Module, ranks: dict, *, keep: dict | None = None, **kwargs):
        super().__init__(net, **kwargs)
        self.ranks = ranks
        self.keep = None if keep is None else {site: p.detach().cpu().clone() for site, p in keep.items()}

    def scores(self) -> dict:
        return dict(self.ranks)

    def state_dict(self) -> dict:
        state = {"net": self.net.state_dict(), "ranks": {site: r.clone() for site, r in self.ranks.items()}}
        return state if self.keep is None else {**state, "keep": dict(self.keep)}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.ranks = {site: r.clone() for site, r in state["ranks"].items()}
        self.keep = state.get("keep")

    @classmethod
    def restore(cls, net: nn.Module, state: dict, *, task: str, ctx=None):
        """The fit whose :meth:`state_dict` is ``state``, around ``net``."""
        net.load_state_dict(state["net"])
        return cls(net, dict(state["ranks"]), keep=state.get("keep"), task=task, ctx=ctx)

    @staticmethod
    def inference_data(fits: list, *, seed: int, num_draws: int = 20):
        """ArviZ data of the keep-probabilities of independent fits (chains): draws of the Bernoulli mask
        of every weight and the probabilities themselves as ``<site>.keep``; ``None`` without them."""
        if fits[0].keep is None:
            return None
        from bayesprune.analysis.inference_data import gate_inference_data

        return gate_inference_data([fit.keep for fit in fits], num_draws=num_draws, seed=seed, name="keep")


class GuideFitted(Fitted):
    """A :class:`Fitted` Pyro model and guide: the point estimate is the guide's ``mean_params()``, the
    Monte-Carlo predictive averages ``sample_params()`` draws (:func:`bayesprune.core.predict.predict`)."""

    def __init__(self, model, guide, *, history=None, predictive_samples: int = 0, ctx=None):
        super().__init__(model.net, history=history, predictive_samples=predictive_samples, ctx=ctx)
        self.model, self.guide = model, guide

    def _predict(self, x, *, masks=None, num_samples=0):
        from bayesprune.core.predict import predict

        return predict(self.model, self.guide, x, num_samples=num_samples, masks=masks)

    def network(self):
        point = {name: value.detach() for name, value in self.model.point.values().items()}
        return with_point_estimate(self.net, {**point, **self.guide.mean_params()})


def with_point_estimate(net: nn.Module, values: dict) -> nn.Module:
    """A copy of ``net`` with the tensors of ``values`` (parameter name → value) in place of its own; its
    other parameters and its buffers (batch norm's statistics) stay ``net``'s.

    Loaded through ``net``'s own state dict so that its version metadata reaches the modules that read
    it in ``_load_from_state_dict`` (torchvision's MNASNet and VisionTransformer do; a plain dict has none).
    """
    net = copy.deepcopy(net)
    state = net.state_dict()
    state.update((name, value) for name, value in values.items() if name in state)
    net.load_state_dict(state)
    return net


class Method:
    """A registered pruning method (:func:`bayesprune.methods.register_method`).

    Class attributes:
        name: the value of ``method`` in a config, and the name of the method's own TOML table.
        Options: a frozen dataclass for that table, validated in ``__post_init__`` with
            :class:`~bayesprune.core.errors.ConfigError` messages naming the field (``sbnn.pi``).
        legacy_keys: ``"section.key"`` of older config layouts → option name (``None``: dropped),
            folded into the method's table when such a config is loaded.
        unsupported: the services of :data:`~bayesprune.methods.context.SERVICES` the method does not
            support and the config keys it does not read (``"optim.momentum"``), each with the reason;
            the runner refuses a config that asks for such a service or sets such a key to anything but
            its default, naming the key, so that no key is silently ignored. Every other service
            holds: checkpoints and ``--resume`` through :meth:`FitContext.train`, and early stopping
            on ``train.validation`` on the stage the method gives ``validate``.
        prune_levels: the ``prune.level`` values its scores can be pruned at.
        places_priors: it reads ``[[model.priors]]`` (:attr:`~bayesprune.methods.FitContext.priors`) and
            gives each site the prior a table claims it for; a config with such tables for another method is refused.
        sparsity_option: the option of its table that sets the sparsity it fits to (a number, or a
            list of numbers as PFT's ``sparsities``), which ``bayesprune compare`` sets per sparsity;
            ``None``: one fit is pruned at every sparsity (or, without weight-level scores, it learns
            its own width).
        macs_option: the option of its table that sets the fraction of the dense MACs its fit prunes to
            (Torch-Pruning's ``macs``), which ``bayesprune compare`` sets to each of ``prune.macs``;
            ``None``: its scores are cut to ``prune.macs`` after the fit.
        quick: ``--set`` overrides that, with ``train.epochs=2``, make its ``<name>-digits`` config
            run in seconds: what the shared tests run every method with.
        baseline: its fit starts from the plain network trained by the runner's plain-network rule
            (:meth:`~bayesprune.methods.FitContext.train_plain`) and prunes it: ``bayesprune compare``
            runs it beside the methods, trains it as the comparison's ``[baseline]`` says
            (``baseline.epochs`` its ``train.epochs``, ``baseline.lr`` its ``optim.lr``) and fine-tunes its
            pruned networks ``compare.finetune_epochs`` (its ``prune.finetune_epochs``).
        sweep_sets: options of its table ``bayesprune sweep`` sets itself (:meth:`swept`), refused in a grid.
        summary, paper: what it learns and where it is published, for the README's method table
            and the reference (``docs/generate.py``).
        fits_together: :meth:`fit_together` trains several independent fits of one network shape as
            one stacked model (:mod:`bayesprune.core.batched`): the runner uses it for a run's seeds.
        metrics_keys: the keys its fit adds to ``metrics.json``, each with the
            :class:`~bayesprune.core.validation.Constraint` of what it holds (:mod:`bayesprune.methods.metrics`):
            ``bayesprune report`` refuses a ``metrics.json`` whose value breaks one, naming the key.
        metrics_rules: :class:`~bayesprune.core.validation.Rule` over those keys together (the lists of one
            grid as long as the grid), whose ``holds`` reads the ``metrics.json`` object.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type]
    legacy_keys: ClassVar[dict] = {}
    unsupported: ClassVar[dict] = {}
    prune_levels: ClassVar[tuple] = ("weight", "unit")
    places_priors: ClassVar[bool] = False
    sparsity_option: ClassVar[str | None] = None
    macs_option: ClassVar[str | None] = None
    quick: ClassVar[tuple] = ()
    baseline: ClassVar[bool] = False
    sweep_sets: ClassVar[tuple] = ()
    fits_together: ClassVar[bool] = False
    metrics_keys: ClassVar[dict] = {}
    metrics_rules: ClassVar[tuple] = ()
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""

    def unsupported_for(self, options) -> dict:
        """:attr:`unsupported` under these options (a service can depend on them)."""
        return dict(self.unsupported)

    def check(self, net: nn.Module, data, options) -> None:
        """Refuse, before anything is written, a network or data this method cannot fit, raising
        :class:`~bayesprune.core.errors.ConfigError` with one line naming what; accepts anything by default."""

    def fit(self, net: nn.Module, data, options, ctx) -> Fitted:
        """Fit on ``data`` (a :class:`~bayesprune.data.Dataset`) starting from ``net``, with the
        method's ``options`` (an :attr:`Options`) and the run's :class:`~bayesprune.methods.FitContext`,
        training only through ``ctx.train`` / ``ctx.train_network``."""
        raise NotImplementedError

    def restore(self, net: nn.Module, data, options, ctx, state: dict) -> Fitted:
        """Rebuild the :class:`Fitted` whose :meth:`Fitted.state_dict` is ``state`` around ``net``."""
        raise NotImplementedError

    def fit_together(self, nets: list, datasets: list, options, contexts: list) -> list:
        """:meth:`fit` of ``nets[k]`` on ``datasets[k]`` under ``contexts[k]`` for every k (fits that differ
        in their seed and which rows they hold out alone, none with a checkpoint), trained together, each
        :class:`Fitted` as its separate fit's up to rounding; only for a method whose :attr:`fits_together`
        is true."""
        raise NotImplementedError

    def inference_data(self, fits: list, data, *, seed: int):
        """ArviZ data of independent fits (chains) for ``posterior.nc``, or ``None`` without a posterior."""
        return None

    def certificate(self, fitted: Fitted, data, options, *, samples: int | None = None) -> dict | None:
        """A generalisation certificate of ``fitted`` computed again from the training data
        (``bayesprune certify``), with ``samples`` Monte-Carlo draws where it needs them; ``None`` for a
        method without one."""
        return None

    def certifying(self, table: dict, mask_of: str, *, mask_table: dict, mask_optim: dict, epochs: int) -> dict | None:
        """This method's table (TOML layout, ``table`` its own in a comparison) for a run whose ``bound``
        certifies method ``mask_of``'s mask (``compare.certify``), from that method's own ``mask_table``,
        ``mask_optim`` and the comparison's ``epochs``; ``None``: it certifies no such mask (the default)."""
        return None

    def certified(self, table: dict) -> str | None:
        """The method whose mask a run of this ``table`` already certifies (a comparison takes its own
        cells' bound for it rather than fitting another), or ``None`` (the default)."""
        return None

    def swept(self, table: dict, points: int) -> dict:
        """The method's table (TOML layout) in a sweep of ``points`` grid points (the options it lists in
        :attr:`sweep_sets`, which the grid may not vary). The default: the table as it is."""
        return table

    def report_sections(self, run_dir, metrics: dict) -> list:
        """Markdown sections of ``report.md`` of the method's own (writing their plots into
        ``run_dir``), from the run's files alone; none by default."""
        return []
