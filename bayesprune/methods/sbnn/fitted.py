"""The spike-and-slab posterior as a :class:`~bayesprune.methods.base.Fitted`."""

import torch

from bayesprune.analysis.importance import (
    path_scores,
)
from bayesprune.core.checkpoint import load_module_state
from bayesprune.methods.base import GuideFitted


class SBNNFitted(GuideFitted):
    """A fitted sBNN: the :class:`~bayesprune.models.BayesianNetwork` and its :class:`~bayesprune.guides.SpikeSlabGuide`.

    Its scores are the logits B − A of the inclusion probabilities p*(m, σ) (eq. 3.8) in float64,
    which rank the weights as p* does without rounding to 1, or with ``score = "path"`` (``sbnn.score``)
    their path scores; its point estimate is the posterior mean m.
    """

    method = "sbnn"
    #: ``None``, or the fit's training error and the trivial predictor's where it did not learn
    #: (:func:`~bayesprune.methods.sbnn.learned.not_learned`, set by the fit).
    not_learned = None
    #: ``None``, or the first fit's training error and the trivial predictor's and the start it was fitted again
    #: from where that fit did not learn (:func:`~bayesprune.methods.sbnn.refit.refit_record`, set by the fit).
    refitted = None

    def __init__(self, model, guide, *, score: str = "inclusion", starts=None, best_epoch=None, **kwargs):
        """``score``: ``sbnn.score``; ``starts``: ``[{"start", <keep rule>, "kept"}]``, one per start of a fit
        of several (``sbnn.starts``), else ``None``; ``best_epoch``: the epoch early stopping kept (1-based)
        or ``None``; ``kwargs``: :class:`~bayesprune.methods.base.GuideFitted`'s."""
        super().__init__(model, guide, **kwargs)
        self.score, self.starts, self.best_epoch = score, starts, best_epoch

    @property
    def score_name(self) -> str:
        return "inclusion logit" if self.score == "inclusion" else "path-capped inclusion logit"

    def scores(self) -> dict:
        logits = self.guide.inclusion_logits()
        return logits if self.score == "inclusion" else path_scores(logits, self.model)

    def inclusion_probabilities(self) -> dict:
        return self.guide.inclusion_probabilities()

    def metrics(self) -> dict:
        probs = torch.cat([p.flatten() for p in self.inclusion_probabilities().values()])
        return {
            "final_elbo": self.history.elbo[-1],
            "fraction_inclusion_below_half": float((probs < 0.5).float().mean()),
            "site_priors": {name: self.model.prior.describe(name) for name in self.model.sites},
            **({} if self.starts is None else {"starts": self.starts}),
            **({} if self.refitted is None else {"refitted": self.refitted}),
            **({} if self.not_learned is None else {"not_learned": self.not_learned}),
        }

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def load_state_dict(self, state):
        load_module_state(self.model, state["model"])
        load_module_state(self.guide, state["guide"])
