"""Probabilistic fine-tuning of pruning masks (PFT, paper 000, section 2.1; appendices A.1, B, D.3, E).

Stage 1 trains the dense network (skipped at initialisation, appendix E.2). For every start mask
(a one-shot criterion of :mod:`bayesprune.core.criteria`) and sparsity s, the one-shot mask (OSP) is the
top (1 − s) of the criterion's scores; PFT instead sets keep-probabilities λ from the scores (eq. 6,
block-isotropic, or isotropic), minimises the empirical Gibbs risk E_b[R̂_S(b ∘ W)] in λ and W through
the Concrete relaxation (appendix B.3), keeps the weights of largest λ (ties in λ broken by |W|)
and fine-tunes the sparse network. The OSP mask is fine-tuned for the same epochs, so the two test
errors compare masks, not training budgets. ``masks_only`` is appendix E.3: λ alone is trained on
the random weights of initialisation, with no weight training before or after.

The run's network is the first (start mask, sparsity) pair's; every pair's numbers are lists in
``grid`` order in ``metrics.json``.
"""

from bayesprune.methods.pft.fitted import Pair, PFTFitted
from bayesprune.methods.pft.method import PFTMethod
from bayesprune.methods.pft.options import PFTOptions
from bayesprune.methods.pft.training import mask_overlap, perturbation_increase, train_masks, weight_rms

__all__ = [
    "PFTFitted",
    "PFTMethod",
    "PFTOptions",
    "Pair",
    "mask_overlap",
    "perturbation_increase",
    "train_masks",
    "weight_rms",
]
