"""Config resolution, overrides and validation."""

import tomllib

import pytest

from bayesprune.core.errors import ConfigError
from bayesprune.pipeline.config import RunConfig, load_config, packaged_configs, parse_override


@pytest.mark.parametrize("name", sorted(packaged_configs()))
def test_every_packaged_config_validates_and_round_trips_through_toml(name):
    config = load_config(name)
    assert RunConfig.from_dict(tomllib.loads(config.to_toml())) == config


def test_overrides_are_parsed_as_toml_values_or_strings():
    assert parse_override("sbnn.pi=0.3") == (["sbnn", "pi"], 0.3)
    assert parse_override("model.hidden=[50, 50]") == (["model", "hidden"], [50, 50])
    assert parse_override("data.name=energy") == (["data", "name"], "energy")
    config = load_config("default", ["sbnn.pi=0.25", "model.hidden=[7]", "data.seed=3"])
    assert (
        config.method_options.pi == 0.25 and config.model.options["hidden"] == [7] and config.data.options["seed"] == 3
    )


@pytest.mark.parametrize(
    "override, field",
    [
        ("sbnn.pi=0", "sbnn.pi"),
        ("sbnn.pi=true", "sbnn.pi"),
        ("sbnn.init_scale=-1", "sbnn.init_scale"),
        ("sbnn.penalty='quadratic'", "sbnn.penalty"),
        ("sbnn.num_particles=0", "sbnn.num_particles"),
        ("sbnn.colour=1", "sbnn.colour"),
        ("method='magic'", "method"),
        ("optim.schedule='linear'", "optim.schedule"),
        ("data.batch_size=0", "data.batch_size"),
        ("data.splits='all'", "data.splits"),
        ("seed=-1", "seed"),
        ("colour=1", "colour"),
        ("train.epochs=1.5", "train.epochs"),
    ],
)
def test_invalid_values_name_their_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as error:
        load_config("default", [override])
    assert "\n" not in str(error.value)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml"):
        load_config(str(tmp_path / "nope.toml"))


def test_reference_values_must_match_their_sparsities_by_name():
    with pytest.raises(ConfigError, match=r"^reference.values must hold 2 numbers"):
        RunConfig.from_dict({"reference": {"source": "paper", "sparsities": [0.0, 0.5], "values": [1.0]}})
    with pytest.raises(ConfigError, match=r"^reference.values must hold 2 numbers"):
        RunConfig.from_dict(
            {"reference": {"source": "paper", "sparsities": [0.0, 0.5], "values": {"wine": [1.0, "x"]}}}
        )
    with pytest.raises(ConfigError, match=r"^reference.source must be given"):
        RunConfig.from_dict({"reference": {"sparsities": [0.0], "values": [1.0]}})
    config = RunConfig.from_dict(
        {"reference": {"source": "p", "sparsities": [0.0, 0.5], "values": {"wine": [1.0, 2.0]}}}
    )
    assert config.reference.rows("wine") == [{"droprate": 0.0, "value": 1.0}, {"droprate": 0.5, "value": 2.0}]
    assert config.reference.rows("boston") == []


def test_a_non_positive_noise_scale_is_refused_naming_it():
    with pytest.raises(ConfigError, match="^model.noise_scale must be a positive number"):
        load_config("sbnn-digits", ["model.noise_scale=-1.0"])


def test_a_method_that_prunes_units_only_defaults_to_the_unit_level():
    from bayesprune.methods import available_methods

    for name, method in available_methods().items():
        config = RunConfig.from_dict({"method": name, "prune": {"sparsities": [0.0]}})
        assert config.prune.level == ("unit" if method.prune_levels == ("unit",) else "weight"), name
    assert RunConfig.from_dict({"method": "unit-gates"}).prune.level == "unit"
    assert RunConfig.from_dict({"method": "sbnn", "prune": {"level": "unit"}}).prune.level == "unit"
