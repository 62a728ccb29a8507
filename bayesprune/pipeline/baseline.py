"""The references every Bayesian result is compared with, on the same split: the plain (non-Bayesian)
network of the same shape, trained by maximum likelihood and stopped early on a validation part of
the training rows, and, for regression, the least-squares linear model."""

import torch

from bayesprune.core.early_stopping import hold_out
from bayesprune.core.plain import maximise_likelihood, validation_stopping
from bayesprune.core.predict import metric
from bayesprune.core.tasks import network_test_metric


def train_plain(
    net,
    dataset,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    validation=None,
    patience: int | None = None,
    hold: float = 0.0,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> dict:
    """Train ``net`` by maximum likelihood with Adam on ``dataset``'s training rows and score it on its
    test rows; returns ``{"test": metric, ...}`` (error % or RMSE in the target's units).

    The epoch kept is the one that scores best on ``validation`` (the run's validation part, with
    ``patience``) or, without one, on a ``hold`` fraction of the training rows held out (seeded by
    ``seed``; every epoch is run, so the best of them is kept, not the first after a plateau). The
    result then also holds ``best_epoch`` (0-based), ``validation_curve`` (the validation metric
    after every epoch, standardised units for regression) and ``n_validation``. ``hold = 0`` and no
    ``validation`` keeps the last epoch. ``memory_format`` lays out its minibatches of images.
    """
    if validation is None and hold > 0:
        dataset, *validation = hold_out(dataset, hold, seed=seed)
        patience = None
    device = next(net.parameters()).device
    validation = None if validation is None else tuple(part.to(device) for part in validation)
    stopping = None if validation is None else validation_stopping(net, validation, epochs=epochs, patience=patience)
    maximise_likelihood(
        net,
        dataset.x_train.to(device),
        dataset.y_train.to(device),
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        callbacks=[] if stopping is None else [stopping],
        memory_format=memory_format,
    )
    result = {"test": network_test_metric(net, dataset)}
    if stopping is not None:
        result.update(best_epoch=stopping.best_epoch, validation_curve=stopping.scores, n_validation=len(validation[1]))
    return result


def least_squares_test_rmse(dataset) -> float:
    """Test RMSE, in the target's units, of the linear model with an intercept fitted to the training
    rows by least squares (closed form: the minimum-norm solution of ``[X 1] w = y``, in float64 on
    the CPU; inputs of any shape are flattened)."""

    def design(x):
        x = x.detach().cpu().double().flatten(1)
        return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)

    y = dataset.y_train.detach().cpu().double()
    weights = torch.linalg.lstsq(design(dataset.x_train), y.reshape(len(y), -1), driver="gelsd").solution
    prediction = (design(dataset.x_test) @ weights).reshape(dataset.y_test.shape)
    return metric("regression", prediction, dataset.y_test.cpu().double(), target_std=dataset.target_std)
