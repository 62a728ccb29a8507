"""The network ProbMask keeps as a :class:`~bayesprune.methods.base.Fitted`."""

from bayesprune.methods.base import SparseNetworkFitted


class ProbMaskFitted(SparseNetworkFitted):
    """The fine-tuned sparse network; its scores keep exactly its mask under a budget at its sparsity
    (mask first, then s: the kept weights rank above the removed ones)."""

    method = "probmask"
    score_name = "rank by mask, then keep-probability"
