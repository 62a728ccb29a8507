"""The plain network's training rule: maximum likelihood with Adam on seeded minibatches, the epoch kept
that scores best on a validation part (:func:`fit_plain`). The runner's plain baseline
(:mod:`bayesprune.pipeline.baseline`), the fine-tuning of a pruned network and the baselines among the
methods (``magnitude``, ``torch-pruning``) train by it."""

import pyro
import torch

from bayesprune.core.early_stopping import EarlyStopping
from bayesprune.core.loop import TensorBatches, optimizer_step, train
from bayesprune.core.tasks import mean_loss, network_metric, task_of


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
    objective=None,
):
    """Train ``net`` on ``(x, y)`` by maximum likelihood with Adam and return it in eval mode.

    Cross-entropy for integer labels, mean squared error for floating-point (regression) targets.
    Dropout layers are active while training and off afterwards. ``validation = (x_val, y_val)``
    keeps the epoch that scores best on it (:func:`validation_stopping`, with ``patience``), as the
    runner does for the method it compares with. ``memory_format`` lays out its minibatches of images
    (:func:`~bayesprune.core.layout.resolve_memory_format`). ``objective(x, y)`` → a minibatch's loss replaces
    the mean loss (:func:`distillation_objective`).
    """
    callbacks = [] if validation is None else [validation_stopping(net, validation, epochs=epochs, patience=patience)]
    maximise_likelihood(
        net,
        x,
        y,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        callbacks=callbacks,
        memory_format=memory_format,
        objective=objective,
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


def maximise_likelihood(
    net, x, y, *, epochs: int, lr: float, batch_size: int, seed: int, callbacks, memory_format, objective=None
):
    """Adam on the mean loss of :func:`~bayesprune.core.tasks.mean_loss` (or ``objective(x, y)``); ``net`` ends
    in eval mode."""
    pyro.set_rng_seed(seed)
    loss = mean_loss(task_of(y))
    net.train()
    objective = objective or (lambda xb, yb: loss(net(xb), yb))
    train(
        optimizer_step(objective, torch.optim.Adam(net.parameters(), lr=lr)),
        TensorBatches(x, y, batch_size=batch_size, seed=seed, memory_format=memory_format),
        epochs=epochs,
        callbacks=callbacks,
    )
    net.eval()


def distillation_objective(net, teacher, task: str, *, weight: float, temperature: float):
    """``objective(x, y)`` of knowledge distillation from ``teacher`` (Hinton, Vinyals, Dean 2015, eq. 2):
    ``(1 − weight) · loss(net(x), y) + weight · T² · KL(softmax(teacher(x) / T) ‖ softmax(net(x) / T))`` for
    classification (the T² keeps the soft term's gradients at the scale of the hard one's); for regression the
    soft term is the squared difference to the teacher's output. The teacher runs in eval mode, without gradients."""
    loss = mean_loss(task)
    teacher.eval()

    def objective(x, y):
        output = net(x)
        with torch.no_grad():
            target = teacher(x)
        if task == "classification":
            soft = torch.nn.functional.kl_div(
                torch.log_softmax(output / temperature, -1),
                torch.log_softmax(target / temperature, -1),
                reduction="batchmean",
                log_target=True,
            ) * (temperature**2)
        else:
            soft = torch.nn.functional.mse_loss(output, target)
        return (1 - weight) * loss(output, y) + weight * soft

    return objective
