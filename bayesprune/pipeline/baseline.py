"""The references every Bayesian result is compared with, on the same split: the plain (non-Bayesian)
network of the same shape, trained by maximum likelihood and stopped early on a validation part of
the training rows, and, for regression, the least-squares linear model."""

import pyro
import torch

from bayesprune.core.early_stopping import EarlyStopping, hold_out
from bayesprune.core.loop import TensorBatches, optimizer_step, train
from bayesprune.core.predict import metric
from bayesprune.core.tasks import mean_loss, network_metric, network_test_metric, task_of


def fit_plain(
    net,
    x,
    y,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    validation=None,
    patience: int | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
):
    """Train ``net`` on ``(x, y)`` by maximum likelihood with Adam and return it in eval mode.

    Cross-entropy for integer labels, mean squared error for floating-point (regression) targets.
    Dropout layers are active while training and off afterwards. ``validation = (x_val, y_val)``
    keeps the epoch that scores best on it (:func:`validation_stopping`, with ``patience``), as the
    runner does for the method it compares with. ``memory_format`` lays out its minibatches of images
    (:func:`~bayesprune.core.layout.resolve_memory_format`).
    """
    callbacks = [] if validation is None else [validation_stopping(net, validation, epochs=epochs, patience=patience)]
    _maximise_likelihood(
        net,
        x,
        y,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        callbacks=callbacks,
        memory_format=memory_format,
    )
    return net


def validation_stopping(net, validation, *, epochs: int, patience: int | None) -> EarlyStopping:
    """The :class:`~bayesprune.core.early_stopping.EarlyStopping` that keeps ``net``'s state scoring best
    on ``validation = (x_val, y_val)`` (error %, or RMSE in standardised units for regression)."""
    return EarlyStopping(
        lambda: network_metric(net, *validation, task_of(validation[1])),
        net.state_dict,
        net.load_state_dict,
        epochs=epochs,
        patience=patience,
    )


def _maximise_likelihood(net, x, y, *, epochs: int, lr: float, batch_size: int, seed: int, callbacks, memory_format):
    """Adam on the mean loss of :func:`~bayesprune.core.tasks.mean_loss`; ``net`` ends in eval mode."""
    pyro.set_rng_seed(seed)
    loss = mean_loss(task_of(y))
    net.train()
    train(
        optimizer_step(lambda xb, yb: loss(net(xb), yb), torch.optim.Adam(net.parameters(), lr=lr)),
        TensorBatches(x, y, batch_size=batch_size, seed=seed, memory_format=memory_format),
        epochs=epochs,
        callbacks=callbacks,
    )
    net.eval()


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
    _maximise_likelihood(
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
