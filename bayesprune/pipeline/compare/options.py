"""A comparison config read: its ``[compare]`` table (:class:`CompareOptions`), each option declared with what
it may hold (:mod:`bayesprune.core.validation`) and checked by the one validator, and the packaged comparisons."""

import json
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from bayesprune.core.errors import ConfigError
from bayesprune.core.validation import (
    FLAG,
    Constraint,
    Rule,
    count,
    list_of,
    option,
    optional,
    read_renamed,
    require,
    unit,
    validate,
)
from bayesprune.methods import available_methods, get_method
from bayesprune.pipeline.compare.cases import SEEDS, Case, parse_cases, with_absolute_paths
from bayesprune.pipeline.config import apply_overrides, load_config, packaged_configs, read_config_file

#: The packaged comparison run when no config is given.
DEFAULT = "compare-digits"
#: Timed forward passes per row (the median of a thousand is as steady as it gets) and the timed batch's rows.
MAX_LATENCY_REPEATS = 1000
MAX_LATENCY_BATCH = 65536


def _methods(value) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(name, str) and name in available_methods() for name in value)
    )


def _suffixes() -> list:
    """``<options_from>`` of every packaged config ``<method>-<options_from>``."""
    return sorted(
        {
            name[len(method) + 1 :]
            for name in packaged_configs()
            for method in available_methods()
            if name.startswith(f"{method}-")
        }
    )


def _configs(value) -> bool:
    return isinstance(value, dict) and all(
        method in available_methods() and isinstance(name, str) and name in packaged_configs()
        for method, name in value.items()
    )


def _foreign_config(options):
    """``(method, config, its method)`` of the first entry of ``compare.configs`` that is another method's config."""
    held = ((method, name, load_config(name).method) for method, name in options.configs.items())
    return next(((method, name, owner) for method, name, owner in held if owner != method), None)


def _foreign_example() -> dict:
    """A ``compare.configs`` that gives one registered method another's packaged digits config."""
    methods = [method for method in available_methods() if f"{method}-digits" in packaged_configs()]
    return {"configs": {methods[0]: f"{methods[1]}-digits"}}


def _variant(method, table) -> bool:
    """Options of ``method``'s table → a list of distinct values each."""
    if method not in available_methods() or not isinstance(table, dict) or not table:
        return False
    known = {f.name for f in fields(get_method(method).Options)}
    return all(
        name in known and isinstance(values, list) and len({json.dumps(v) for v in values}) == len(values)
        for name, values in table.items()
    )


METHODS = Constraint(
    _methods,
    lambda: f"be a non-empty list of methods of {sorted(available_methods())}",
    refused=([], ["no-such-method"], "no-such-method", [1]),
    allowed="a non-empty list of registered methods (`bayesprune list`)",
    convert=lambda value: tuple(dict.fromkeys(value)),
)

OPTIONS_FROM = Constraint(
    lambda value: isinstance(value, str) and value in _suffixes(),
    lambda: f"name a packaged config suffix <method>-<options_from>, one of {_suffixes()}",
    refused=("no-such-suffix", 1),
    allowed="a suffix of packaged configs `<method>-<options_from>` (`bayesprune list`)",
)

CONFIGS = Constraint(
    _configs,
    "be a table of method = packaged config (bayesprune list)",
    refused=({"no-such-method": "no-such-config"}, ["no-such-config"], "text"),
    allowed="a table of registered method = one of its packaged configs",
    convert=dict,
)

VARIANTS = Constraint(
    lambda value: isinstance(value, dict) and all(_variant(method, table) for method, table in value.items()),
    "be a table of method = {option of its table = [distinct values], ...}",
    refused=({"no-such-method": {"lr": [1]}}, [1], "text"),
    allowed="a table of registered method = `{option = [distinct values], ...}`",
    convert=dict,
)

CASES = Constraint(
    lambda value: isinstance(value, (list, tuple)) and all(isinstance(item, (dict, Case)) for item in value),
    "be a list of tables {name = ..., seeds = [...], set = {...}} ([[compare.cases]])",
    refused=("text", [1], {"name": "a"}),
    allowed="a list of tables `{name, seeds, set}` (`[[compare.cases]]`), each name its own",
    convert=parse_cases,
)


@dataclass(frozen=True)
class CompareOptions:
    """``[compare]``: what is compared.

    Attributes:
        methods: registered methods (default: all of them whose sparsities mean the comparison's). The
            baselines always run (``magnitude`` gives the plain network's error).
        sparsities: the sparsity budgets, distinct fractions of the weights removed, in (0, 1).
        seeds: every cell is fitted from each.
        options_from: each method's table and ``[optim]`` come from its packaged config
            ``<method>-<options_from>`` where there is one.
        configs: method → the packaged config to take them from instead (``{sbnn = "mnist-lenet-300-100"}``).
        finetune_epochs: the baselines' fine-tuning of each pruned network (their ``prune.finetune_epochs``).
        latency_batch: the batch size of the measured latency.
        latency_repeats: timed forward passes (the median is reported).
        certify: add a PBP cell per method, sparsity and seed, started from the method's mask fitted
            on S_P alone, for a certificate of every method in its ``bound`` column (about doubles the cost).
        budget_epochs: when set (``budget`` before, still read), every method trains this many epochs in all,
            split over its stages in the proportions its config gives them, only the network its row reports
            (PFT its first start mask, saliency its first criterion at the most stages, ProbMask without its own
            magnitude baseline) and ProbMask's t1, t2 scaled with its main stage (:func:`~bayesprune.pipeline.compare.comparison.held_to_budget`;
            ``prune.finetune_epochs`` is a stage: the baselines' plain network and fine-tuning).
        variants: method → ``{option = [values], ...}``: the method runs once per combination of values, rows
            ``<method>-<value>[-<value>...]``; an empty list: the method does not run.
        cases: several comparisons in one (:mod:`~bayesprune.pipeline.compare.cases`), each table a ``name``, its
            ``seeds`` (default ``seeds``) and ``set``, keys written over the comparison's config (dotted keys or
            nested tables, ``{"model.network" = "mobilenet_v2", "prune.macs" = 0.3}``); its cells are named
            ``<name>-<cell>`` (a case without keys of its own keeps the names the comparison has without cases),
            start from the network trained for that case and seed (shared by cases that differ in ``[prune]``,
            ``[baseline]`` or method tables only), and every leaderboard has a ``case`` column. ``--seeds``
            narrows every case to those seeds for one call; cases added to a comparison's ``comparison.toml`` are
            new cells on ``--resume``.
    """

    methods: tuple | None = option(None, optional(METHODS))
    sparsities: tuple = option(
        (0.5, 0.8, 0.9, 0.95),
        list_of(unit(), "numbers in (0, 1)", convert=lambda value: tuple(sorted({float(s) for s in value}))),
    )
    seeds: tuple = option((0,), SEEDS)
    options_from: str = option("digits", OPTIONS_FROM)
    configs: dict = option(factory=dict, constraint=CONFIGS)
    finetune_epochs: int = option(10, count(0))
    latency_batch: int = option(64, count(1, MAX_LATENCY_BATCH))
    latency_repeats: int = option(30, count(1, MAX_LATENCY_REPEATS))
    certify: bool = option(False, FLAG)
    budget_epochs: int | None = option(None, optional(count(1)))
    variants: dict = option(factory=dict, constraint=VARIANTS)
    cases: tuple = option((), CASES)

    #: Keys read under their old names, each with a one-line note (``budget`` is a mask's sparsity too,
    #: :class:`bayesprune.core.pruning.Budget`).
    renamed = {"budget": "budget_epochs"}

    rules = (
        Rule(
            "configs",
            lambda o: _foreign_config(o) is None,
            lambda o: (
                "map each method to a config of its own"
                + (" ({} = {!r} is {}'s)".format(*_foreign_config(o)) if o.configs else "")
            ),
            example=_foreign_example,
        ),
    )

    def __post_init__(self):
        validate(self, "compare")


def comparison_configs() -> dict:
    """The packaged comparison configs: name → file."""
    folder = resources.files("bayesprune.pipeline.compare") / "configs"
    return {
        entry.name[:-5]: entry
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


def _read(source: str) -> dict:
    """The parsed TOML of a packaged comparison config or a file (its relative data paths read from its
    folder, as ``run`` reads them: :func:`~bayesprune.pipeline.config.read_config_file`)."""
    packaged = comparison_configs()
    if source in packaged:
        return tomllib.loads(packaged[source].read_text())
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"unknown comparison config {source!r}: not a file and not one of {sorted(packaged)}")
    return read_config_file(path, source)


def comparison_options(raw: dict) -> CompareOptions:
    """The validated ``[compare]`` table of the comparison config ``raw`` (TOML layout), its renamed keys read
    under their new names (``raw`` then holds those)."""
    table = raw.get("compare", {})
    require(isinstance(table, dict), "compare", "be a table", table)
    if set(CompareOptions.renamed) & set(table):
        raw["compare"] = table = read_renamed(table, "compare", CompareOptions.renamed)
    known = {f.name for f in fields(CompareOptions)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"unknown config key 'compare.{unknown[0]}' (one of {sorted(known)})")
    return CompareOptions(**table)


def load_comparison(source: str | None = None, overrides=()) -> tuple:
    """``(raw, options)``: a comparison config (packaged name or TOML path; default ``compare-digits``)
    with ``section.key=value`` overrides applied, old key names read as the new ones and its cases' relative
    files read from its folder, and its validated ``[compare]`` table."""
    source = source or DEFAULT
    folder = None if source in comparison_configs() else Path(source).parent
    raw = with_absolute_paths(apply_overrides(_read(source), overrides), folder)
    if "method" in raw:
        raise ConfigError("a comparison config has no 'method': it runs compare.methods")
    return raw, comparison_options(raw)
