"""The plain (non-Bayesian) network every Bayesian result is compared with: same shape, same split."""
import pyro
import torch
import torch.nn.functional as F

from .fit import TensorBatches
from .predict import metric


def train_plain(net, dataset, *, epochs: int, lr: float, batch_size: int, seed: int = 0) -> float:
    """Train ``net`` by maximum likelihood with Adam; returns its test metric (error % or RMSE).

    Cross-entropy for classification, mean squared error on standardised targets for regression.
    """
    pyro.set_rng_seed(seed)
    device = next(net.parameters()).device
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    batches = TensorBatches(dataset.x_train.to(device), dataset.y_train.to(device), batch_size=batch_size, seed=seed)
    classification = dataset.task == "classification"
    for _ in range(epochs):
        for x, y in batches:
            output = net(x)
            loss = F.cross_entropy(output, y) if classification else F.mse_loss(output.squeeze(-1), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        output = net(dataset.x_test.to(device))
    prediction = output if classification else output.squeeze(-1)
    return metric(dataset.task, prediction.cpu(), dataset.y_test, target_std=dataset.target_std)
