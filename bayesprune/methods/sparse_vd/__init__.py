"""Sparse Variational Dropout (Molchanov, Ashukha and Vetrov, 2017, ICML) as a method plug-in
(``method = "sparse-vd"``, table ``[sparse-vd]``).

Every weight of the ``Linear`` and convolution layers gets the improper log-uniform prior
(section 4.1) and the posterior N(θ, σ²) in the additive-noise parameterisation (θ, log σ²; eqs.
15-16), i.e. Gaussian dropout with an individual, unbounded rate α = σ²/θ² per weight. The
objective is the SGVLB with local reparameterisation (eq. 17) and the KL approximation of eq. 14
(:mod:`.distributions`), its weight annealed from 0 to 1 (the authors' code). Weights with
log α > 3 are pruned (section 5); at test time the network uses θ with them zeroed. Biases carry
no prior and no noise: they are point estimates trained by the likelihood, as in the paper.

Scores are −log α per weight in float64 (higher = keep); a budget that removes the fraction of
weights with log α > 3 masks exactly the paper's pruned weights.
"""

from bayesprune.methods.sparse_vd.fit import build_model, build_optimizer
from bayesprune.methods.sparse_vd.fitted import SparseVDFitted
from bayesprune.methods.sparse_vd.method import SparseVD
from bayesprune.methods.sparse_vd.options import SparseVDOptions

__all__ = ["SparseVD", "SparseVDFitted", "SparseVDOptions", "build_model", "build_optimizer"]
