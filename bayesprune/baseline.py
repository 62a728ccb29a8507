"""The plain (non-Bayesian) network every Bayesian result is compared with: same shape, same split."""
import pyro
import torch

from .early_stopping import EarlyStopping
from .fit import TensorBatches, optimizer_step, train
from .tasks import mean_loss, network_metric, network_test_metric


def fit_plain(net, x, y, *, epochs: int, lr: float, batch_size: int, seed: int = 0, validation=None,
              patience: int | None = None):
    """Train ``net`` on ``(x, y)`` by maximum likelihood with Adam and return it in eval mode.

    Cross-entropy for integer labels, mean squared error for floating-point (regression) targets.
    Dropout layers are active while training and off afterwards. ``validation = (x_val, y_val)``
    keeps the epoch that scores best on it (:class:`~bayesprune.early_stopping.EarlyStopping`, with
    ``patience``), as the runner does for the method it compares with.
    """
    pyro.set_rng_seed(seed)
    task = "regression" if y.is_floating_point() else "classification"
    loss = mean_loss(task)
    callbacks = []
    if validation is not None:
        callbacks.append(EarlyStopping(lambda: network_metric(net, *validation, task), net.state_dict,
                                       net.load_state_dict, epochs=epochs, patience=patience))
    net.train()
    train(optimizer_step(lambda xb, yb: loss(net(xb), yb), torch.optim.Adam(net.parameters(), lr=lr)),
          TensorBatches(x, y, batch_size=batch_size, seed=seed), epochs=epochs, callbacks=callbacks)
    return net.eval()


def train_plain(net, dataset, *, epochs: int, lr: float, batch_size: int, seed: int = 0, validation=None,
                patience: int | None = None) -> float:
    """Train ``net`` by maximum likelihood with Adam; returns its test metric (error % or RMSE).

    Cross-entropy for classification, mean squared error on standardised targets for regression;
    ``validation`` and ``patience`` as in :func:`fit_plain`.
    """
    device = next(net.parameters()).device
    fit_plain(net, dataset.x_train.to(device), dataset.y_train.to(device), epochs=epochs, lr=lr,
              batch_size=batch_size, seed=seed, validation=validation, patience=patience)
    return network_test_metric(net, dataset)
