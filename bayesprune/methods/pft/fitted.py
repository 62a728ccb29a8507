"""One OSP/PFT pair of the grid and the network PFT keeps as a :class:`~bayesprune.methods.base.Fitted`."""

from dataclasses import dataclass

import torch

from bayesprune.core.gates import StochasticMasks
from bayesprune.core.loop import History
from bayesprune.methods.base import SparseNetworkFitted


@dataclass
class Pair:
    """One (start mask, sparsity) of a PFT run: its numbers, the fine-tuned PFT network, its masks, the
    ranks of its weights (by λ, ties by |W| before fine-tuning; they give its mask) and the history."""

    numbers: dict
    net: torch.nn.Module
    masks: StochasticMasks
    ranks: dict
    history: History


class PFTFitted(SparseNetworkFitted):
    """The fine-tuned sparse network of the first (start mask, sparsity) pair; its scores rank the weights
    by their trained λ (ties by |W|), so a budget at the pair's sparsity keeps exactly its mask."""

    method = "pft"
    score_name = "keep-probability rank"
