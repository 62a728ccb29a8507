"""The tables of a run's config, ``[data]`` to ``[experiment]`` (``[optim]`` is
:class:`bayesprune.core.optim.OptimConfig`): one frozen dataclass each, every option declared with its
constraint (:mod:`bayesprune.core.validation`) and checked when the table is built."""

import math
import re
from dataclasses import dataclass, field

from bayesprune.core.fused import KERNEL_MODES
from bayesprune.core.graphs import GRAPH_MODES
from bayesprune.core.layout import MEMORY_FORMATS
from bayesprune.core.normalization import DEFAULT_BATCHES, MAX_BATCHES, MIN_BATCH_SIZE, Calibration
from bayesprune.core.optim import SCHEDULES
from bayesprune.core.precision import PRECISIONS
from bayesprune.core.pruning import LEVELS, SCOPES
from bayesprune.core.validation import (
    FLAG,
    MAX_COUNT,
    STRING,
    Constraint,
    Rule,
    count,
    is_int,
    is_number,
    list_of,
    one_of,
    option,
    optional,
    scale,
    unit,
    validate,
)
from bayesprune.models.module_priors import read_tables


@dataclass(frozen=True)
class DataConfig:
    """``[data]``: ``dataset`` names a loader of :mod:`bayesprune.data`; every other key is its option.

    ``splits`` (UCI only) fits every listed split, or ``"all"`` of them, and reports the mean and
    standard error over splits. ``batch_size = "auto"`` takes a hundredth of the training rows, at
    least 32 (:meth:`batch_size_for`), so that an epoch is at most 100 steps on any set.

    A relative file or folder (``path``, ``train``, ``test``, ``root``) in a config file is read from
    the config file's folder, or from the current folder where it is not there; a ``--set`` value
    from the current folder.
    """

    dataset: str = option("digits", STRING)
    batch_size: int | str = option(
        128,
        Constraint(
            lambda v: v == "auto" or count().accepts(v),
            f"be a positive integer up to {MAX_COUNT} or 'auto'",
            refused=(0, MAX_COUNT + 1, 1.5, "big", True),
            allowed=f'a positive integer up to {MAX_COUNT}, or `"auto"`',
        ),
    )
    splits: list | str | None = option(
        None,
        Constraint(
            lambda v: v is None or v == "all" or (isinstance(v, list) and v and all(is_int(k) and k >= 0 for k in v)),
            "be 'all' or a non-empty list of split indices",
            refused=([], [-1], "some", 1),
            allowed='`"all"` or a list of split indices, or unset',
        ),
    )
    options: dict = field(default_factory=dict)

    rules = (
        Rule(
            "splits",
            lambda o: o.splits is None or o.dataset == "uci",
            lambda o: "only be set for data.dataset = 'uci'",
            example={"dataset": "digits", "splits": [0]},
        ),
        Rule(
            "split",
            lambda o: o.splits is None or "split" not in o.options,
            lambda o: "not be given beside data.splits (set data.splits = [k] for split k)",
            example={"dataset": "uci", "splits": [0], "split": 1},
            value=lambda o: o.options.get("split"),
        ),
    )

    def __post_init__(self):
        validate(self, "data")

    def batch_size_for(self, num_train: int) -> int:
        """The minibatch size for ``num_train`` training rows."""
        return max(32, math.ceil(num_train / 100)) if self.batch_size == "auto" else self.batch_size


#: ``model.factory``: a dotted module path, a colon, a dotted attribute path.
FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")

#: ``model.expose`` and ``model.hide``: parameter names, globs or module type names.
NAMES = Constraint(
    lambda v: isinstance(v, (list, tuple)) and all(isinstance(item, str) for item in v),
    "be a list of parameter names, globs or module type names",
    refused=("fc1.weight", [1]),
    allowed="a list of parameter names, globs or module type names",
    convert=tuple,
)


#: ``model.heads``: module names, globs or module type names, each to its number of attention heads.
HEAD_COUNTS = Constraint(
    lambda v: (
        isinstance(v, dict)
        and all(isinstance(name, str) and is_int(heads) and 1 <= heads <= MAX_COUNT for name, heads in v.items())
    ),
    "be a table of module names, globs or module type names to their number of attention heads",
    refused=({"blocks.*.attn": 0}, {"attn": 1.5}, ["attn"]),
    allowed="a table of module names, globs or type names to head counts",
    convert=dict,
)


#: ``[[model.priors]]``: tables matching modules to a prior and its hyper-parameters, each read and checked
#: by :func:`bayesprune.models.module_priors.read_table`.
PRIOR_TABLES = Constraint(
    lambda v: isinstance(v, (list, tuple)) and all(isinstance(table, dict) for table in v),
    "be a list of tables (modules = ..., prior = ..., and the prior's hyper-parameters)",
    refused=("spike-slab", [1], {"prior": "spike-slab"}),
    allowed="`[[model.priors]]` tables: `modules`, `prior` and its hyper-parameters",
    convert=tuple,
)


@dataclass(frozen=True)
class ModelConfig:
    """``[model]``: ``architecture`` names a builder of :mod:`bayesprune.models`, or ``factory``
    (``"module:callable"``, the run's working directory importable) names the user's own, called as
    ``callable(input_shape, output_dim, **options)``; every other key is an option of the builder.

    ``weights`` is a file of the network's weights to start every fit from (``torch.save(net.state_dict(),
    path)`` of the network the factory or architecture builds; read weights-only, refused naming the first
    key that does not match; :func:`bayesprune.core.checkpoint.load_weights`), instead of the builder's
    random initialisation. ``pretrain_epochs`` (default 0) trains that network densely by maximum likelihood
    first, with the run's optimiser and minibatches (:func:`bayesprune.pipeline.start.start_network`), so that
    every method of a comparison starts from the same trained network; ``pretrain_schedule`` anneals that
    training's rate its own way (``"cosine"``: a start trained to a plateau) where the fits keep ``[optim]``'s; ``start_<metric>`` in ``metrics.json``
    is the test metric of the network the fit starts from.

    ``heads`` gives the number of attention heads of modules that do not hold it as ``num_heads`` or
    ``num_attention_heads`` (names, globs or module type names to counts; :func:`bayesprune.core.heads.declare_heads`),
    so that their heads are units (:mod:`bayesprune.core.heads`).

    ``noise_scale`` fixes the Gaussian noise of regression; absent, it is learned. ``expose`` and
    ``hide`` add parameters to the sites or take them out (names, globs or module type names,
    :func:`bayesprune.core.sites.site_names`; by default the sites are the parameters of the Linear and
    convolution layers, and normalisation layers stay point estimates).

    ``priors``, as ``[[model.priors]]`` tables, gives modules a prior of their own (a method that places
    priors reads them: ``sbnn``; the others refuse the key): each table's ``modules`` (a parameter or module
    name, a glob over them or a module type name, or a list of them, read as ``expose`` reads them) get
    ``prior``, ``"spike-slab"`` (paper 003, eq. 3.1, an indicator per weight) or ``"group-spike-slab"`` (an
    indicator per unit: a Linear layer's output unit, a convolution's output channel;
    :mod:`bayesprune.core.group_spike_slab`), with its hyper-parameters ``pi``, ``log_tau0`` and ``log_tau1``
    (absent: ``[sbnn]``'s defaults, 0.5, -6 and 1), or ``"group-horseshoe"`` (Louizos et al. 2017: a half-Cauchy
    scale per unit and one per layer, C+(0, ``global_scale``), default 1; :mod:`bayesprune.core.group_horseshoe`). The sites no table claims keep the method's prior; a
    pattern that matches no site and a site two tables claim are refused (:mod:`bayesprune.models.module_priors`).
    The report lists the prior of every site.
    """

    architecture: str = option("mlp", STRING)
    factory: str | None = option(
        None,
        Constraint(
            lambda v: v is None or (isinstance(v, str) and FACTORY.fullmatch(v) is not None),
            "be 'module:callable' (e.g. 'mynets:resnet')",
            refused=("mynets", ":resnet", 1),
            allowed='`"module:callable"`, or unset',
        ),
    )
    weights: str | None = option(
        None,
        Constraint(
            lambda v: v is None or (isinstance(v, str) and v != ""),
            "be a file path",
            refused=("", 1),
            allowed="a file path, or unset",
        ),
    )
    pretrain_epochs: int = option(0, count(0))
    pretrain_schedule: str | None = option(None, optional(one_of(SCHEDULES)))
    noise_scale: float | None = option(None, optional(scale()))
    expose: tuple = option((), NAMES)
    hide: tuple = option((), NAMES)
    heads: dict = option(constraint=HEAD_COUNTS, factory=dict)
    priors: tuple = option((), PRIOR_TABLES)
    options: dict = field(default_factory=dict)

    rules = (
        Rule(
            "architecture",
            lambda o: o.factory is None or o.architecture == "mlp",
            lambda o: "not be given beside model.factory",
            example={"factory": "mynets:resnet", "architecture": "lenet5"},
        ),
    )

    def __post_init__(self):
        validate(self, "model")
        read_tables(self.priors)

    @property
    def name(self) -> str:
        """The network's name in reports: the factory, or the architecture."""
        return self.factory or self.architecture


@dataclass(frozen=True)
class TrainConfig:
    """``[train]``: training length and checkpoint period.

    ``epochs`` passes over the training split, or ``steps``, a budget of gradient steps that becomes
    the epochs reaching it on each data set (given, it replaces ``epochs``). ``validation`` > 0 holds out that fraction
    of the training split and keeps the epoch whose point estimate scores best on it, stopping after
    ``patience`` epochs without improvement (:mod:`bayesprune.core.early_stopping`); the test split is
    only read after the fit. ``kernels`` runs the variational methods' per-weight formulas compiled
    by ``torch.compile`` (``"compiled"``), eagerly (``"eager"``), or compiled for networks of at
    least 100,000 weights where ``torch.compile`` works (``"auto"``) (:mod:`bayesprune.core.fused`).
    ``precision = "bfloat16"`` runs the forward passes of training under bfloat16 autocast, the
    likelihood, KL and bound terms in float32 (:mod:`bayesprune.core.precision`). ``memory_format``
    lays out training minibatches of images channels-last (``"auto"``: on a CUDA device;
    :mod:`bayesprune.core.layout`). ``graphs`` runs plain optimiser steps as CUDA graphs (``"on"``: refused
    without a CUDA device; ``"auto"``: networks of at most 2,000,000 weights on a CUDA device;
    :mod:`bayesprune.core.graphs`).
    """

    epochs: int | None = option(None, optional(count()))
    steps: int | None = option(None, optional(count()))
    validation: float = option(0.0, unit(open_low=False))
    patience: int | None = option(None, optional(count()))
    checkpoint_every: int = option(1, count())
    kernels: str = option("auto", one_of(KERNEL_MODES))
    precision: str = option("float32", one_of(PRECISIONS))
    memory_format: str = option("auto", one_of(MEMORY_FORMATS))
    graphs: str = option("off", one_of(GRAPH_MODES))

    rules = (
        Rule(
            "patience",
            lambda o: o.patience is None or o.validation > 0,
            lambda o: "come with train.validation > 0",
            example={"validation": 0.0, "patience": 3},
        ),
    )

    def __post_init__(self):
        if self.steps is not None:
            object.__setattr__(self, "epochs", None)  # the budget replaces them (an override of a config's epochs)
        elif self.epochs is None:
            object.__setattr__(self, "epochs", 200)
        validate(self, "train")


#: ``prune.predictive``'s values, and the size (weights) up to which ``"auto"`` evaluates the Monte-Carlo
#: predictive at every sparsity: a resnet18 (11M weights, 20 draws at 7 sparsities) spent 8 of its
#: training epochs there (benchmarks/run_cost.py); LeNet-5 (431k) about one.
PREDICTIVES = ("auto", "every", "unpruned")
PREDICTIVE_CURVE_WEIGHTS = 1_000_000


@dataclass(frozen=True)
class PruneConfig:
    """``[prune]``: the pruning curve. At each sparsity the fraction of all weights (``level =
    "weight"``) or of all hidden units (``"unit"``) with the lowest scores is removed, ranked over the
    whole network (``scope = "global"``) or within each layer (``"layer"``), keeping at least
    ``min_keep`` per layer (absent: none of the weights, a tenth of each layer's units;
    :class:`bayesprune.core.pruning.Budget`). ``include_biases`` says whether the
    biases are ranked and counted with the weights (paper 003 puts its prior on both) or always kept;
    every point of the curve reports its sparsity both ways. ``recalibrate`` re-estimates the
    running statistics of the network's batch norms for every masked network that is scored or
    exported, on ``recalibrate_batches`` training batches (:mod:`bayesprune.core.normalization`);
    ``false`` keeps the statistics of the fitted dense network. ``finetune_epochs`` (default 0) trains
    each pruned point network further by maximum likelihood, its removed weights held at zero, and
    reports its metric beside the pruned one's (``<metric>_finetuned``); ``bayesprune export`` writes the
    network fine-tuned so (:mod:`bayesprune.pipeline.finetune`). ``predictive`` says where the curve
    evaluates the Monte-Carlo predictive of a method that has one (``<metric>_mc``, S draws each): at
    ``"every"`` sparsity, or at the ``"unpruned"`` model only (the point estimate at every sparsity);
    ``"auto"`` (default) is ``"every"`` for networks of at most 1,000,000 weights (:data:`PREDICTIVE_CURVE_WEIGHTS`),
    where the S passes at each sparsity cost little beside training, and ``"unpruned"`` above.

    ``macs`` (unit level) is a MAC budget: a fraction of the dense network's multiply-accumulates to keep, or a
    list of them; at each, units leave by the method's unit scores (the floors of ``min_keep`` kept) until the
    network costs at most that (:func:`bayesprune.core.macs.resolve_macs`), and ``metrics.json``'s
    ``macs_curve`` holds its count, test metric and, with ``finetune_epochs``, its fine-tuned one. The
    dense network is the one the fit starts from, so every method's row of a comparison is cut to the same MACs.

    ``finetune_lr`` is the fine-tuning's Adam rate (default: the run's ``optim.lr``), or a list of rates: then
    each pruned network is fine-tuned at every rate on the training rows but a ``finetune_held_out`` fraction
    (default 0.2, drawn with the seed), and the network whose error on those held-out rows is lowest is the
    result, its rate recorded in ``metrics.json``'s ``finetune_choices`` (the test split is never read to
    choose; :class:`bayesprune.pipeline.finetune.FineTuning`). Every row of a comparison chooses the same way.

    ``distill`` (default 0) makes the fine-tuning distil knowledge from the network before pruning: that weight
    of the loss is the softened predictions' divergence at ``distill_temperature`` (Hinton et al. 2015;
    :func:`bayesprune.core.plain.distillation_objective`)."""

    sparsities: tuple = option(
        (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95),
        list_of(
            unit(open_low=False),
            "sparsities in [0, 1)",
            distinct=False,
            convert=lambda v: tuple(sorted(set(float(rate) for rate in v))),
        ),
    )
    scope: str = option("global", one_of(SCOPES))
    level: str = option("weight", one_of(LEVELS))
    min_keep: int | None = option(None, optional(count(0)))
    include_biases: bool = option(True, FLAG)
    recalibrate: bool = option(True, FLAG)
    recalibrate_batches: int = option(DEFAULT_BATCHES, count(1, MAX_BATCHES))
    finetune_epochs: int = option(0, count(0))
    finetune_lr: tuple = option(
        (),
        Constraint(
            lambda v: scale().accepts(v) or list_of(scale(), "rates", nonempty=False).accepts(v),
            "be a positive rate, or a list of distinct rates to choose from on held-out training rows",
            refused=(0.0, -1.0, [0.1, 0.1], [0.0], "fast", True),
            allowed="a positive rate, or a list of distinct rates (empty: the run's optim.lr)",
            convert=lambda v: tuple(float(r) for r in ([v] if is_number(v) else v)),
        ),
    )
    finetune_held_out: float = option(0.2, unit())
    distill: float = option(0.0, unit(open_low=False, open_high=False))
    distill_temperature: float = option(4.0, scale())
    predictive: str = option("auto", one_of(PREDICTIVES))
    macs: tuple = option(
        (),
        Constraint(
            lambda v: (
                all(is_number(m) and 0 < m <= 1 for m in ([v] if is_number(v) else v))
                if is_number(v) or isinstance(v, (list, tuple))
                else False
            ),
            "be a fraction in (0, 1] of the dense network's MACs, or a list of them",
            refused=(0.0, 1.5, [0.5, 2.0], "half", True),
            allowed="a fraction in (0, 1], or a list of them",
            convert=lambda v: tuple(sorted(set(float(m) for m in ([v] if is_number(v) else v)), reverse=True)),
        ),
    )

    #: Keys read under their old names, each with a one-line note (:func:`bayesprune.core.validation.read_renamed`).
    renamed = {"droprates": "sparsities"}

    rules = (
        Rule(
            "macs",
            lambda o: not o.macs or o.level == "unit",
            lambda o: (
                "come with prune.level = 'unit' (units leave until the MACs reach it; zeroed weights cost as many "
                "MACs as kept ones)"
            ),
            example={"macs": 0.5, "level": "weight"},
            value=lambda o: list(o.macs),
        ),
        Rule(
            "macs",
            lambda o: not o.macs or o.scope == "global",
            lambda o: "come with prune.scope = 'global' (units leave by score across the network)",
            example={"macs": 0.5, "level": "unit", "scope": "layer"},
            value=lambda o: list(o.macs),
        ),
    )

    def __post_init__(self):
        validate(self, "prune")

    def predictive_at(self, n_weights: int) -> str:
        """Where the curve of a network of ``n_weights`` evaluates the Monte-Carlo predictive: ``"every"``
        sparsity or the ``"unpruned"`` model (``predictive = "auto"`` resolved by size)."""
        if self.predictive != "auto":
            return self.predictive
        return "every" if n_weights <= PREDICTIVE_CURVE_WEIGHTS else "unpruned"

    def budget(self, sparsity: float):
        """The :class:`~bayesprune.core.pruning.Budget` of one point of the curve."""
        from bayesprune.core.pruning import Budget

        return Budget(sparsity=sparsity, scope=self.scope, level=self.level, min_keep=self.min_keep)

    def calibration(self, inputs, *, batch_size: int):
        """The :class:`~bayesprune.core.normalization.Calibration` of a fit on training ``inputs`` (batches of
        ``batch_size`` rows, at least :data:`~bayesprune.core.normalization.MIN_BATCH_SIZE`), or ``None`` with
        ``recalibrate = false``."""
        if not self.recalibrate:
            return None
        return Calibration(inputs, batches=self.recalibrate_batches, batch_size=max(batch_size, MIN_BATCH_SIZE))


@dataclass(frozen=True)
class BaselineConfig:
    """``[baseline]``: a plain (non-Bayesian) network of the same shape trained on the same split.

    It trains for ``epochs`` (default ``train.epochs``) at the rate ``lr`` (default ``optim.lr``), keeping the
    epoch that scores best on the run's validation part or, when the run holds out none
    (``train.validation = 0``), on a ``validation`` fraction of the training rows it holds out for
    itself (default a fifth; 0: the last epoch, on every training row; refused beside
    ``train.validation``). Regression runs also report the least-squares linear model's test RMSE
    (:mod:`bayesprune.pipeline.baseline`)."""

    enabled: bool = option(True, FLAG)
    epochs: int | None = option(None, optional(count()))
    lr: float | None = option(None, optional(scale()))
    validation: float | None = option(None, optional(unit(open_low=False)))

    def __post_init__(self):
        validate(self, "baseline")

    @property
    def held_out(self) -> float:
        """The fraction of the training rows the plain network holds out when the run holds out none."""
        return 0.2 if self.validation is None else self.validation


@dataclass(frozen=True)
class ReferenceConfig:
    """``[reference]``: published numbers the report prints beside the run's pruning curve.

    ``values`` holds the test metric at each of ``sparsities``: a list, or a table of lists keyed by
    data set name (``data.name``, e.g. one row per UCI set of paper 003's Table 2). ``source`` says
    where they come from (``"paper 003, Table 8, set 2"``).
    """

    source: str | None = option(None, optional(STRING))
    sparsities: tuple = option(
        (),
        list_of(
            unit(open_low=False),
            "sparsities in [0, 1)",
            nonempty=False,
            distinct=False,
            convert=lambda v: tuple(float(rate) for rate in v),
        ),
    )
    values: tuple | dict = option(
        (),
        Constraint(
            lambda v: isinstance(v, (list, tuple, dict)),
            "be a list of numbers, or a table of them by data set",
            refused=("text", 1.0),
            allowed="a list of numbers, or a table of them by data set",
        ),
    )

    renamed = {"droprates": "sparsities"}

    rules = (
        Rule(
            "values",
            lambda o: all(
                isinstance(row, (list, tuple)) and len(row) == len(o.sparsities) and all(is_number(v) for v in row)
                for row in _rows(o.values)
            ),
            lambda o: f"hold {len(o.sparsities)} numbers (one per reference.sparsities) per row",
            example={"source": "paper", "sparsities": [0.5], "values": [1.0, 2.0]},
        ),
        Rule(
            "source",
            lambda o: o.source is not None or not o.sparsities,
            lambda o: "be given with reference values",
            example={"sparsities": [0.5], "values": [1.0]},
        ),
    )

    def __post_init__(self):
        validate(self, "reference")
        values = (
            {name: tuple(row) for name, row in self.values.items()}
            if isinstance(self.values, dict)
            else tuple(self.values)
        )
        object.__setattr__(self, "values", values)

    def rows(self, data_name: str | None) -> list:
        """``[{"droprate", "value"}]`` for the data set ``data_name`` (or the only row); empty if none."""
        values = self.values.get(data_name, ()) if isinstance(self.values, dict) else self.values
        return [{"droprate": float(rate), "value": float(value)} for rate, value in zip(self.sparsities, values)]


def _rows(values) -> list:
    """The rows of ``reference.values``: the one list, or each data set's."""
    return list(values.values()) if isinstance(values, dict) else [values]


@dataclass(frozen=True)
class ExperimentConfig:
    """``[experiment]``: ``name`` turns the run into a packaged study (a sweep of fits, such as the
    paper's simulations) instead of a single fit; every other key is an option of that study.
    """

    name: str | None = option(None, optional(STRING))
    options: dict = field(default_factory=dict)

    rules = (
        Rule(
            "name",
            lambda o: o.name is not None or not o.options,
            lambda o: "be set when experiment options are given",
            example={"name": None, "draws": 3},
        ),
    )

    def __post_init__(self):
        validate(self, "experiment")


#: Selection rules of ``importance.selection`` and ``bayesprune importance --selection`` (the first is the default).
IMPORTANCE_SELECTIONS = ("stability", "empirical-null", "bayesian-fdr", "knockoff")


def _distinct_groups(value) -> bool:
    """Non-empty lists of input names, no input named twice."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(group, (list, tuple)) and group and all(isinstance(name, str) for name in group) for group in value
    ):
        return False
    named = [name for group in value for name in group]
    return len(set(named)) == len(named)


@dataclass(frozen=True)
class ImportanceConfig:
    """``[importance]``: how ``bayesprune importance`` and the report group and select the inputs.

    ``correlation``: inputs whose absolute correlation on the training rows exceeds it (or that a chain of
    such pairs joins) are one group, in (0, 1]; at 1 no inputs are grouped. ``groups``: the user's own groups,
    lists of input names, in place of the correlation's (every input not named stays alone; a name must be an
    input of the table, checked against the data before anything is written, and no input may be named
    twice). ``selection``: the selection rule, one of :data:`IMPORTANCE_SELECTIONS` (``bayesprune importance
    --selection`` overrides it).
    """

    correlation: float = option(0.9, unit(open_high=False))
    groups: tuple | None = option(
        None,
        optional(
            Constraint(
                _distinct_groups,
                "be a list of non-empty lists of input names, each input named once",
                refused=("a", [[]], [["a"], ["a"]], [1]),
                allowed="lists of input names, each input in one",
                convert=lambda v: tuple(tuple(group) for group in v),
            )
        ),
    )
    selection: str = option(IMPORTANCE_SELECTIONS[0], one_of(IMPORTANCE_SELECTIONS))

    def __post_init__(self):
        validate(self, "importance")
