"""bayesprune: Bayesian and probabilistic pruning of neural networks, on Pyro."""
from . import distributions  # noqa: F401  (registers the KLs)
from .errors import BayesPruneError, ConfigError, DataError, TrainingDiverged
from .fit import GeometricPenalty, History, TensorBatches, UniformPenalty, fit, resolve_device
from .objectives import AnalyticKLELBO
from .priors import SpikeSlabPrior
from .pruning import Budget, apply_masks, prune, sparsity

from .version import __version__


def __getattr__(name):
    if name == "fit_method":  # the pipeline, imported only when asked for
        from .api import fit_method

        return fit_method
    raise AttributeError(f"module 'bayesprune' has no attribute {name!r}")
