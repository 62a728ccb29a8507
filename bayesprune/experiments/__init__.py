"""Packaged studies: runs that sweep many fits (the paper's simulations) instead of fitting once.

An experiment is a class registered under the name a config selects with ``[experiment] name``;
the other keys of ``[experiment]`` are its options. The runner validates it with ``check(config)``
before anything is written, then calls ``run(config, folder, device=..., progress=...)``, which
writes its tables, figures and ``report.md`` into ``folder`` and returns the metrics; the runner
writes ``config.toml`` and ``metrics.json`` and moves ``folder`` into place when it is complete.
"""
from ..errors import ConfigError

EXPERIMENTS: dict = {}


def register_experiment(name: str):
    """Class decorator adding an experiment to :data:`EXPERIMENTS` under ``name``."""

    def register(cls):
        EXPERIMENTS[name] = cls
        return cls

    return register


def get_experiment(config):
    """An instance of the experiment ``config.experiment.name`` selects."""
    name = config.experiment.name
    if name not in EXPERIMENTS:
        raise ConfigError(f"experiment.name must be one of {sorted(EXPERIMENTS)}, got {name!r}")
    return EXPERIMENTS[name]()


from . import graded_features, selection, two_features  # noqa: E402,F401  (registers the studies)
