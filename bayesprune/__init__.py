"""bayesprune: Bayesian and probabilistic pruning of neural networks, on Pyro."""
from bayesprune.core import distributions  # noqa: F401  (registers the KLs)
from bayesprune.core.errors import BayesPruneError, ConfigError, DataError, TrainingDiverged
from bayesprune.core.loop import GeometricPenalty, History, TensorBatches, UniformPenalty, fit, resolve_device
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.models.priors import SpikeSlabPrior
from bayesprune.core.pruning import Budget, apply_masks, prune, sparsity

from bayesprune.version import __version__


def __getattr__(name):
    if name == "fit_method":  # the pipeline, imported only when asked for
        from bayesprune.api import fit_method

        return fit_method
    raise AttributeError(f"module 'bayesprune' has no attribute {name!r}")
