"""Packaged studies, found by name: the registry the runner asks for ``[experiment] name``.

A study is a class in a module of :mod:`bayesprune.experiments`, registered with
:func:`register_experiment`. Nothing below the studies imports them: :func:`get_experiment` imports
every module of that package by name the first time it is asked, as :mod:`bayesprune.methods`
finds its methods, so a new study is one new module and no other file changes.
"""

import importlib
import pkgutil

from bayesprune.core.errors import ConfigError

#: The package whose modules hold the studies.
PACKAGE = "bayesprune.experiments"

EXPERIMENTS: dict = {}
_discovered = False


def register_experiment(name: str):
    """Class decorator adding an experiment to :data:`EXPERIMENTS` under ``name``."""

    def register(cls):
        EXPERIMENTS[name] = cls
        return cls

    return register


def available_experiments() -> dict:
    """Every registered study: name → class."""
    _discover()
    return dict(EXPERIMENTS)


def get_experiment(config):
    """An instance of the experiment ``config.experiment.name`` selects."""
    name = config.experiment.name
    experiments = available_experiments()
    if name not in experiments:
        raise ConfigError(f"experiment.name must be one of {sorted(experiments)}, got {name!r}")
    return experiments[name]()


def _discover():
    global _discovered
    if _discovered:
        return
    package = importlib.import_module(PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{PACKAGE}.{module.name}")
    _discovered = True
