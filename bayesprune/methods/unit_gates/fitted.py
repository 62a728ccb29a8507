"""The gated network after training as a :class:`~bayesprune.methods.base.Fitted`."""

import torch

from bayesprune.methods.base import NetworkFitted


class UnitGatesFitted(NetworkFitted):
    """The fine-tuned smaller network; its scores are the logits of the final θ of every kept unit."""

    method = "unit-gates"
    score_name = "gate logit"

    def __init__(self, net, theta: dict, *, history=None, report=None, task="classification", ctx=None):
        super().__init__(net, history=history, report=report, task=task, ctx=ctx)
        self.theta = theta

    def scores(self) -> dict:
        return {site: torch.logit(t.double()) for site, t in self.theta.items()}

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "theta": {site: t.detach().clone() for site, t in self.theta.items()}}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.theta = {site: t.clone() for site, t in state["theta"].items()}
