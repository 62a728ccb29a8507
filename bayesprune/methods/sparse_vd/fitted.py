"""The fitted Sparse VD network as a :class:`~bayesprune.methods.base.Fitted`."""

import torch

from bayesprune.core.checkpoint import load_module_state
from bayesprune.core.predict import evaluating
from bayesprune.core.pruning import apply_masks
from bayesprune.methods.base import Fitted, with_point_estimate
from bayesprune.methods.sparse_vd.distributions import LOG_ALPHA_THRESHOLD


class SparseVDFitted(Fitted):
    """A fitted Sparse VD network: the :class:`~.model.SparseVDNetwork` and its :class:`~.model.SparseVDGuide`.

    Its point estimate is θ with the weights of log α > ``threshold`` zeroed (the paper's test-time
    network), biases as fitted; its scores are −log α in float64.
    """

    method = "sparse-vd"
    score_name = "-log alpha"

    def __init__(
        self,
        model,
        guide,
        *,
        threshold: float = LOG_ALPHA_THRESHOLD,
        history=None,
        predictive_samples: int = 0,
        ctx=None,
    ):
        super().__init__(model.net, history=history, predictive_samples=predictive_samples, ctx=ctx)
        self.model, self.guide, self.threshold = model, guide, threshold

    def scores(self) -> dict:
        return {site: -value for site, value in self.guide.log_alpha().items()}

    def log_alpha(self) -> dict:
        """log α of every weight (float64), by site."""
        return self.guide.log_alpha()

    def params(self, *, sample: bool = False) -> dict:
        """Every parameter of the network: weights (θ, or a draw of q) with log α > threshold zeroed, and biases."""
        weights = self.guide.sample_params(self.threshold) if sample else self.guide.mean_params(self.threshold)
        with torch.no_grad():
            points = {name: value.detach().clone() for name, value in self.model.point_params().items()}
        return {**weights, **points}

    @torch.no_grad()
    def _predict(self, x, *, masks=None, num_samples=0, batch_size: int = 4096):
        """The point estimate's prediction, or the mean over ``num_samples`` draws of q, one draw held at a time."""
        total = 0.0
        with evaluating(self.net):
            for _ in range(max(num_samples, 1)):
                params = self.params(sample=num_samples > 0)
                params = apply_masks(params, masks) if masks else params
                total = total + torch.cat(
                    [
                        self.model.likelihood.mean(self.model.network(params, chunk))
                        for chunk in torch.split(x, batch_size)
                    ]
                )
        return total / max(num_samples, 1)

    def network(self):
        return with_point_estimate(self.net, self.params())

    def metrics(self) -> dict:
        log_alpha = self.log_alpha()
        removed = {site: int((value > self.threshold).sum()) for site, value in log_alpha.items()}
        total = sum(value.numel() for value in log_alpha.values())
        kept = total - sum(removed.values())
        return {
            **({"final_elbo": self.history.elbo[-1]} if self.history is not None and self.history.epoch_losses else {}),
            "log_alpha_threshold": self.threshold,
            "fraction_removed_by_threshold": sum(removed.values()) / total,
            "compression_by_threshold": total / max(kept, 1),
            "layer_fraction_removed": {site: removed[site] / log_alpha[site].numel() for site in log_alpha},
        }

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "guide": self.guide.state_dict()}

    def load_state_dict(self, state):
        load_module_state(self.model, state["model"])
        load_module_state(self.guide, state["guide"])
