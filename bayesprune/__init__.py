"""bayesprune: Bayesian and probabilistic pruning of neural networks, on Pyro."""
from . import distributions  # noqa: F401  (registers the KLs)
from .errors import BayesPruneError, ConfigError, DataError, TrainingDiverged
from .fit import GeometricPenalty, History, TensorBatches, UniformPenalty, fit, resolve_device
from .objectives import AnalyticKLELBO
from .priors import SpikeSlabPrior
from .pruning import Budget, apply_masks, prune, sparsity

__version__ = "0.1.0"
