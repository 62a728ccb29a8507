"""Packaged studies: runs that sweep many fits (the paper's simulations) instead of fitting once.

An experiment is a class registered under the name a config selects with ``[experiment] name``;
the other keys of ``[experiment]`` are its options. The runner validates it with ``check(config)``
before anything is written, then calls ``run(config, folder, device=..., progress=...)``, which
writes its tables, figures and ``report.md`` into ``folder`` and returns the metrics; the runner
writes ``config.toml`` and ``metrics.json`` and moves ``folder`` into place when it is complete.

The registry lives below this package, in :mod:`bayesprune.pipeline.experiments`, which finds the
studies by name: nothing else in bayesprune imports this package.
"""

from bayesprune.experiments import graded_features, selection, two_features  # noqa: F401  (registers the studies)
from bayesprune.pipeline.experiments import EXPERIMENTS, available_experiments, get_experiment, register_experiment

__all__ = ["EXPERIMENTS", "available_experiments", "get_experiment", "register_experiment"]
