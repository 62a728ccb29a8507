"""ProbMask: masks in probability space under one global sparsity budget (paper 002, section 3, Algorithm 1).

Every weight carries a keep-probability s_i ∈ [0, 1], started at 1 (dense). Weights and s are
trained together on the expected loss (problem 2) through ``samples`` = I two-Gumbel relaxed masks
σ((log s − log(1 − s) + g₁ − g₀)/τ) per step (eqs. 3-5), the gradients clipped to a norm of 3 as in
the authors' code; after every step s is projected exactly onto C = {s ∈ [0, 1]ⁿ, Σ s ≤ K}
(Theorem 1, :mod:`.projection`), K = k·n for the whole network (``scope = "global"``) or
k·n_l for each layer (``"layer"``, the comparison of section 4.3). Per epoch t of T the temperature is
τ = 0.97(1 − t/T) + 0.03 and k follows the cubic schedule of eq. 7 from 1 to 1 − ``sparsity``
between epochs t₁ and t₂. At the end masks m ~ Bernoulli(s) are drawn, the one with the lowest
training loss is kept and the sparse network is fine-tuned. ``supermask`` freezes the weights at
their random initialisation (appendix A.2).

The s optimiser is Adam at 6e-3 (Table 4, the paper's only searched hyper-parameter); the weights'
is ``[optim]``. Biases are not masked. The baseline (``baseline = true``) is global magnitude
pruning at the same sparsity of the network trained densely for as many epochs, fine-tuned as long.
"""

from bayesprune.methods.probmask.fitted import ProbMaskFitted
from bayesprune.methods.probmask.method import ProbMaskMethod
from bayesprune.methods.probmask.options import ProbMaskOptions
from bayesprune.methods.probmask.training import ProbMaskTraining, best_draw, layer_report

__all__ = ["ProbMaskFitted", "ProbMaskMethod", "ProbMaskOptions", "ProbMaskTraining", "best_draw", "layer_report"]
