"""A CSV config of the sBNN written by hand takes the packaged ``sbnn-table`` config's settings for the keys
it leaves out (issue 38): those were chosen on tables' held-out rows, the general defaults on digits."""

from bayesprune.methods.sbnn import SBNNOptions
from bayesprune.pipeline.config import load_config

CSV = 'method = "sbnn"\n[data]\ndataset = "csv"\npath = "t.csv"\ntarget = "y"\n'


def written(tmp_path, text: str) -> str:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


def tables(config) -> dict:
    """The config's tables but ``[data]`` (TOML layout)."""
    return {key: value for key, value in config.to_dict().items() if isinstance(value, dict) and key != "data"}


def test_a_csv_config_gets_the_packaged_table_settings(tmp_path):
    assert tables(load_config(written(tmp_path, CSV))) == tables(load_config("sbnn-table"))


def test_keys_the_csv_config_gives_win_over_the_table_settings(tmp_path):
    config = load_config(written(tmp_path, CSV + "[sbnn]\npi = 0.25\n"), ["train.epochs=3"])
    packaged = load_config("sbnn-table")
    assert (config.method_options.pi, config.train.epochs) == (0.25, 3)
    assert config.method_options.log_tau0 == packaged.method_options.log_tau0 != SBNNOptions().log_tau0
    assert config.optim == packaged.optim


def test_other_data_keep_the_general_defaults(tmp_path):
    config = load_config(written(tmp_path, CSV.replace('"csv"', '"digits"')))
    assert config.method_options == SBNNOptions()
    packaged = load_config("sbnn-table").method_options
    for model in ('architecture = "lenet-300-100"', 'factory = "mynets:mlp"'):  # not the table's MLP: no width given
        another = load_config(written(tmp_path, CSV + f"[model]\n{model}\n"))
        assert "hidden" not in another.model.options
        # the table's settings but its start, chosen for its own network (issue 49: it collapses deeper ones)
        assert another.method_options.starts == SBNNOptions().starts != packaged.starts
        assert another.method_options == SBNNOptions(**{**packaged.__dict__, "starts": SBNNOptions().starts})


def test_the_tables_start_goes_with_the_tables_network_only(tmp_path):
    packaged = load_config("sbnn-table").method_options.starts
    for model, start in (("hidden = [100]", packaged), ("hidden = [100, 100]", SBNNOptions().starts)):
        assert load_config(written(tmp_path, CSV + f"[model]\n{model}\n")).method_options.starts == start
    given = load_config(written(tmp_path, CSV + '[model]\nfactory = "mynets:mlp"\n[sbnn]\nstarts = [0.3]\n'))
    assert given.method_options.starts == (0.3,)
