"""Whether an sBNN fit learned: its error on its training rows against the trivial predictor's (issue 49)."""

import warnings

import torch

from bayesprune.core.predict import metric

#: Training rows read (the first ones): one forward pass of the point estimate, whatever the table's size.
CHECKED_ROWS = 2048
#: A fit whose error on its training rows is at or above this share of the trivial predictor's learned next to
#: nothing. On make_classification, a user's MLP of two hidden layers of 100 from PyTorch's start ended in the
#: spike on 3 of 10 development tables (seeds 0-9, not the measured 100-102), at the trivial error or above; the
#: 7 that learned reached at most a third of it (docs/reproductions.md).
LEARNED_SHARE = 0.98


class NotLearned(UserWarning):
    """A fit that predicts its training rows no better than a predictor that reads no input."""


def trivial_error(task: str, y: torch.Tensor) -> float:
    """The error on ``y`` of the predictor that reads no input, fitted on ``y``: the most frequent class
    (error in percent) or the mean (RMSE), in :func:`~bayesprune.core.predict.metric`'s units."""
    if task == "classification":
        return 100.0 * (1.0 - torch.bincount(y).max().item() / len(y))
    y = y.double()
    return (y - y.mean()).pow(2).mean().sqrt().item()


def learning_check(fitted, data, seed: int) -> dict | None:
    """``None`` when ``fitted``'s point estimate (q's means) predicts the first :data:`CHECKED_ROWS` training
    rows better than :data:`LEARNED_SHARE` times :func:`trivial_error`, else its error and the trivial one
    (``{"seed", "training_error", "trivial_training_error"}``). Training rows read a minibatch at a time
    (``data.stream``) are checked alike: those rows are read once for the check."""
    x, y = data.x_train[:CHECKED_ROWS], data.y_train[:CHECKED_ROWS]
    device = next(fitted.guide.parameters()).device
    error = metric(data.task, fitted.predict(x.to(device)).cpu(), y)
    trivial = trivial_error(data.task, y)
    if error < LEARNED_SHARE * trivial:
        return None
    return {"seed": seed, "training_error": error, "trivial_training_error": trivial}


def warn_not_learned(record: dict | None, task: str, *, refitted: dict | None = None) -> dict | None:
    """``record`` (:func:`learning_check`'s) as it is, with a :class:`NotLearned` warning where it is not ``None``;
    ``refitted``: the record of a first fit it replaced (:func:`~bayesprune.methods.sbnn.refit.refit_record`)."""
    if record is None:
        return None
    kind = "the most frequent class" if task == "classification" else "the mean"
    again = "" if refitted is None else f", fitted again from the {refitted['start']} start,"
    warnings.warn(
        f"sbnn: the fit from seed {record['seed']}{again} did not learn: its error on the training rows, "
        f"{record['training_error']:.4g}, is no better than {record['trivial_training_error']:.4g}, that of "
        f"predicting {kind} without reading the inputs; its importances are noise",
        NotLearned,
        stacklevel=3,
    )
    return record


def not_learned_text(record: dict) -> str:
    """The report's warning on a :func:`not_learned` record."""
    return (
        f"## Warning: the fit did not learn\n\n**Its error on the training rows, {record['training_error']:.4g}, is "
        f"no better than {record['trivial_training_error']:.4g}, that of a predictor that reads no input**: q's "
        "means stayed in the spike, and the importance of its inputs is noise. Such a fit is fitted again from "
        'the fan-in start by default (`sbnn.refit = "fan-in"`); where that did not learn either (or `sbnn.refit = '
        '"none"`), fit with more epochs or other starts (`sbnn.starts`).'
    )
