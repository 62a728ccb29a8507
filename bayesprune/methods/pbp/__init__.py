"""PAC-Bayes pruning (PBP) with a self-bounded certificate (paper 000, sections 5-6; appendices A, B, D.2).

The training set S is split at random into S_P (a fraction α) and S \\ S_P (n = (1 − α)|S| examples).

1. Stage 1 trains the network on S_P.
2. Stage 2 sets keep-probabilities λ⁰ from a one-shot criterion on those weights (block-isotropic,
   eq. 6) and trains the stochastic network (1 − λ⁰)δ₀ + λ⁰N(W⁰, σ⁰²) (eq. 5) on S_P by its
   empirical Gibbs risk, in λ⁰ and W⁰ with σ⁰ fixed (appendix D.2 tunes one σ⁰ on a grid). This is
   the data-dependent prior P.
3. Stage 3 starts the posterior Q of the same family at P and minimises Theorem 1 (eq. 4) in λ, μ
   and σ through SVI (:class:`~bayesprune.core.objectives.PACBayesBound`), with the bounded cross-entropy
   (appendix A.3) as the [0, 1]-valued surrogate loss. Its empirical term is measured on S \\ S_P,
   the examples the bound's empirical risk is taken on (the paper says stage 3 uses "all the training
   data S"; the bound holds for any Q, but the term it contains is R̂ on S \\ S_P, and that is what is
   minimised here).

S is the training data the fit is given: with ``train.validation`` > 0, what is left once the
validation rows are held out (they are neither S_P nor S \\ S_P). The certificate
(:func:`bayesprune.methods.pbp.bounds.certificate`) bounds the 0-1 Gibbs risk of Q: its empirical risk on
S \\ S_P estimated from networks drawn from Q (``mc_samples`` networks on every example, appendix A.3,
or with ``sampling = "examples"`` a network of its own for every example), with its own confidence
bound, in Theorem 1 and Theorem 2 under a union over δ and the ``grid_size`` hyper-parameter settings searched.
Theorem 1 holds for a prior chosen without the n examples the risk is measured on, so the fit records
those rows (their indices in the training split as loaded, and a digest of their examples) and
``bayesprune certify`` measures the risk on exactly them, never on rows rebuilt from a config.
Biases carry Gaussian slabs with λ = λ⁰ = 1, so the KL covers every parameter.
"""

from bayesprune.methods.pbp.certificate import bound_examples, examples_digest, gibbs_errors, network_kl, split_rows
from bayesprune.methods.pbp.fitted import PBPFitted
from bayesprune.methods.pbp.method import PBPMethod
from bayesprune.methods.pbp.options import PBPOptions

__all__ = [
    "PBPFitted",
    "PBPMethod",
    "PBPOptions",
    "bound_examples",
    "examples_digest",
    "gibbs_errors",
    "network_kl",
    "split_rows",
]
