"""Every option of every registered method, of the run's config tables and of a comparison's ``[compare]`` declares its constraint beside its
field (bayesprune.core.validation), and the one validator refuses what the declaration says it refuses:
each value out of range or of the wrong type, and each forbidden combination, is one ConfigError naming
``<table>.<key>``; a sample goes through the command line, which answers in one line with exit 2."""

import dataclasses

import pytest
import tomli_w

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.core.validation import Constraint, constraint_of
from bayesprune.methods import available_methods, get_method
from bayesprune.pipeline.compare.options import CompareOptions, comparison_options
from bayesprune.pipeline.config import _SECTIONS, RunConfig

#: Fields that are no option of their own: the open sections' other keys, the method's name (the registry
#: checks it) and the tables of a run.
STRUCTURE = {"options", "method", "method_options", *_SECTIONS}


def tables() -> dict:
    """Table name (``None``: the top level) → the dataclass its options are fields of (``compare``: a comparison
    config's)."""
    methods = {name: get_method(name).Options for name in sorted(available_methods())}
    return {None: RunConfig, **_SECTIONS, **methods, "compare": CompareOptions}


def options() -> list:
    """``(table, field)`` of every option."""
    return [
        (table, f.name) for table, cls in tables().items() for f in dataclasses.fields(cls) if f.name not in STRUCTURE
    ]


def raw_config(table, values: dict) -> dict:
    """The config (TOML layout) that sets ``values`` in ``table``."""
    if table is None:
        return dict(values)
    if table in _SECTIONS or table == "compare":
        return {table: dict(values)}
    return {"method": table, table: dict(values)}


def key(table, name: str) -> str:
    return name if table is None else f"{table}.{name}"


def refused_cases() -> list:
    cases = []
    for table, name in options():
        constraint = constraint_of(tables()[table], name)
        for value in constraint.refused if constraint is not None else ():
            cases.append(pytest.param(table, name, value, id=f"{key(table, name)}={value!r}"[:80]))
    return cases


def rule_cases() -> list:
    return [
        pytest.param(table, rule, id=f"{key(table, rule.key)}:{sorted(rule.values())}")
        for table, cls in tables().items()
        for rule in getattr(cls, "rules", ())
    ]


def refused_by_loader(raw: dict, named: str) -> str:
    """The one-line refusal of ``raw`` by its loader (a comparison's for ``[compare]``), which names ``named``."""
    with pytest.raises(ConfigError) as caught:
        comparison_options(raw) if "compare" in raw else RunConfig.from_dict(raw)
    message = str(caught.value)
    assert message.startswith(f"{named} must ") and "\n" not in message, message
    return message


@pytest.mark.parametrize("table, name", options(), ids=[key(*option) for option in options()])
def test_every_option_declares_its_constraint_and_its_default_meets_it(table, name):
    constraint = constraint_of(tables()[table], name)
    assert isinstance(constraint, Constraint), f"{key(table, name)} declares no constraint"
    assert constraint.refused, f"{key(table, name)} names no value it refuses"
    assert constraint.describe(), f"{key(table, name)} says nothing of what it takes"
    default = getattr(RunConfig() if table is None else tables()[table](), name)
    assert constraint.accepts(default), (key(table, name), default)


@pytest.mark.parametrize("table, name, value", refused_cases())
def test_a_value_out_of_range_or_of_the_wrong_type_is_refused_naming_its_key(table, name, value):
    message = refused_by_loader(raw_config(table, {name: value}), key(table, name))
    assert message.endswith(f"got {value!r}"), message


@pytest.mark.parametrize("table, rule", rule_cases())
def test_a_forbidden_combination_is_refused_naming_its_key(table, rule):
    example = {**rule.values()}
    nested = {section: example.pop(section) for section in list(example) if section in _SECTIONS}
    raw = {**raw_config(table, example), **nested}
    refused_by_loader(raw, key(table, rule.key))


def test_every_method_and_section_declares_at_least_one_refused_value():
    assert {table for table, _ in options()} == set(tables())


#: One option per kind of table for the command line: a method's range, a section's type, a combination, and
#: ``bayesprune compare``'s table.
CLI_SAMPLE = [
    (["run", "pbp-digits", "--set", "pbp.alpha=1.0"], "pbp.alpha"),
    (["run", "--set", "train.epochs='ten'"], "train.epochs"),
    (["run", "--set", "optim.momentum=0.9"], "optim.momentum"),
    (
        ["run", "sparse-vd-digits", "--set", "sparse-vd.kl_anneal_start=10", "--set", "sparse-vd.kl_anneal_end=5"],
        "sparse-vd.kl_anneal_end",
    ),
    (["run", "--set", f"seeds={tomli_w.dumps({'v': [1, 1]})[4:].strip()}"], "seeds"),
    (["compare", "--set", "compare.latency_repeats=0"], "compare.latency_repeats"),
    (["compare", "--set", "compare.configs={sbnn = 'pbp-digits'}"], "compare.configs"),
]


@pytest.mark.parametrize("argv, named", CLI_SAMPLE, ids=[named for _, named in CLI_SAMPLE])
def test_the_command_line_answers_one_line_and_exit_2(argv, named, tmp_path, capsys):
    out = tmp_path / "out"
    command, *rest = argv
    status = main([command, "--out", str(out), *rest])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("bayesprune: error:") and err.count("\n") == 1 and f"{named} must" in err, err
    assert not out.exists()
