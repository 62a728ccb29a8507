"""What every method needs of its task, written once: the training loss, the test metric of a plain
network and a masked copy of one."""

import copy

import torch
import torch.nn.functional as F

from bayesprune.core.predict import metric


def is_classification(task: str) -> bool:
    """Whether ``task`` (a :class:`~bayesprune.data.Dataset`'s) is classification, else regression."""
    return task == "classification"


def task_of(y: torch.Tensor) -> str:
    """The task of targets ``y``: integer classes are classification, floating-point values regression."""
    return "regression" if y.is_floating_point() else "classification"


def metric_name(task: str) -> str:
    """``test_error`` (percent) for classification, ``test_rmse`` for regression."""
    return "test_error" if is_classification(task) else "test_rmse"


def predictive_mean(output: torch.Tensor, task: str) -> torch.Tensor:
    """A network's ``output`` as the predictive mean: class probabilities (softmax of the logits), or the
    regression mean (its single output column)."""
    return torch.softmax(output, dim=-1) if is_classification(task) else output.squeeze(-1)


def mean_loss(task: str):
    """The mean training loss of a batch: cross-entropy on logits, or squared error for regression."""
    if is_classification(task):
        return F.cross_entropy
    return lambda output, y: F.mse_loss(output.squeeze(-1), y)


def chunks(x, size: int):
    """The rows of ``x``, ``size`` at a time: a tensor split, or rows read on demand (anything with
    ``batches(size)``, as :class:`~bayesprune.data.streaming.Rows`), never held as one tensor."""
    return torch.split(x, size) if torch.is_tensor(x) else x.batches(size)


def rows_at(x, index: torch.Tensor):
    """The rows ``index`` (an integer tensor) of ``x``: a tensor indexed, or rows read on demand kept so
    (their ``subset``), so that a part of a streamed training split is still streamed."""
    return x[index] if torch.is_tensor(x) else x.subset(index)


def predict_network(net, x, task: str, *, batch_size: int = 4096) -> torch.Tensor:
    """The predictive mean of a deterministic ``net`` at ``x`` in eval mode (the mode ``net`` was in is
    put back): class probabilities, or regression means. ``x`` is a tensor, or rows read on demand
    (anything with ``batches(size)``, as :class:`~bayesprune.data.streaming.Rows`), predicted
    ``batch_size`` rows at a time and never held as one tensor."""
    training = net.training
    net.eval()
    device = next(net.parameters()).device
    with torch.no_grad():
        output = (
            net(x.to(device)) if torch.is_tensor(x) else torch.cat([net(b.to(device)) for b in chunks(x, batch_size)])
        )
    net.train(training)
    return predictive_mean(output, task)


def network_metric(net, x, y, task: str, *, target_std: float = 1.0) -> float:
    """Error (%) or RMSE of a deterministic ``net`` on ``(x, y)``."""
    return metric(task, predict_network(net, x, task).cpu(), y.cpu(), target_std=target_std)


def network_test_metric(net, dataset) -> float:
    """The test error (%) or RMSE of a deterministic network on ``dataset``'s test split."""
    return network_metric(net, dataset.x_test, dataset.y_test, dataset.task, target_std=dataset.target_std)


def masked_copy(net, masks: dict):
    """A copy of ``net`` with the entries of every masked site (site → bool or 0/1 tensor) zeroed."""
    pruned = copy.deepcopy(net)
    with torch.no_grad():
        for site, mask in masks.items():
            param = pruned.get_parameter(site)
            param.mul_(mask.to(param.device, param.dtype))
    return pruned
