"""Declarative run configuration: the whole run (:class:`RunConfig`; its tables are
:mod:`bayesprune.pipeline.sections`), validated eagerly.

Every invalid value raises :class:`~bayesprune.core.errors.ConfigError` naming the field
(``sbnn.pi must lie in (0, 1), got 1.5``). Packaged configs live in ``bayesprune/configs`` and are
addressed by file stem; any key can be overridden with ``section.key=value``.
"""

import os
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import tomli_w

from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import resolve_device
from bayesprune.core.optim import OptimConfig  # [optim] lives with the optimisers it builds (the methods read it)
from bayesprune.core.validation import (
    STRING,
    Constraint,
    Rule,
    count,
    list_of,
    option,
    read_renamed,
    refuse_unknown_keys,
    require,
    validate,
)
from bayesprune.pipeline.sections import (
    BaselineConfig,
    DataConfig,
    ExperimentConfig,
    ImportanceConfig,
    ModelConfig,
    PruneConfig,
    ReferenceConfig,
    TrainConfig,
)

#: Seeds of a run are seed + split index + chain, and NumPy takes seeds below 2**32.
MAX_SEED = 2**31

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
        raw = new_names(raw)
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

    @property
    def torch_device(self):
        """The ``torch.device`` of ``device`` (:func:`~bayesprune.core.loop.resolve_device`): where every service
        of a run (fit, checks, comparison cells, importance, studies) reads its device, never resolving it anew."""
        return resolve_device(self.device)

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


def new_names(raw: dict) -> dict:
    """``raw`` (TOML layout) with the keys each section reads under an old name (its class's ``renamed``) given
    their new names, a one-line note for each (:func:`~bayesprune.core.validation.read_renamed`)."""
    return {
        key: read_renamed(value, key, getattr(_SECTIONS[key], "renamed", {}))
        if key in _SECTIONS and isinstance(value, dict)
        else value
        for key, value in raw.items()
    }


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
    return read_config_file(path, source)


def read_config_file(path: Path, source: str) -> dict:
    """The parsed TOML of the config file ``path`` (``source``: how the user named it), its relative file and
    folder names read from its folder (:func:`_resolve_data_paths`): what ``run``, ``compare`` and ``sweep`` read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: cannot read the config ({getattr(error, 'strerror', None) or error})") from None
    return _resolve_data_paths(_read_toml(text, source), path.parent)


#: The ``[data]`` options that name a file or a folder (the user loaders' and the image sets' roots).
DATA_PATHS = ("path", "train", "test", "root")


def _resolve_data_paths(raw: dict, folder: Path | None) -> dict:
    """``raw`` with every relative file or folder of its ``[data]`` table and ``model.weights`` made absolute:
    read from ``folder`` (the config file's) where it exists there, as most tools do, and otherwise from the
    current folder (where configs written before this rule found their files, and where a ``--set`` value
    is the shell's; ``folder = None``: the current folder). Stored absolute, a run folder's ``config.toml``
    finds its data from any folder, and once the run folder is moved."""
    for section, keys in (("data", DATA_PATHS), ("model", ("weights",))):
        table = raw.get(section)
        if isinstance(table, dict):
            for key in keys:
                value = table.get(key)
                if not isinstance(value, str) or not value or Path(value).is_absolute() or value.startswith("~"):
                    continue
                beside = None if folder is None else folder / value
                table[key] = os.path.abspath(beside if beside is not None and beside.exists() else value)
    return raw


def apply_overrides(raw: dict, overrides) -> dict:
    """``raw`` (parsed TOML) with its old key names read as the new ones (:func:`new_names`) and every
    ``section.key=value`` of ``overrides`` set (an old name setting the new one, with its note), and every
    relative file or folder name then left read from the current folder (:func:`_resolve_data_paths`)."""
    raw = new_names(raw)
    for assignment in overrides:
        keys, value = parse_override(assignment)
        if len(keys) == 2 and keys[0] in _SECTIONS:
            renamed = getattr(_SECTIONS[keys[0]], "renamed", {})
            keys = [keys[0], *read_renamed({keys[1]: value}, keys[0], renamed)]
        set_key(raw, keys, value)
    return _resolve_data_paths(raw, None)


def set_key(raw: dict, keys: list, value) -> dict:
    """``raw`` (TOML layout, changed in place) with the dotted key ``keys`` set to ``value``, the tables on its path
    made where missing; a value on the path that is no table is refused, naming it."""
    table = raw
    for key in keys[:-1]:
        table = table.setdefault(key, {})
        require(isinstance(table, dict), ".".join(keys[:-1]), "be a table", table)
    table[keys[-1]] = value
    return raw
