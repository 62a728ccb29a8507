"""The posterior Q of PAC-Bayes pruning as a :class:`~bayesprune.methods.base.Fitted`."""

from bayesprune.core.checkpoint import load_module_state
from bayesprune.methods.base import GuideFitted


class PBPFitted(GuideFitted):
    """The posterior Q of PAC-Bayes pruning: its point estimate is the most probable mask on μ, its
    Monte-Carlo predictive the Gibbs predictor's average; scores are logit λ of every weight."""

    method = "pbp"
    score_name = "keep logit"

    def __init__(
        self,
        model,
        guide,
        priors: dict,
        *,
        bound_rows,
        bound_digest,
        alpha: float,
        history=None,
        report=None,
        predictive_samples: int = 20,
        ctx=None,
    ):
        super().__init__(model, guide, history=history, predictive_samples=predictive_samples, ctx=ctx)
        # S \ S_P, the rows the prior never saw: the certificate is valid on these rows only, so they are
        # kept with the fit (indices in the training split as loaded, and their examples' digest), never
        # rebuilt from an editable config; None for a checkpoint written before they were recorded.
        self.priors, self.bound_rows, self.bound_digest, self.alpha = priors, bound_rows, bound_digest, alpha
        self.report = report or {}

    def scores(self) -> dict:
        return self.guide.masks.logits()

    def metrics(self) -> dict:
        return dict(self.report)

    def state_dict(self) -> dict:
        return {
            "guide": {k: v.detach().clone() for k, v in self.guide.state_dict().items()},
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "prior": {
                name: {"probs": p.probs.clone(), "loc": p.loc.clone(), "scale": p.scale.clone()}
                for name, p in self.priors.items()
            },
            **(
                {}
                if self.bound_rows is None
                else {"bound_rows": self.bound_rows.clone(), "bound_digest": self.bound_digest}
            ),
            "alpha": self.alpha,
        }

    def load_state_dict(self, state):
        load_module_state(self.guide, state["guide"])
        load_module_state(self.model, state["model"])
