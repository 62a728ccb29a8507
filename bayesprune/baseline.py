"""The plain (non-Bayesian) network every Bayesian result is compared with: same shape, same split."""
import pyro
import torch
import torch.nn.functional as F

from .early_stopping import EarlyStopping
from .fit import TensorBatches, optimizer_step, train
from .predict import metric


def fit_plain(net, x, y, *, epochs: int, lr: float, batch_size: int, seed: int = 0, validation=None,
              patience: int | None = None):
    """Train ``net`` on ``(x, y)`` by maximum likelihood with Adam and return it in eval mode.

    Cross-entropy for integer labels, mean squared error for floating-point (regression) targets.
    Dropout layers are active while training and off afterwards. ``validation = (x_val, y_val)``
    keeps the epoch that scores best on it (:class:`~bayesprune.early_stopping.EarlyStopping`, with
    ``patience``), as the runner does for the method it compares with.
    """
    pyro.set_rng_seed(seed)
    classification = not y.is_floating_point()

    def loss_fn(xb, yb):
        output = net(xb)
        return F.cross_entropy(output, yb) if classification else F.mse_loss(output.squeeze(-1), yb)

    callbacks = []
    if validation is not None:
        task = "classification" if classification else "regression"
        callbacks.append(EarlyStopping(lambda: _validation_metric(net, task, *validation), net.state_dict,
                                       net.load_state_dict, epochs=epochs, patience=patience))
    net.train()
    train(optimizer_step(loss_fn, torch.optim.Adam(net.parameters(), lr=lr)),
          TensorBatches(x, y, batch_size=batch_size, seed=seed), epochs=epochs, callbacks=callbacks)
    return net.eval()


def _validation_metric(net, task, x, y) -> float:
    net.eval()
    with torch.no_grad():
        output = net(x.to(next(net.parameters()).device)).cpu()
    net.train()
    return metric(task, output if task == "classification" else output.squeeze(-1), y)


def train_plain(net, dataset, *, epochs: int, lr: float, batch_size: int, seed: int = 0, validation=None,
                patience: int | None = None) -> float:
    """Train ``net`` by maximum likelihood with Adam; returns its test metric (error % or RMSE).

    Cross-entropy for classification, mean squared error on standardised targets for regression;
    ``validation`` and ``patience`` as in :func:`fit_plain`.
    """
    device = next(net.parameters()).device
    fit_plain(net, dataset.x_train.to(device), dataset.y_train.to(device), epochs=epochs, lr=lr,
              batch_size=batch_size, seed=seed, validation=validation, patience=patience)
    with torch.no_grad():
        output = net(dataset.x_test.to(device))
    prediction = output if dataset.task == "classification" else output.squeeze(-1)
    return metric(dataset.task, prediction.cpu(), dataset.y_test, target_std=dataset.target_std)
