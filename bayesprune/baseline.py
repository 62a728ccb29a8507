"""The plain (non-Bayesian) network every Bayesian result is compared with: same shape, same split."""
import pyro
import torch
import torch.nn.functional as F

from .fit import TensorBatches
from .predict import metric


def fit_plain(net, x, y, *, epochs: int, lr: float, batch_size: int, seed: int = 0):
    """Train ``net`` on ``(x, y)`` by maximum likelihood with Adam and return it in eval mode.

    Cross-entropy for integer labels, mean squared error for floating-point (regression) targets.
    Dropout layers are active while training and off afterwards.
    """
    pyro.set_rng_seed(seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    batches = TensorBatches(x, y, batch_size=batch_size, seed=seed)
    classification = not y.is_floating_point()
    net.train()
    for _ in range(epochs):
        for xb, yb in batches:
            output = net(xb)
            loss = F.cross_entropy(output, yb) if classification else F.mse_loss(output.squeeze(-1), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return net.eval()


def train_plain(net, dataset, *, epochs: int, lr: float, batch_size: int, seed: int = 0) -> float:
    """Train ``net`` by maximum likelihood with Adam; returns its test metric (error % or RMSE).

    Cross-entropy for classification, mean squared error on standardised targets for regression.
    """
    device = next(net.parameters()).device
    fit_plain(net, dataset.x_train.to(device), dataset.y_train.to(device), epochs=epochs, lr=lr,
              batch_size=batch_size, seed=seed)
    with torch.no_grad():
        output = net(dataset.x_test.to(device))
    prediction = output if dataset.task == "classification" else output.squeeze(-1)
    return metric(dataset.task, prediction.cpu(), dataset.y_test, target_std=dataset.target_std)
