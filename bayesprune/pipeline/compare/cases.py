"""``[[compare.cases]]``: several comparisons in one command, each case the comparison's config with its own
keys over it (another network, MAC level or data) and its own seeds.

A case is a table ``{name = "...", seeds = [...], set = {"model.network" = "mobilenet_v2", ...}}``: ``set`` holds
dotted keys or nested tables (``set = {model = {network = "mobilenet_v2"}}``) of a run config's sections, top-level
keys (``device``) or method tables, merged over the comparison's own; ``seeds`` (default ``compare.seeds``) are the
seeds it runs. Its cells are the cells the comparison would have with those keys and seeds, each named
``<case>-<cell>``; a case without keys of its own is the comparison as written, its cells named as without cases
(so a comparison that gains cases keeps its finished cells). Each case's rows start from their own trained network
per seed (:func:`start_key`), and the leaderboards are grouped by case.
"""

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field, fields

from bayesprune.core.errors import ConfigError
from bayesprune.core.validation import count, list_of, require
from bayesprune.pipeline.config import MAX_SEED, _resolve_data_paths, new_names, set_key

#: The seeds of a comparison (``compare.seeds``) or of one case.
SEEDS = list_of(count(0, MAX_SEED - 1), "non-negative integers below 2**31")
#: A case's own keys.
KEYS = ("name", "seeds", "set")
#: A case's name: the prefix of its cells' folders.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
#: What a case may not set: the comparison itself, and what its own keys say (its seeds) or its cells set.
FIXED = ("compare", "method", "seed", "seeds", "description")


@dataclass(frozen=True)
class Case:
    """One case of a comparison.

    Attributes:
        name: its name, the prefix of its cells' names and its leaderboard rows' ``case``.
        seeds: the seeds it runs (``None``: ``compare.seeds``).
        overrides: its keys, a nested table in TOML layout merged over the comparison's config.
    """

    name: str
    seeds: tuple | None = None
    overrides: dict = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        """What its cells' names begin with: none for a case that is the comparison as written."""
        return f"{self.name}-" if self.overrides else ""


def settable() -> set:
    """The first part of a key a case may set: a run config's sections and other top-level keys, and the
    registered methods' tables."""
    from bayesprune.methods import available_methods
    from bayesprune.pipeline.config import RunConfig

    own = {f.name for f in fields(RunConfig)} - {*FIXED, "options", "method_options"}
    return own | set(available_methods())


def parse_cases(value) -> tuple:
    """``compare.cases`` (a list of tables, or :class:`Case` already read) as a tuple of :class:`Case`, refusing
    in one line naming the key an unknown key, a bad name, seeds or ``set``, a repeated name, and two cases
    with the same keys (the same cells)."""
    cases = []
    for index, item in enumerate(value):
        if isinstance(item, Case):
            cases.append(item)
            continue
        name = item.get("name")
        require(
            isinstance(name, str) and NAME.match(name) is not None,
            f"compare.cases[{index}].name",
            "be a name of up to 64 letters, digits, '.', '_' and '-' (its cells' prefix)",
            name,
        )
        where = f"compare.cases[{name}]"
        unknown = sorted(set(item) - set(KEYS))
        if unknown:
            raise ConfigError(f"unknown config key '{where}.{unknown[0]}' (one of {list(KEYS)})")
        seeds = item.get("seeds")
        if seeds is not None:
            require(SEEDS.accepts(seeds), f"{where}.seeds", SEEDS.words(), seeds)
            seeds = SEEDS.convert(seeds)
        cases.append(Case(name, seeds, _overrides(item.get("set", {}), where)))
    for index, case in enumerate(cases):
        earlier = cases[:index]
        require(
            all(other.name != case.name for other in earlier),
            f"compare.cases[{index}].name",
            "differ from every other case's",
            case.name,
        )
        same = next((other.name for other in earlier if other.overrides == case.overrides), None)
        if same is not None:
            raise ConfigError(
                f"compare.cases[{case.name}].set must differ from case {same}'s (the same cells); give one case both's seeds"
            )
    return tuple(cases)


def _overrides(table, where: str) -> dict:
    """A case's ``set`` as one nested table (TOML layout), its keys' old names read as a config's are
    (:func:`~bayesprune.pipeline.config.new_names`)."""
    require(isinstance(table, dict), f"{where}.set", 'be a table of config keys ("model.network" = ...)', table)
    nested, allowed = {}, settable()
    for key, value in table.items():
        path = key.split(".")
        require(all(path), f"{where}.set", "name config keys (section.key)", key)
        if path[0] not in allowed:
            raise ConfigError(
                f"{where}.set: '{key}' cannot be set in a case (a run config's section or top-level key, or a "
                f"method's table; its seeds are {where}.seeds)"
            )
        nested = merged(nested, set_key({}, path, value))
    try:  # read as a config's own tables are: an old name as the new one, with its note; both names refused
        return new_names(nested)
    except ConfigError as error:
        raise ConfigError(f"{where}.set: {error}") from None


def merged(base: dict, over: dict) -> dict:
    """``base`` with ``over`` written over it, tables merged key by key (neither is changed)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def start_key(case: Case) -> str:
    """What a case's trained start network depends on beyond the seed: its keys outside ``[prune]``,
    ``[baseline]`` and the methods' tables, hashed (``""``: none, the comparison's own network; cases that
    differ only in those keys, such as ``prune.macs``, share their start)."""
    from bayesprune.methods import available_methods

    kept = {
        key: value for key, value in case.overrides.items() if key not in ("prune", "baseline", *available_methods())
    }
    if not kept:
        return ""
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:10]


def with_absolute_paths(raw: dict, folder) -> dict:
    """``raw`` with the relative data files and ``model.weights`` its cases set made absolute, read from ``folder``
    (the config file's; ``None``: the current folder) where they exist there, else from the current folder, as
    the config's own are (:func:`~bayesprune.pipeline.config.read_config_file`): its cells and its
    ``comparison.toml`` find them from any folder."""
    table = raw.get("compare")
    cases = table.get("cases") if isinstance(table, dict) else None
    for case in cases if isinstance(cases, list) else []:
        own = case.get("set") if isinstance(case, dict) else None
        for key, value in own.items() if isinstance(own, dict) else ():
            section, _, name = key.partition(".")
            if section in ("data", "model") and (name or isinstance(value, dict)):
                found = _resolve_data_paths({section: {name: value} if name else dict(value)}, folder)[section]
                own[key] = found[name] if name else found
    return raw
