"""Declarative run configuration: one frozen dataclass per TOML section, validated eagerly.

Every invalid value raises :class:`~bayesprune.core.errors.ConfigError` naming the field
(``sbnn.pi must lie in (0, 1), got 1.5``). Packaged configs live in ``bayesprune/configs`` and are
addressed by file stem; any key can be overridden with ``section.key=value``.
"""

import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import tomli_w

from bayesprune.core.errors import ConfigError
from bayesprune.core.fused import KERNEL_MODES
from bayesprune.core.layout import MEMORY_FORMATS
from bayesprune.core.normalization import DEFAULT_BATCHES, MAX_BATCHES, MIN_BATCH_SIZE, Calibration
from bayesprune.core.optim import OptimConfig  # [optim] lives with the optimisers it builds (the methods read it)
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
    refuse_unknown_keys,
    require,
    scale,
    unit,
    validate,
)


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


#: Seeds of a run are seed + split index + chain, and NumPy takes seeds below 2**32.
MAX_SEED = 2**31

#: The most chains (whole fits, one after another) a run may ask for: R-hat and ESS need a handful.
MAX_CHAINS = 1000


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
    every method of a comparison starts from the same trained network; ``start_<metric>`` in ``metrics.json``
    is the test metric of the network the fit starts from.

    ``noise_scale`` fixes the Gaussian noise of regression; absent, it is learned. ``expose`` and
    ``hide`` add parameters to the sites or take them out (names, globs or module type names,
    :func:`bayesprune.core.sites.site_names`; by default the sites are the parameters of the Linear and
    convolution layers, and normalisation layers stay point estimates).
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
    noise_scale: float | None = option(None, optional(scale()))
    expose: tuple = option((), NAMES)
    hide: tuple = option((), NAMES)
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
    :mod:`bayesprune.core.layout`).
    """

    epochs: int | None = option(None, optional(count()))
    steps: int | None = option(None, optional(count()))
    validation: float = option(0.0, unit(open_low=False))
    patience: int | None = option(None, optional(count()))
    checkpoint_every: int = option(1, count())
    kernels: str = option("auto", one_of(KERNEL_MODES))
    precision: str = option("float32", one_of(PRECISIONS))
    memory_format: str = option("auto", one_of(MEMORY_FORMATS))

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
#: predictive at every droprate: a resnet18 (11M weights, 20 draws at 7 droprates) spent 8 of its
#: training epochs there (benchmarks/run_cost.py); LeNet-5 (431k) about one.
PREDICTIVES = ("auto", "every", "unpruned")
PREDICTIVE_CURVE_WEIGHTS = 1_000_000


@dataclass(frozen=True)
class PruneConfig:
    """``[prune]``: the pruning curve. At each droprate the fraction of all weights (``level =
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
    ``"every"`` droprate, or at the ``"unpruned"`` model only (the point estimate at every droprate);
    ``"auto"`` (default) is ``"every"`` for networks of at most 1,000,000 weights (:data:`PREDICTIVE_CURVE_WEIGHTS`),
    where the S passes at each droprate cost little beside training, and ``"unpruned"`` above.

    ``macs`` (unit level) is a MAC budget: a fraction of the dense network's multiply-accumulates to keep, or a
    list of them; at each, units leave by the method's unit scores (the floors of ``min_keep`` kept) until the
    network costs at most that (:func:`bayesprune.core.macs.resolve_macs`), and ``metrics.json``'s
    ``macs_curve`` holds its count, test metric and, with ``finetune_epochs``, its fine-tuned one. The
    dense network is the one the fit starts from, so every method's row of a comparison is cut to the same MACs."""

    droprates: tuple = option(
        (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95),
        list_of(
            unit(open_low=False),
            "droprates in [0, 1)",
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
        droprate or the ``"unpruned"`` model (``predictive = "auto"`` resolved by size)."""
        if self.predictive != "auto":
            return self.predictive
        return "every" if n_weights <= PREDICTIVE_CURVE_WEIGHTS else "unpruned"

    def budget(self, droprate: float):
        """The :class:`~bayesprune.core.pruning.Budget` of one point of the curve."""
        from bayesprune.core.pruning import Budget

        return Budget(fraction=droprate, scope=self.scope, level=self.level, min_keep=self.min_keep)

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

    ``values`` holds the test metric at each of ``droprates``: a list, or a table of lists keyed by
    data set name (``data.name``, e.g. one row per UCI set of paper 003's Table 2). ``source`` says
    where they come from (``"paper 003, Table 8, set 2"``).
    """

    source: str | None = option(None, optional(STRING))
    droprates: tuple = option(
        (),
        list_of(
            unit(open_low=False),
            "droprates in [0, 1)",
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

    rules = (
        Rule(
            "values",
            lambda o: all(
                isinstance(row, (list, tuple)) and len(row) == len(o.droprates) and all(is_number(v) for v in row)
                for row in _rows(o.values)
            ),
            lambda o: f"hold {len(o.droprates)} numbers (one per reference.droprates) per row",
            example={"source": "paper", "droprates": [0.5], "values": [1.0, 2.0]},
        ),
        Rule(
            "source",
            lambda o: o.source is not None or not o.droprates,
            lambda o: "be given with reference values",
            example={"droprates": [0.5], "values": [1.0]},
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
        return [{"droprate": float(rate), "value": float(value)} for rate, value in zip(self.droprates, values)]


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
IMPORTANCE_SELECTIONS = ("empirical-null", "bayesian-fdr", "knockoff")


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


_SECTIONS = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "prune": PruneConfig,
    "baseline": BaselineConfig,
    "reference": ReferenceConfig,
    "experiment": ExperimentConfig,
    "importance": ImportanceConfig,
}
_OPEN_SECTIONS = ("data", "model", "experiment")  # unknown keys become options of the loader / architecture


@dataclass(frozen=True)
class RunConfig:
    """A whole run. Top-level keys: ``method``, ``description``, ``seed``, ``device``, ``chains``.

    ``method`` names a registered :class:`~bayesprune.methods.Method`; its options come from the
    table of the same name (``[sbnn]``) and are validated by the method's ``Options`` dataclass
    (``method_options``). Keys of older layouts (``[prior]``, ``[guide]``, ``[objective]``,
    ``train.predictive_samples``) are folded into that table when the method declares them.

    ``chains = N`` fits the posterior N times independently (seeds ``seed``, ``seed + 1``, ...), so
    that R-hat and ESS across restarts are meaningful in ``posterior.nc`` and feature importance pools
    them. ``"auto"`` (the default) is the method's ``table_chains`` for the user's own table (a ``csv``
    or ``npz`` of 1-D inputs: 4 for the sBNN, whose restarts disagree on importance), else 1.

    ``seeds = [s1, s2, ...]`` repeats the whole run (every split) from each seed in turn, in place of
    ``seed``; ``metrics.json`` then holds the mean and standard deviation of every number over them.
    """

    method: str = "sbnn"
    description: str = option("", STRING)
    seed: int = option(0, count(0, MAX_SEED - 1, "be a non-negative integer below 2**31"))
    seeds: tuple = option(
        (),
        replace(
            list_of(count(0, MAX_SEED - 1), "", nonempty=False),
            expectation="be a list of distinct non-negative integers below 2**31",
            allowed="a list of distinct non-negative integers below 2**31",
        ),
    )
    device: str = option(
        "auto",
        Constraint(
            lambda v: isinstance(v, str) and (v in ("auto", "cpu") or v.startswith("cuda")),
            "be 'auto', 'cpu' or 'cuda[:N]'",
            refused=("gpu", 0),
            allowed='`"auto"`, `"cpu"`, `"cuda"` or `"cuda:N"`',
        ),
    )
    chains: int | str = option(
        "auto",
        Constraint(
            lambda v: v == "auto" or count(1, MAX_CHAINS).accepts(v),
            f'be "auto" or a positive integer up to {MAX_CHAINS}',
            refused=(0, MAX_CHAINS + 1, 1.5, "many"),
            allowed=f'`"auto"` or a positive integer up to {MAX_CHAINS}',
        ),
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    method_options: object = None

    rules = (
        Rule(
            "baseline.validation",
            lambda o: o.baseline.validation is None or o.train.validation == 0,
            lambda o: (
                "not be given beside train.validation (the plain network keeps its epoch on the run's validation part)"
            ),
            example={"baseline": {"validation": 0.2}, "train": {"validation": 0.2}},
            value=lambda o: o.baseline.validation,
        ),
    )

    def __post_init__(self):
        from bayesprune.methods import get_method

        method = get_method(self.method)
        if self.method_options is None:
            object.__setattr__(self, "method_options", method.Options())
        require(
            isinstance(self.method_options, method.Options),
            self.method,
            f"be a {method.Options.__name__}",
            self.method_options,
        )
        validate(self, None)

    @classmethod
    def from_dict(cls, raw: dict) -> "RunConfig":
        """Build and validate a config from a nested dict (parsed TOML)."""
        from bayesprune.methods import available_methods, get_method

        method = get_method(raw.get("method", cls.method))
        raw = _with_level_default(_with_table_defaults(_fold_legacy_keys(raw, method), method), method)
        top = {f.name for f in fields(cls)} - set(_SECTIONS) - {"method_options"}
        kwargs = {}
        for key, value in raw.items():
            if key in _SECTIONS:
                require(isinstance(value, dict), key, "be a table", value)
                kwargs[key] = _section(key, value)
            elif key == method.name:
                require(isinstance(value, dict), key, "be a table", value)
                kwargs["method_options"] = _options(method, value)
            elif key in top:
                kwargs[key] = value
            elif key in available_methods():
                raise ConfigError(f"[{key}] holds the options of method {key!r}, but method = {method.name!r}")
            else:
                raise ConfigError(f"unknown config key {key!r}")
        return cls(**kwargs)

    def for_data(self, num_train: int) -> "RunConfig":
        """This config with a number for ``data.batch_size`` and ``train.epochs`` on ``num_train``
        training rows (``batch_size = "auto"`` and ``train.steps`` resolved)."""
        from bayesprune.core.early_stopping import epochs_for_steps

        batch_size = self.data.batch_size_for(num_train)
        epochs = (
            self.train.epochs if self.train.steps is None else epochs_for_steps(self.train.steps, num_train, batch_size)
        )
        return replace(
            self, data=replace(self.data, batch_size=batch_size), train=replace(self.train, epochs=epochs, steps=None)
        )

    def to_dict(self) -> dict:
        """Nested dict in TOML layout (options folded back into their sections, ``None`` dropped)."""
        raw = asdict(self)
        for name in _OPEN_SECTIONS:
            raw[name].update(raw[name].pop("options"))
        raw[self.method] = raw.pop("method_options")
        return _drop_none(raw)

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())


def leaves(tree: dict, prefix: str = "") -> dict:
    """The leaves of nested dicts by dotted path: ``{"train": {"epochs": 1}}`` → ``{"train.epochs": 1}``."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(leaves(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def first_difference(held, wanted, prefix: str = "") -> str | None:
    """The dotted key where two configs (TOML layout) first differ (``None``: the same)."""
    if isinstance(held, dict) and isinstance(wanted, dict):
        for key in [*wanted, *(key for key in held if key not in wanted)]:
            found = first_difference(held.get(key), wanted.get(key), f"{prefix}{key}.")
            if found:
                return found
        return None
    return None if held == wanted else prefix.rstrip(".") or "(the whole config)"


def _options(method, values: dict):
    refuse_unknown_keys(method.name, values, method.Options, owner=method.name)
    return method.Options(**values)


def _fold_legacy_keys(raw: dict, method) -> dict:
    """``raw`` with the method's legacy keys (``prior.pi``) moved into its own table (``sbnn.pi``).

    A key given under both names is refused rather than resolved silently.
    """
    raw = {key: dict(value) if isinstance(value, dict) else value for key, value in raw.items()}
    for legacy, renamed in method.legacy_keys.items():
        section, key = legacy.split(".")
        if not isinstance(raw.get(section), dict) or key not in raw[section]:
            continue
        value = raw[section].pop(key)
        if not raw[section] and section not in _SECTIONS:
            del raw[section]
        if renamed is None:
            continue
        table = raw.setdefault(method.name, {})
        require(isinstance(table, dict), method.name, "be a table", table)
        if renamed in table:
            raise ConfigError(f"{legacy} is the old name of {method.name}.{renamed}; give only {method.name}.{renamed}")
        table[renamed] = value
    return raw


def _with_table_defaults(raw: dict, method) -> dict:
    """``raw`` with the keys it leaves out of its tables taken from the method's packaged config for tables
    (``Method.table_config``, e.g. ``sbnn-table``) when its data are the user's CSV table: the settings
    chosen there on held-out rows of tables (docs/reproductions.md), not the digits ones of the general
    defaults. Its top-level keys and ``[data]`` are not taken, nor its ``[model]`` for the user's own network
    (``model.factory``) or another architecture, nor the method's ``table_network_options`` (chosen for the
    table's network) for any network other than the table's own (other ``[model]`` values, e.g. hidden widths)."""
    name = getattr(method, "table_config", None)
    data = raw.get("data")
    if name is None or not isinstance(data, dict) or data.get("dataset") != "csv":
        return raw
    table = read_config(name)
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    architecture = table.get("model", {}).get("architecture")
    if model.get("factory") is not None or model.get("architecture", architecture) != architecture:
        table.pop("model", None)
    own = table.get("model", {})
    if "model" not in table or any(model.get(key, value) != value for key, value in own.items()):
        for option_name in getattr(method, "table_network_options", ()):  # chosen for the table's own network only
            table.get(method.name, {}).pop(option_name, None)
    for section, values in table.items():
        if isinstance(values, dict) and section != "data" and isinstance(raw.get(section, {}), dict):
            raw[section] = {**values, **raw.get(section, {})}
    return raw


def _with_level_default(raw: dict, method) -> dict:
    """``raw`` with ``prune.level`` set to the method's one level where it prunes at one level only
    (``Method.prune_levels``: unit gates prune units) and the config leaves the key out."""
    prune = raw.get("prune", {})
    if len(method.prune_levels) != 1 or not isinstance(prune, dict) or "level" in prune:
        return raw
    return {**raw, "prune": {**prune, "level": method.prune_levels[0]}}


def _section(name: str, values: dict):
    cls = _SECTIONS[name]
    if name not in _OPEN_SECTIONS:
        refuse_unknown_keys(name, values, cls)
    known = {f.name for f in fields(cls)} - {"options"}
    unknown = {key: value for key, value in values.items() if key not in known}
    kwargs = {key: value for key, value in values.items() if key in known}
    if name in _OPEN_SECTIONS:
        kwargs["options"] = unknown
    return cls(**kwargs)


def _drop_none(raw):
    if isinstance(raw, dict):
        return {key: _drop_none(value) for key, value in raw.items() if value is not None}
    if isinstance(raw, tuple):
        return list(raw)
    return raw


def _packaged_files() -> dict:
    """Packaged config name → its file, from ``bayesprune/configs`` and every method package's
    ``configs`` folder (a method ships its configs beside its code)."""
    root = resources.files("bayesprune")
    folders = [
        root / "configs",
        *(entry / "configs" for entry in sorted((root / "methods").iterdir(), key=lambda e: e.name)),
    ]
    files = {}
    for folder in folders:
        if folder.is_dir():
            files.update(
                {entry.name[: -len(".toml")]: entry for entry in folder.iterdir() if entry.name.endswith(".toml")}
            )
    return dict(sorted(files.items()))


def packaged_configs() -> dict:
    """Names of the packaged configs mapped to their descriptions."""
    return {name: tomllib.loads(entry.read_text()).get("description", "") for name, entry in _packaged_files().items()}


def _read_toml(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: invalid TOML ({error})") from None


def parse_override(assignment: str) -> tuple:
    """``"sbnn.pi=0.3"`` → ``(["sbnn", "pi"], 0.3)``; a value that is not TOML is taken as a string."""
    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        value = text
    return key.strip().split("."), value


def load_config(source: str | None = None, overrides=()) -> RunConfig:
    """Resolve a packaged config name or a TOML path (default: ``default``), apply overrides, validate."""
    return RunConfig.from_dict(apply_overrides(read_config(source), overrides))


def read_config(source: str | None = None) -> dict:
    """The parsed TOML of a packaged config name or a TOML path (default: ``default``), unvalidated."""
    source = source or "default"
    packaged = _packaged_files()
    if source in packaged:  # a packaged name wins over a same-named file; "./name" reads the file
        return _read_toml(packaged[source].read_text(), source)
    path = Path(source)
    if path.suffix != ".toml" and not path.exists():
        raise ConfigError(f"unknown config {source!r}: not a file and not one of {sorted(packaged_configs())}")
    if not path.is_file():
        raise ConfigError(f"{source}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: cannot read the config ({getattr(error, 'strerror', None) or error})") from None
    return _resolve_data_paths(_read_toml(text, source), path.parent)


#: The ``[data]`` options that name a file or a folder (the user loaders' and the image sets' roots).
DATA_PATHS = ("path", "train", "test", "root")


def _resolve_data_paths(raw: dict, folder: Path) -> dict:
    """``raw`` with every relative file or folder of its ``[data]`` table and ``model.weights`` that exists in ``folder`` (the
    config file's) read from there, as most tools do; one that does not is left to the current folder,
    where configs written before this rule found their files."""
    for section, keys in (("data", DATA_PATHS), ("model", ("weights",))):
        table = raw.get(section)
        if isinstance(table, dict):
            for key in keys:
                value = table.get(key)
                if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).exists():
                    table[key] = str(folder / value)
    return raw


def apply_overrides(raw: dict, overrides) -> dict:
    """``raw`` (parsed TOML) with every ``section.key=value`` of ``overrides`` set in place."""
    for assignment in overrides:
        keys, value = parse_override(assignment)
        table = raw
        for key in keys[:-1]:
            table = table.setdefault(key, {})
            require(isinstance(table, dict), ".".join(keys[:-1]), "be a table", table)
        table[keys[-1]] = value
    return raw
