"""Stochastic pruning masks: a Bernoulli keep-probability λ_i per weight (paper 000, section 2).

A mask b with b_i ~ Bernoulli(λ_i) turns weights W into the random W' = b ∘ W. :func:`block_isotropic`
and :func:`isotropic` set λ from a criterion's scores at an expected sparsity s (appendix A.1, eq. 6);
:class:`StochasticMasks` holds λ under a sigmoid or clamp parameterisation (appendix B.1) and draws
the Concrete(λ, 1 − λ) relaxation of temperature β that gradients flow through (appendix B.3).
"""
import torch
from torch import nn

from .gates import relaxed_bernoulli
from .pruning import Budget, lexicographic_ranks, prune

PARAMETERIZATIONS = ("sigmoid", "clamp")
INITS = ("block", "isotropic")

#: λ is clipped to [ε, 1 − ε] where it enters a logit (the relaxation of a clamped λ of exactly 0 or 1).
_LOGIT_EPS = 1e-6


def block_isotropic(scores: dict, sparsity: float, epsilon: float) -> dict:
    """Eq. 6: λ⁰_i = 1 − sε/(1 − s) for the k = (1 − s)·D weights of highest score (ranked globally), ε
    for the others, so that the expected sparsity is s. Needs sε/(1 − s) < 1."""
    if not sparsity * epsilon / (1 - sparsity) < 1:
        raise ValueError(f"block-isotropic probabilities need s·ε/(1 − s) < 1, got s = {sparsity}, ε = {epsilon}")
    kept = prune(scores, Budget(fraction=sparsity))
    high = 1 - sparsity * epsilon / (1 - sparsity)
    return {site: torch.where(mask, high, epsilon).to(torch.float32) for site, mask in kept.items()}


def isotropic(scores: dict, sparsity: float) -> dict:
    """Isotropic λ⁰_i = 1 − s for every weight (random pruning at expected sparsity s, appendix A.1)."""
    return {site: torch.full(score.shape, 1 - sparsity, device=score.device) for site, score in scores.items()}


class StochasticMasks(nn.Module):
    """Keep-probabilities λ of every weight of some sites, trained through a relaxation.

    Args:
        init: site name → λ at the start.
        parameterization: ``"sigmoid"`` (λ = σ(ρ), ρ trained) or ``"clamp"`` (λ = clamp(ρ, 0, 1)), appendix B.1.
        temperature: β of the Concrete relaxation (0.5 in the paper).
    """

    def __init__(self, init: dict, *, parameterization: str = "sigmoid", temperature: float = 0.5):
        super().__init__()
        if parameterization not in PARAMETERIZATIONS:
            raise ValueError(f"parameterization must be one of {list(PARAMETERIZATIONS)}, got {parameterization!r}")
        self.shapes = {site: lam.shape for site, lam in init.items()}
        self.parameterization, self.temperature = parameterization, temperature
        flat = torch.cat([lam.detach().flatten().double() for lam in init.values()])
        raw = torch.logit(flat, eps=_LOGIT_EPS) if parameterization == "sigmoid" else flat
        self.raw = nn.Parameter(raw.float())  # one flat vector: an optimiser step is one operation

    @property
    def sites(self) -> list:
        return list(self.shapes)

    def _split(self, flat: torch.Tensor) -> dict:
        chunks = torch.split(flat, [shape.numel() for shape in self.shapes.values()])
        return {site: chunk.view(shape) for (site, shape), chunk in zip(self.shapes.items(), chunks)}

    def probabilities(self) -> dict:
        """λ of every site (differentiable)."""
        flat = torch.sigmoid(self.raw) if self.parameterization == "sigmoid" else self.raw.clamp(0.0, 1.0)
        return self._split(flat)

    def logits(self) -> dict:
        """logit λ of every site in float64, the score that ranks them without saturating at λ = 1."""
        raw = self.raw.detach().double()
        return self._split(raw if self.parameterization == "sigmoid" else torch.logit(raw.clamp(0.0, 1.0), eps=1e-12))

    def relaxed(self) -> dict:
        """One Concrete(λ, 1 − λ) draw of temperature β per weight (appendix B.3), differentiable in λ."""
        logits = self.raw if self.parameterization == "sigmoid" else torch.logit(self.raw.clamp(0.0, 1.0), eps=_LOGIT_EPS)
        return self._split(relaxed_bernoulli(logits, self.temperature))

    @torch.no_grad()
    def sample(self, generator=None) -> dict:
        """One exact draw b ~ Bernoulli(λ) per weight."""
        return {site: torch.bernoulli(lam, generator=generator) for site, lam in self.probabilities().items()}

    def ranks(self, tiebreak: dict) -> dict:
        """Scores without ties ordering the weights by λ, and by ``tiebreak`` (e.g. |W|) among equal λ (a
        clamped λ saturates at exactly 0 or 1): a budget over them keeps the weights of largest λ (PFT,
        stage 2.3)."""
        return lexicographic_ranks(self.logits(), tiebreak)

    def histogram(self, bins: int = 20) -> list:
        """Counts of λ in ``bins`` equal bins of [0, 1] over every masked weight (paper 000, Fig. 11)."""
        lam = torch.cat([p.detach().flatten().float().cpu() for p in self.probabilities().values()])
        return torch.histc(lam, bins=bins, min=0, max=1).tolist()

    def expected_sparsity(self) -> float:
        """1 − mean λ over every masked weight."""
        return 1.0 - float(torch.cat([lam.detach().flatten() for lam in self.probabilities().values()]).double().mean())


def mask_overlap(start: dict, end: dict) -> float:
    """|kept by both| / |kept by ``start``|: the share of the start mask's weights the end mask keeps (paper 000, Fig. 2 left)."""
    both = sum(int((start[site] & end[site]).sum()) for site in start)
    return both / max(sum(int(start[site].sum()) for site in start), 1)
