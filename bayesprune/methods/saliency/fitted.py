"""The network the saliency method keeps as a :class:`~bayesprune.methods.base.Fitted`."""

from bayesprune.methods.base import SparseNetworkFitted


class SaliencyFitted(SparseNetworkFitted):
    """The fine-tuned sparse network of the first criterion's best grid point; its scores rank the weights
    by the stage that pruned them and their saliency there, so a budget at ``sparsity`` keeps exactly its
    mask.

    A fit (not a restored run) also holds, in memory only, ``dense`` (the trained network before
    pruning), ``points`` (every :class:`GridPoint`, masks included, in ``grid`` order) and
    ``loss_rows`` (the training rows ΔL is measured on).
    """

    method = "saliency"
    score_name = "pruning-order rank"

    def __init__(self, net, ranks: dict, *, dense=None, points=(), loss_rows=None, **kwargs):
        super().__init__(net, ranks, **kwargs)
        self.dense, self.points, self.loss_rows = dense, list(points), loss_rows
