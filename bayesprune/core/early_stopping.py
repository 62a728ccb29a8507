"""Training length that adapts to the data: a budget of gradient steps, and the state that scores best
on a validation part held out of the training split (the test split is not read until the end).

``[train] steps`` fixes the number of gradient steps instead of epochs, so a set of 500 rows and one
of 40,000 get the same optimisation effort; ``[train] validation`` holds out that fraction of the
training split, scores the point estimate on it after every epoch, and ends the fit at the epoch that
scored best (after ``patience`` epochs without improvement, or at the end of the budget).
"""

import copy
import math
from dataclasses import replace

import torch

from bayesprune.core.loop import Callback


def epochs_for_steps(steps: int, num_train: int, batch_size: int) -> int:
    """Epochs whose steps first reach ``steps`` (at least one) for ``num_train`` examples in
    minibatches of ``batch_size`` (the last one partial)."""
    return max(1, math.ceil(steps / math.ceil(num_train / batch_size)))


def hold_out(dataset, fraction: float, *, seed: int):
    """``(training part, x_validation, y_validation)``: a random ``fraction`` of the training split (at
    least one example, seeded) held out; the test split is kept as it is.

    The training part's ``extras["train_rows"]`` are the indices of its rows in the training split as
    loaded (composed when ``dataset`` is itself a training part), so that a fit can record which of the
    data's rows it used (PBP's S \\ S_P, which its certificate must be computed on again). Training
    rows read on demand (:class:`~bayesprune.data.streaming.Rows`) stay so; the held-out ones are read.
    """
    n = dataset.num_train
    size = max(1, round(fraction * n))
    if size >= n:
        raise ValueError(f"train.validation = {fraction} leaves no training example of {n}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    held, kept = order[:size], order[size:].sort().values
    rows = dataset.extras.get("train_rows", torch.arange(n))[kept]
    x = dataset.x_train
    rest = replace(
        dataset,
        x_train=x.subset(kept) if hasattr(x, "subset") else x[kept],  # rows read on demand stay so
        y_train=dataset.y_train[kept],
        extras={**dataset.extras, "train_rows": rows},
    )
    return rest, x[held], dataset.y_train[held]


class EarlyStopping(Callback):
    """Keep the state with the lowest validation score; restore it when training ends.

    Args:
        score: ``score()`` → float, lower is better (validation error or RMSE of the point estimate).
        state: ``state()`` → the fit's state (``state_dict()``s: detached tensors), copied when it improves.
        load: ``load(state)`` puts a copied state back.
        epochs: the planned epochs; after the last, the best state is restored.
        patience: stop after this many epochs without improvement; ``None`` runs all ``epochs``.

    After training, ``best_epoch`` (0-based) and ``best_score`` say which state was kept, and
    ``scores`` holds the validation score of every epoch (the curve ``best_epoch`` is the argmin of).
    """

    def __init__(self, score, state, load, *, epochs: int, patience: int | None = None):
        self.score, self.state, self.load = score, state, load
        self.epochs, self.patience = epochs, patience
        self.best_score, self.best_epoch, self._best = math.inf, -1, None
        self.scores = []
        self.stopped = False

    def on_epoch(self, epoch, history):
        value = self.score()
        self.scores.append(value)
        if value < self.best_score or self._best is None:
            self.best_score, self.best_epoch = value, epoch
            self._best = copy.deepcopy(self.state())
        stop = self.patience is not None and epoch - self.best_epoch >= self.patience
        if stop or epoch == self.epochs - 1:
            self.load(self._best)
            self.stopped = True
            return True
        return False

    def state_dict(self) -> dict:
        """The best score, its epoch and its state, and the scores so far, for a checkpoint to resume from."""
        return {
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "best": self._best,
            "stopped": self.stopped,
            "scores": list(self.scores),
        }

    def load_state_dict(self, state: dict):
        self.best_score, self.best_epoch, self._best = state["best_score"], state["best_epoch"], state["best"]
        self.stopped = state["stopped"]
        self.scores = list(state.get("scores", []))  # checkpoints written before the curve was kept lack it
