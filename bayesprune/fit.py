"""One training loop over any step, and its SVI step: minibatches, penalty weights, learning-rate schedule, callbacks, divergence stop."""
import math
from dataclasses import dataclass, field

import torch
from pyro import poutine
from pyro.infer.util import zero_grads
from pyro.optim import PyroLRScheduler
from pyro.poutine.messenger import Messenger
from tqdm.auto import tqdm

from .errors import TrainingDiverged


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class TensorBatches:
    """Shuffled minibatches of in-memory tensors, reproducible from ``seed``.

    Args:
        x, y: tensors with the same first dimension, already on the training device.
        batch_size: rows per batch; the last batch of an epoch may be smaller.
        shuffle: reshuffle at every epoch.
        seed: seed of the shuffling generator.
    """

    def __init__(self, x, y, *, batch_size: int, shuffle: bool = True, seed: int = 0):
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __iter__(self):
        n = len(self.x)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        order = order.to(self.x.device)
        for start in range(0, n, self.batch_size):
            rows = order[start : start + self.batch_size]
            yield self.x[rows], self.y[rows]


class UniformPenalty:
    """Penalty R/M on each of the M minibatches of an epoch (paper 003, eq. 4.2)."""

    def weight(self, index: int, num_batches: int) -> float:
        """Weight of the KL on batch ``index`` (0-based) relative to the N/B-scaled likelihood, i.e. M·r_i."""
        return 1.0


class GeometricPenalty:
    """Penalty r_i R with r_i = 2^(M−i) / (2^M − 1) on minibatch i = 1..M (Blundell et al.; paper 003, eq. 4.3)."""

    def weight(self, index: int, num_batches: int) -> float:
        # M r_i = M 2^-i / (1 - 2^-M): the same value without overflowing 2^M.
        return num_batches * 2.0 ** -(index + 1) / -math.expm1(-num_batches * math.log(2.0))


PENALTIES = {"uniform": UniformPenalty, "geometric": GeometricPenalty}


class PenaltyScale(Messenger):
    """Multiplies the ``scale`` of latent (prior) sites only, leaving observed sites alone.

    Under it the per-step loss is N/B·(−log p(D_i | W)) + weight·KL, which is M·J_i of paper 003
    (eqs. 4.2–4.3) when ``weight`` is M·r_i.
    """

    def __init__(self, weight: float):
        super().__init__()
        self.weight = weight

    def _process_message(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.weight * msg["scale"]


@dataclass
class History:
    """Losses recorded by :func:`fit`: every step's loss and each epoch's mean (an estimate of −ELBO)."""

    step_losses: list = field(default_factory=list)
    epoch_losses: list = field(default_factory=list)

    @property
    def elbo(self) -> list:
        """The ELBO trace, one value per epoch."""
        return [-loss for loss in self.epoch_losses]


def train(step, batches, *, epochs: int, callbacks=(), scheduler=None, progress: bool = False) -> History:
    """The one training loop: ``epochs`` passes of ``step`` over ``batches``, every method's fit runs on it.

    Args:
        step: ``step(x, y, index, num_batches)`` does one optimisation step on minibatch ``index``
            and returns its loss as a 0-dim tensor (an SVI step, a plain optimiser step, a
            projected step).
        batches: an iterable of ``(x, y)`` minibatches with ``len()``, re-iterated every epoch.
        epochs: number of passes.
        callbacks: callables ``callback(epoch, history)`` run after every epoch (checkpoints,
            schedules, structural changes); one returning ``True`` stops the fit early.
        scheduler: stepped once per epoch (``.step()``), e.g. a ``pyro.optim.PyroLRScheduler``.
        progress: show a progress bar with the epoch's loss.

    Losses stay on the step's device until the end of the epoch, so a CUDA step never waits for the
    host; a CPU loss is checked at once.

    Raises:
        TrainingDiverged: a loss became NaN or infinite, naming the first such step; callbacks of
            earlier epochs (such as checkpoints) have already run, so their results are the last
            good state.
    """
    history = History()
    num_batches = len(batches)
    bar = tqdm(range(epochs), disable=not progress, desc="fit", unit="epoch")
    for epoch in bar:
        losses = []
        for index, (x, y) in enumerate(batches):
            loss = step(x, y, index, num_batches)
            if loss.device.type == "cpu":
                _check_finite(loss.item(), epoch, index)
            losses.append(loss)
        values = torch.stack(losses).tolist()  # one host synchronisation per epoch
        for index, value in enumerate(values):
            _check_finite(value, epoch, index)
        history.step_losses.extend(values)
        history.epoch_losses.append(sum(values) / num_batches)
        if scheduler is not None:
            scheduler.step()
        bar.set_postfix(loss=f"{history.epoch_losses[-1]:.4g}")
        if any([callback(epoch, history) for callback in callbacks]):
            break
    return history


def _check_finite(value: float, epoch: int, index: int):
    if not math.isfinite(value):
        raise TrainingDiverged(f"loss became {value} at epoch {epoch + 1}, step {index + 1}; lower optim.lr")


def svi_step(model, guide, *, objective, optim, penalty=None):
    """A :func:`train` step of stochastic variational inference: ``pyro.infer.SVI.step`` without
    reading the loss back to the host, the KL weighted by ``penalty`` (:class:`PenaltyScale`)."""
    penalty = penalty or UniformPenalty()

    def step(x, y, index, num_batches):
        with PenaltyScale(penalty.weight(index, num_batches)), poutine.trace(param_only=True) as capture:
            loss = objective.loss_and_grads(model, guide, x, y)
        params = {site["value"].unconstrained() for site in capture.trace.nodes.values()}
        optim(params)
        zero_grads(params)
        return loss.detach() if torch.is_tensor(loss) else torch.tensor(loss)

    return step


def fit(model, guide, batches, *, objective, optim, epochs: int, penalty=None, callbacks=(), progress: bool = False) -> History:
    """Fit ``guide`` to the posterior of ``model`` by SVI: :func:`train` over :func:`svi_step`.

    Args:
        model, guide: Pyro programs called as ``model(x, y)``.
        batches: an iterable of ``(x, y)`` minibatches with ``len()``, re-iterated every epoch.
        objective: a ``pyro.infer.ELBO``.
        optim: a ``pyro.optim.PyroOptim``; a ``PyroLRScheduler`` is stepped once per epoch.
        epochs: number of passes over ``batches``.
        penalty: minibatch penalty scheme (:class:`UniformPenalty` by default).
        callbacks: callables ``callback(epoch, history)`` run after every epoch; one returning
            ``True`` stops the fit early.
        progress: show a progress bar with the running loss.

    Returns:
        The :class:`History` of losses.

    Raises:
        TrainingDiverged: the loss became NaN or infinite; callbacks of earlier epochs (such as
            checkpoints) have already run, so their results are the last good state.
    """
    step = svi_step(model, guide, objective=objective, optim=optim, penalty=penalty)
    scheduler = optim if isinstance(optim, PyroLRScheduler) else None
    return train(step, batches, epochs=epochs, callbacks=callbacks, scheduler=scheduler, progress=progress)
