"""bayesprune: Bayesian and probabilistic pruning of neural networks, on Pyro."""

from bayesprune.core import distributions  # noqa: F401  (registers the KLs)
from bayesprune.core.errors import BayesPruneError, ConfigError, DataError, TrainingDiverged
from bayesprune.core.loop import History, TensorBatches, fit, resolve_device
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.penalties import GeometricPenalty, UniformPenalty
from bayesprune.core.pruning import Budget, apply_masks, prune, sparsity
from bayesprune.core.quiet import ignore_notices
from bayesprune.models.priors import SpikeSlabPrior
from bayesprune.version import __version__

ignore_notices()

#: The services on a fitted run, imported (with the pipeline) only when asked for: name -> module.
_SERVICES = {
    "fit_method": "bayesprune.api",
    "export": "bayesprune.api",
    "certify": "bayesprune.pipeline.certify",
    "importance": "bayesprune.pipeline.importance",
    "report": "bayesprune.pipeline.report",
}


def __getattr__(name):
    if name in _SERVICES:
        from importlib import import_module

        return getattr(import_module(_SERVICES[name]), name)
    raise AttributeError(f"module 'bayesprune' has no attribute {name!r}")
