"""How a minibatch step weighs the KL against the likelihood: the penalty schemes of paper 003
(eqs. 4.2-4.3) and the Pyro messenger that applies the weight to the latent sites only."""

import math

from pyro.poutine.messenger import Messenger


class UniformPenalty:
    """Penalty R/M on each of the M minibatches of an epoch (paper 003, eq. 4.2)."""

    def weight(self, index: int, num_batches: int) -> float:
        """Weight of the KL on batch ``index`` (0-based) relative to the N/B-scaled likelihood, i.e. M·r_i."""
        return 1.0


class GeometricPenalty:
    """Penalty r_i R with r_i = 2^(M−i) / (2^M − 1) on minibatch i = 1..M (Blundell et al.; paper 003, eq. 4.3).

    The KL arrives in a burst at the start of each epoch. Under Adam at a constant rate the weights it
    pulls to zero do not settle there (an sBNN LeNet-300-100 ends with its spike weights at |m| ≈ 15×
    the rate, and pruning them costs a point); anneal the rate (``optim.schedule = "cosine"``).
    """

    def weight(self, index: int, num_batches: int) -> float:
        # M r_i = M 2^-i / (1 - 2^-M): the same value without overflowing 2^M.
        return num_batches * 2.0 ** -(index + 1) / -math.expm1(-num_batches * math.log(2.0))


PENALTIES = {"uniform": UniformPenalty, "geometric": GeometricPenalty}


class PenaltyScale(Messenger):
    """Multiplies the ``scale`` of latent (prior) sites only, leaving observed sites alone.

    Under it the per-step loss is N/B·(−log p(D_i | W)) + weight·KL, which is M·J_i of paper 003
    (eqs. 4.2–4.3) when ``weight`` is M·r_i.
    """

    def __init__(self, weight: float):
        super().__init__()
        self.weight = weight

    def _process_message(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.weight * msg["scale"]
