"""Keys renamed so that one quantity has one name (the fraction removed is a sparsity): the old names are still
read, each with a one-line note naming the new one, and a config giving both names is refused naming them."""

import warnings

import pytest

from bayesprune.core.errors import ConfigError
from bayesprune.core.validation import RenamedKey
from bayesprune.pipeline.compare import comparison_cells, load_comparison
from bayesprune.pipeline.config import RunConfig, load_config
from bayesprune.pipeline.export import budget_of


@pytest.mark.parametrize("section", ["prune", "reference"])
def test_droprates_are_read_as_sparsities_with_a_one_line_note(section):
    extra = {"source": "paper", "values": [1.0, 2.0]} if section == "reference" else {}
    with pytest.warns(RenamedKey) as notes:
        config = RunConfig.from_dict({section: {"droprates": [0.5, 0.9], **extra}})
    assert [str(note.message) for note in notes] == [
        f"{section}.droprates is renamed {section}.sparsities; read as {section}.sparsities"
    ]
    assert getattr(config, section).sparsities == (0.5, 0.9)
    assert "droprates" not in config.to_dict()[section] and config.to_dict()[section]["sparsities"] == [0.5, 0.9]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no note
        assert getattr(RunConfig.from_dict({section: {"sparsities": [0.5, 0.9], **extra}}), section).sparsities == (
            0.5,
            0.9,
        )


def test_both_names_are_refused_naming_them():
    with pytest.raises(ConfigError, match=r"^prune\.droprates is the old name of prune\.sparsities; give only"):
        RunConfig.from_dict({"prune": {"droprates": [0.5], "sparsities": [0.5]}})


def test_an_old_key_set_on_the_command_line_over_a_packaged_config():
    with pytest.warns(RenamedKey, match=r"^prune\.droprates is renamed prune\.sparsities"):
        config = load_config("sbnn-digits", ["prune.droprates=[0.3]"])
    assert config.prune.sparsities == (0.3,)


def test_a_comparison_reads_the_old_name_of_its_run_sections_once():
    with pytest.warns(RenamedKey) as notes:
        raw, _ = load_comparison(None, ["prune.droprates=[0.5]"])
    assert [str(note.message).split(";")[0] for note in notes] == ["prune.droprates is renamed prune.sparsities"]
    assert raw["prune"]["sparsities"] == [0.5] and "droprates" not in raw["prune"]


#: One comparison of the baseline alone, without fitting (its cells are only built).
ALONE = ["compare.methods=['magnitude']", "compare.sparsities=[0.5]"]


@pytest.mark.parametrize("given", ['{"prune.droprates" = [0.3]}', "{prune = {droprates = [0.3]}}"])
def test_a_case_reads_an_old_name_as_the_config_and_the_command_line_do(given):
    """A case's ``set`` is config keys over the comparison's: the old name there, dotted or in a table, is read as
    the new one with the note a config or ``--set`` gives (the comparison's cells set ``prune.sparsities``, which
    an old name in the case must override as ``--set`` does, not clash with); its cells are those of the case
    that gives the new name."""
    with pytest.warns(RenamedKey) as notes:
        raw, options = load_comparison(None, [*ALONE, f'compare.cases=[{{name = "c", set = {given}}}]'])
        old = comparison_cells(raw, options)
    assert [str(note.message) for note in notes] == [
        "prune.droprates is renamed prune.sparsities; read as prune.sparsities"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = comparison_cells(
            *load_comparison(None, [*ALONE, 'compare.cases=[{name = "c", set = {"prune.sparsities" = [0.3]}}]'])
        )
    assert [cell.run_config().to_dict() for cell in old] == [cell.run_config().to_dict() for cell in new]


def test_a_case_giving_both_names_is_refused_as_a_config_is():
    both = 'compare.cases=[{name = "c", set = {"prune.droprates" = [0.3], prune = {sparsities = [0.3]}}}]'
    with pytest.raises(
        ConfigError,
        match=r"^compare\.cases\[c\]\.set: prune\.droprates is the old name of prune\.sparsities; give only",
    ):
        load_comparison(None, [*ALONE, both])


def test_export_budget_fraction_is_read_as_sparsity():
    with pytest.warns(RenamedKey, match=r"^budget\.fraction is renamed budget\.sparsity"):
        budget = budget_of(["fraction=0.25", "scope='layer'"])
    assert (budget.sparsity, budget.scope, budget.level) == (0.25, "layer", "unit")
    with pytest.raises(ConfigError, match=r"^budget\.fraction is the old name of budget\.sparsity"):
        budget_of(["fraction=0.25", "sparsity=0.25"])
