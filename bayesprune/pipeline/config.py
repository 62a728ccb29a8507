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
from bayesprune.core.normalization import DEFAULT_BATCHES, MIN_BATCH_SIZE, Calibration
from bayesprune.core.optim import OptimConfig  # [optim] lives with the optimisers it builds (the methods read it)
from bayesprune.core.precision import PRECISIONS
from bayesprune.core.validation import MAX_SCALE, is_count, is_scale, refuse_unknown_keys
from bayesprune.core.validation import is_int as _is_int
from bayesprune.core.validation import is_number as _is_number
from bayesprune.core.validation import require as _require


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

    dataset: str = "digits"
    batch_size: int | str = 128
    splits: list | str | None = None
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        _require(isinstance(self.dataset, str), "data.dataset", "be a string", self.dataset)
        _require(
            self.batch_size == "auto" or is_count(self.batch_size),
            "data.batch_size",
            f"be a positive integer up to {MAX_COUNT} or 'auto'",
            self.batch_size,
        )
        if self.splits is not None:
            _require(self.dataset == "uci", "data.splits", "only be set for data.dataset = 'uci'", self.splits)
            valid = self.splits == "all" or (
                isinstance(self.splits, list) and self.splits and all(_is_int(k) and k >= 0 for k in self.splits)
            )
            _require(valid, "data.splits", "be 'all' or a non-empty list of split indices", self.splits)
            _require(
                "split" not in self.options,
                "data.split",
                "not be given beside data.splits (set data.splits = [k] for split k)",
                self.options.get("split"),
            )

    def batch_size_for(self, num_train: int) -> int:
        """The minibatch size for ``num_train`` training rows."""
        return max(32, math.ceil(num_train / 100)) if self.batch_size == "auto" else self.batch_size


#: ``model.factory``: a dotted module path, a colon, a dotted attribute path.
FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class ModelConfig:
    """``[model]``: ``architecture`` names a builder of :mod:`bayesprune.models`, or ``factory``
    (``"module:callable"``, the run's working directory importable) names the user's own, called as
    ``callable(input_shape, output_dim, **options)``; every other key is an option of the builder.

    ``noise_scale`` fixes the Gaussian noise of regression; absent, it is learned. ``expose`` and
    ``hide`` add parameters to the sites or take them out (names, globs or module type names,
    :func:`bayesprune.core.sites.site_names`; by default the sites are the parameters of the Linear and
    convolution layers, and normalisation layers stay point estimates).
    """

    architecture: str = "mlp"
    factory: str | None = None
    noise_scale: float | None = None
    expose: tuple = ()
    hide: tuple = ()
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        _require(isinstance(self.architecture, str), "model.architecture", "be a string", self.architecture)
        for key in ("expose", "hide"):
            value = getattr(self, key)
            _require(
                isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value),
                f"model.{key}",
                "be a list of parameter names, globs or module type names",
                value,
            )
            object.__setattr__(self, key, tuple(value))
        if self.factory is not None:
            _require(
                isinstance(self.factory, str) and FACTORY.fullmatch(self.factory) is not None,
                "model.factory",
                "be 'module:callable' (e.g. 'mynets:resnet')",
                self.factory,
            )
            _require(
                self.architecture == "mlp", "model.architecture", "not be given beside model.factory", self.architecture
            )
        if self.noise_scale is not None:
            _require(
                is_scale(self.noise_scale),
                "model.noise_scale",
                f"be a positive number up to {MAX_SCALE:g}",
                self.noise_scale,
            )

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

    epochs: int | None = None
    steps: int | None = None
    validation: float = 0.0
    patience: int | None = None
    checkpoint_every: int = 1
    kernels: str = "auto"
    precision: str = "float32"
    memory_format: str = "auto"

    def __post_init__(self):
        if self.steps is not None:
            _require(
                _is_int(self.steps) and 0 < self.steps <= MAX_COUNT,
                "train.steps",
                f"be a positive integer up to {MAX_COUNT}",
                self.steps,
            )
            object.__setattr__(self, "epochs", None)  # the budget replaces them (an override of a config's epochs)
        elif self.epochs is None:
            object.__setattr__(self, "epochs", 200)
        if self.epochs is not None:
            _require(
                _is_int(self.epochs) and 0 < self.epochs <= MAX_COUNT,
                "train.epochs",
                f"be a positive integer up to {MAX_COUNT}",
                self.epochs,
            )
        _require(
            _is_number(self.validation) and 0 <= self.validation < 1,
            "train.validation",
            "lie in [0, 1)",
            self.validation,
        )
        if self.patience is not None:
            _require(
                _is_int(self.patience) and self.patience > 0, "train.patience", "be a positive integer", self.patience
            )
            _require(self.validation > 0, "train.patience", "come with train.validation > 0", self.patience)
        _require(
            is_count(self.checkpoint_every),
            "train.checkpoint_every",
            f"be a positive integer up to {MAX_COUNT}",
            self.checkpoint_every,
        )
        _require(self.kernels in KERNEL_MODES, "train.kernels", f"be one of {list(KERNEL_MODES)}", self.kernels)
        _require(self.precision in PRECISIONS, "train.precision", f"be one of {list(PRECISIONS)}", self.precision)
        _require(
            self.memory_format in MEMORY_FORMATS,
            "train.memory_format",
            f"be one of {list(MEMORY_FORMATS)}",
            self.memory_format,
        )


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
    where the S passes at each droprate cost little beside training, and ``"unpruned"`` above."""

    droprates: tuple = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
    scope: str = "global"
    level: str = "weight"
    min_keep: int | None = None
    include_biases: bool = True
    recalibrate: bool = True
    recalibrate_batches: int = DEFAULT_BATCHES
    finetune_epochs: int = 0
    predictive: str = "auto"

    def __post_init__(self):
        from bayesprune.core.normalization import MAX_BATCHES
        from bayesprune.core.pruning import LEVELS, SCOPES

        _require(
            isinstance(self.droprates, (list, tuple)) and len(self.droprates) > 0,
            "prune.droprates",
            "be a non-empty list",
            self.droprates,
        )
        for rate in self.droprates:
            _require(_is_number(rate) and 0 <= rate < 1, "prune.droprates", "contain only droprates in [0, 1)", rate)
        object.__setattr__(self, "droprates", tuple(sorted(set(float(rate) for rate in self.droprates))))
        _require(self.scope in SCOPES, "prune.scope", f"be one of {list(SCOPES)}", self.scope)
        _require(self.level in LEVELS, "prune.level", f"be one of {list(LEVELS)}", self.level)
        _require(
            self.min_keep is None or is_count(self.min_keep, 0),
            "prune.min_keep",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.min_keep,
        )
        _require(isinstance(self.include_biases, bool), "prune.include_biases", "be true or false", self.include_biases)
        _require(isinstance(self.recalibrate, bool), "prune.recalibrate", "be true or false", self.recalibrate)
        _require(
            _is_int(self.recalibrate_batches) and 0 < self.recalibrate_batches <= MAX_BATCHES,
            "prune.recalibrate_batches",
            f"be a positive integer up to {MAX_BATCHES}",
            self.recalibrate_batches,
        )
        _require(
            is_count(self.finetune_epochs, 0),
            "prune.finetune_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.finetune_epochs,
        )
        _require(self.predictive in PREDICTIVES, "prune.predictive", f"be one of {list(PREDICTIVES)}", self.predictive)

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

    enabled: bool = True
    epochs: int | None = None
    lr: float | None = None
    validation: float | None = None

    def __post_init__(self):
        _require(isinstance(self.enabled, bool), "baseline.enabled", "be true or false", self.enabled)
        if self.validation is not None:
            _require(
                _is_number(self.validation) and 0 <= self.validation < 1,
                "baseline.validation",
                "lie in [0, 1)",
                self.validation,
            )
        if self.epochs is not None:
            _require(
                _is_int(self.epochs) and 0 < self.epochs <= MAX_COUNT,
                "baseline.epochs",
                f"be a positive integer up to {MAX_COUNT}",
                self.epochs,
            )
        if self.lr is not None:
            _require(is_scale(self.lr), "baseline.lr", f"be a positive number up to {MAX_SCALE:g}", self.lr)

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

    source: str | None = None
    droprates: tuple = ()
    values: tuple | dict = ()

    def __post_init__(self):
        _require(self.source is None or isinstance(self.source, str), "reference.source", "be a string", self.source)
        _require(isinstance(self.droprates, (list, tuple)), "reference.droprates", "be a list", self.droprates)
        for rate in self.droprates:
            _require(
                _is_number(rate) and 0 <= rate < 1, "reference.droprates", "contain only droprates in [0, 1)", rate
            )
        rows = self.values.values() if isinstance(self.values, dict) else [self.values]
        for row in rows:
            _require(
                isinstance(row, (list, tuple)) and len(row) == len(self.droprates) and all(_is_number(v) for v in row),
                "reference.values",
                f"hold {len(self.droprates)} numbers (one per reference.droprates) per row",
                row,
            )
        _require(
            self.source is not None or not self.droprates,
            "reference.source",
            "be given with reference values",
            self.source,
        )
        object.__setattr__(self, "droprates", tuple(float(rate) for rate in self.droprates))
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


@dataclass(frozen=True)
class ExperimentConfig:
    """``[experiment]``: ``name`` turns the run into a packaged study (a sweep of fits, such as the
    paper's simulations) instead of a single fit; every other key is an option of that study.
    """

    name: str | None = None
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.name is not None:
            _require(isinstance(self.name, str), "experiment.name", "be a string", self.name)
        else:
            _require(not self.options, "experiment.name", "be set when experiment options are given", self.name)


#: Selection rules of ``importance.selection`` and ``bayesprune importance --selection`` (the first is the default).
IMPORTANCE_SELECTIONS = ("empirical-null", "bayesian-fdr", "knockoff")


@dataclass(frozen=True)
class ImportanceConfig:
    """``[importance]``: how ``bayesprune importance`` and the report group and select the inputs.

    ``correlation``: inputs whose absolute correlation on the training rows exceeds it (or that a chain of
    such pairs joins) are one group, in (0, 1]; at 1 no inputs are grouped. ``groups``: the user's own groups,
    lists of input names, in place of the correlation's (every input not named stays alone; a name must be an
    input of the table, and no input may be named twice). ``selection``: the selection rule, one of
    :data:`IMPORTANCE_SELECTIONS` (``bayesprune importance --selection`` overrides it).
    """

    correlation: float = 0.9
    groups: tuple | None = None
    selection: str = IMPORTANCE_SELECTIONS[0]

    def __post_init__(self):
        _require(
            _is_number(self.correlation) and 0 < self.correlation <= 1,
            "importance.correlation",
            "be a number in (0, 1]",
            self.correlation,
        )
        if self.groups is not None:
            _require(
                isinstance(self.groups, (list, tuple))
                and all(
                    isinstance(group, (list, tuple)) and group and all(isinstance(name, str) for name in group)
                    for group in self.groups
                ),
                "importance.groups",
                "be a list of non-empty lists of input names",
                self.groups,
            )
            named = [name for group in self.groups for name in group]
            twice = sorted({name for name in named if named.count(name) > 1})
            _require(not twice, "importance.groups", "name each input once", twice)
            object.__setattr__(self, "groups", tuple(tuple(group) for group in self.groups))
        _require(
            self.selection in IMPORTANCE_SELECTIONS,
            "importance.selection",
            f"be one of {', '.join(IMPORTANCE_SELECTIONS)}",
            self.selection,
        )


# Seeds of a run are seed + split index + chain, and NumPy takes seeds below 2**32.
MAX_SEED = 2**31
# Epochs, steps and samples beyond this are a typo, not a plan (and overflow a C index further on).
from bayesprune.core.validation import MAX_COUNT  # noqa: E402

#: The most chains (whole fits, one after another) a run may ask for: R-hat and ESS need a handful.
MAX_CHAINS = 1000

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
    description: str = ""
    seed: int = 0
    seeds: tuple = ()
    device: str = "auto"
    chains: int | str = "auto"
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

    def __post_init__(self):
        from bayesprune.methods import get_method

        method = get_method(self.method)
        if self.method_options is None:
            object.__setattr__(self, "method_options", method.Options())
        _require(
            isinstance(self.method_options, method.Options),
            self.method,
            f"be a {method.Options.__name__}",
            self.method_options,
        )
        _require(
            _is_int(self.seed) and 0 <= self.seed < MAX_SEED, "seed", "be a non-negative integer below 2**31", self.seed
        )
        _require(
            isinstance(self.seeds, (list, tuple))
            and all(_is_int(s) and 0 <= s < MAX_SEED for s in self.seeds)
            and len(set(self.seeds)) == len(self.seeds),
            "seeds",
            "be a list of distinct non-negative integers below 2**31",
            self.seeds,
        )
        object.__setattr__(self, "seeds", tuple(self.seeds))
        _require(
            self.chains == "auto" or (_is_int(self.chains) and 0 < self.chains <= MAX_CHAINS),
            "chains",
            f'be "auto" or a positive integer up to {MAX_CHAINS}',
            self.chains,
        )
        _require(
            isinstance(self.device, str) and (self.device in ("auto", "cpu") or self.device.startswith("cuda")),
            "device",
            "be 'auto', 'cpu' or 'cuda[:N]'",
            self.device,
        )
        _require(isinstance(self.description, str), "description", "be a string", self.description)
        _require(
            self.baseline.validation is None or self.train.validation == 0,
            "baseline.validation",
            "not be given beside train.validation (the plain network keeps its epoch on the run's validation part)",
            self.baseline.validation,
        )

    @classmethod
    def from_dict(cls, raw: dict) -> "RunConfig":
        """Build and validate a config from a nested dict (parsed TOML)."""
        from bayesprune.methods import available_methods, get_method

        method = get_method(raw.get("method", cls.method))
        raw = _with_table_defaults(_fold_legacy_keys(raw, method), method)
        top = {f.name for f in fields(cls)} - set(_SECTIONS) - {"method_options"}
        kwargs = {}
        for key, value in raw.items():
            if key in _SECTIONS:
                _require(isinstance(value, dict), key, "be a table", value)
                kwargs[key] = _section(key, value)
            elif key == method.name:
                _require(isinstance(value, dict), key, "be a table", value)
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
    for legacy, option in method.legacy_keys.items():
        section, key = legacy.split(".")
        if not isinstance(raw.get(section), dict) or key not in raw[section]:
            continue
        value = raw[section].pop(key)
        if not raw[section] and section not in _SECTIONS:
            del raw[section]
        if option is None:
            continue
        table = raw.setdefault(method.name, {})
        _require(isinstance(table, dict), method.name, "be a table", table)
        if option in table:
            raise ConfigError(f"{legacy} is the old name of {method.name}.{option}; give only {method.name}.{option}")
        table[option] = value
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
        for option in getattr(method, "table_network_options", ()):  # chosen for the table's own network only
            table.get(method.name, {}).pop(option, None)
    for section, values in table.items():
        if isinstance(values, dict) and section != "data" and isinstance(raw.get(section, {}), dict):
            raw[section] = {**values, **raw.get(section, {})}
    return raw


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
    """``raw`` with every relative file or folder of its ``[data]`` table that exists in ``folder`` (the
    config file's) read from there, as most tools do; one that does not is left to the current folder,
    where configs written before this rule found their files."""
    data = raw.get("data")
    if isinstance(data, dict):
        for key in DATA_PATHS:
            value = data.get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).exists():
                data[key] = str(folder / value)
    return raw


def apply_overrides(raw: dict, overrides) -> dict:
    """``raw`` (parsed TOML) with every ``section.key=value`` of ``overrides`` set in place."""
    for assignment in overrides:
        keys, value = parse_override(assignment)
        table = raw
        for key in keys[:-1]:
            table = table.setdefault(key, {})
            _require(isinstance(table, dict), ".".join(keys[:-1]), "be a table", table)
        table[keys[-1]] = value
    return raw
