"""The spike-and-slab BNN (sBNN) of paper 003 as a method plug-in (``method = "sbnn"``, table ``[sbnn]``).

Prior π·N(0, τ1²) + (1 − π)·N(0, τ0²) on every weight (eq. 3.1), mean-field q(W)q(Z) with the
closed-form inclusion probability p*(m, σ) (eq. 3.8), the objective of eqs. 3.6-3.7 with the
minibatch penalty of eq. 4.2 or 4.3, and pruning by inclusion probability.
"""

from bayesprune.methods.sbnn.fit import build_model, elbo, fit_posterior, fit_starts, keep_start
from bayesprune.methods.sbnn.fitted import SBNNFitted
from bayesprune.methods.sbnn.method import SBNN
from bayesprune.methods.sbnn.options import SCORES, SBNNOptions

__all__ = [
    "SBNN",
    "SBNNFitted",
    "SBNNOptions",
    "SCORES",
    "build_model",
    "elbo",
    "fit_posterior",
    "fit_starts",
    "keep_start",
]
