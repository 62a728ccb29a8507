"""One training loop over any step, and its SVI step: minibatches, learning-rate schedule, callbacks, divergence stop
(the KL's minibatch weights: :mod:`bayesprune.core.penalties`)."""

import contextlib
import math
import random
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.optim import PyroLRScheduler
from tqdm.auto import tqdm

from bayesprune.core import distributed
from bayesprune.core.errors import ConfigError, Interrupted, StopNow, TrainingDiverged
from bayesprune.core.graphs import GraphedStep, graphed
from bayesprune.core.graphs import report as report_graphs
from bayesprune.core.layout import laid_out
from bayesprune.core.penalties import PenaltyScale, UniformPenalty
from bayesprune.core.precision import autocast_calls


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; anything else is passed to ``torch.device``.
    A process launched as one of several (:mod:`~bayesprune.core.distributed`) takes the CUDA device of
    its local rank.

    Raises:
        ConfigError: CUDA asked for where there is none, or a device index it does not have.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None and distributed.launched():
        resolved = torch.device("cuda", distributed.local_rank())
    if resolved.type == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (resolved.index or 0) >= available:
            raise ConfigError(f"device must name an available device, got {device!r} ({available} CUDA device(s) here)")
    return resolved


class TensorBatches:
    """Shuffled minibatches of in-memory tensors, reproducible from ``seed``; in a run on several
    processes each yields its share of every minibatch (:func:`~bayesprune.core.distributed.shard`).

    ``x`` may also be rows read on demand (:class:`~bayesprune.data.streaming.Rows`, anything with
    ``read(chunks)`` yielding the inputs of each list of row indices): the minibatches are then those
    rows, in the same order a tensor would give, decoded as they are needed.

    Args:
        x, y: tensors with the same first dimension, already on the training device.
        batch_size: rows per batch; the last batch of an epoch may be smaller.
        shuffle: reshuffle at every epoch.
        seed: seed of the shuffling generator.
        augment: applied to every minibatch's inputs (``augment(x)``, e.g.
            :class:`~bayesprune.data.streaming.Augment`), or ``None``.
        memory_format: the layout of every minibatch of images, after ``augment``
            (:func:`~bayesprune.core.layout.resolve_memory_format`).
    """

    def __init__(
        self,
        x,
        y,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        augment=None,
        memory_format: torch.memory_format = torch.contiguous_format,
    ):
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.augment = augment
        self.memory_format = memory_format
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def chunks(self) -> list:
        """The rows of every minibatch of the next epoch, drawing its order (as iterating does)."""
        n = len(self.x)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        order = order.to(self.x.device if torch.is_tensor(self.x) else self.y.device)
        return [distributed.shard(order[start : start + self.batch_size]) for start in range(0, n, self.batch_size)]

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        """Minibatch inputs as the steps see them: augmented, laid out."""
        return laid_out(x if self.augment is None else self.augment(x), self.memory_format)

    def __iter__(self):
        chunks = self.chunks()
        inputs = (
            (self.x[rows] for rows in chunks)
            if torch.is_tensor(self.x)
            else self.x.read([rows.cpu() for rows in chunks])
        )
        for rows, x in zip(chunks, inputs):
            yield self.batch(x), self.y[rows]


@dataclass
class History:
    """Losses recorded by :func:`fit`: every step's loss and each epoch's mean (an estimate of −ELBO)."""

    step_losses: list = field(default_factory=list)
    epoch_losses: list = field(default_factory=list)
    #: what the loop's CUDA graphs did and cost (:meth:`bayesprune.core.graphs.GraphedStep.summary`), or ``None``
    graphs: dict | None = None

    @property
    def elbo(self) -> list:
        """The ELBO trace, one value per epoch."""
        return [-loss for loss in self.epoch_losses]


@dataclass
class LoopState:
    """Where a :func:`train` loop stands after an epoch, in the tensors and plain data a checkpoint
    holds: continuing from it gives the run an uninterrupted loop would have given (same minibatch
    order, same random draws, same optimiser moments).

    Attributes:
        epoch: epochs completed.
        history: the losses so far.
        optimizer: the optimiser's state (``pyro.optim.PyroOptim.get_state`` or a ``state_dict``).
        batches: the minibatch shuffler's generator state (:class:`TensorBatches`).
        rng: the global random states of torch, ``random`` and NumPy (:func:`rng_state`).
        callbacks: ``state_dict()`` of each stateful callback (such as early stopping), in order; one
            holding ``"stopped": True`` ended training at this epoch, so a resumed loop runs no more.
    """

    epoch: int
    history: History
    optimizer: dict
    batches: torch.Tensor
    rng: dict
    callbacks: list = field(default_factory=list)

    @property
    def stopped(self) -> bool:
        return any(state.get("stopped", False) for state in self.callbacks)

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            **self.history_dict(self.history),
            "optimizer": self.optimizer,
            "batches": self.batches,
            "rng": self.rng,
            "callbacks": self.callbacks,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "LoopState":
        return cls(
            state["epoch"],
            cls.history_from_dict(state),
            state["optimizer"],
            state["batches"],
            state["rng"],
            list(state["callbacks"]),
        )

    @staticmethod
    def history_dict(history: History) -> dict:
        """A :class:`History` as plain lists (a checkpoint holds plain data)."""
        return {"step_losses": list(history.step_losses), "epoch_losses": list(history.epoch_losses)}

    @staticmethod
    def history_from_dict(state: dict) -> History:
        return History(list(state["step_losses"]), list(state["epoch_losses"]))


def rng_state() -> dict:
    """The global random states of torch (CPU and CUDA), ``random`` and NumPy, as tensors and lists
    (a checkpoint loads them with ``weights_only=True``)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "random": list(random.getstate()[1]),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
    }


def set_rng_state(state: dict):
    """Put back the random states of :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate((3, tuple(state["random"]), None))
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))


class Callback:
    """Base of :func:`train` callbacks; override either hook (both are optional).

    A plain callable ``callback(epoch, history)`` is also accepted and acts as :meth:`on_epoch`.
    """

    def on_step(self, epoch: int, index: int, loss: torch.Tensor) -> None:
        """After step ``index`` (0-based) of ``epoch`` (0-based), with its 0-dim loss tensor, still on
        the step's device (projections, clipping, counters); reading it back forces a host sync."""

    def on_epoch(self, epoch: int, history: "History") -> bool | None:
        """After ``epoch``, its losses recorded in ``history`` (checkpoints, schedules, removing units,
        early stopping); returning ``True`` stops training after this epoch."""


def _hooks(callbacks) -> tuple:
    on_step, on_epoch = [], []
    for callback in callbacks:
        if hasattr(callback, "on_step") or hasattr(callback, "on_epoch"):
            if hasattr(callback, "on_step"):
                on_step.append(callback.on_step)
            if hasattr(callback, "on_epoch"):
                on_epoch.append(callback.on_epoch)
        elif callable(callback):
            on_epoch.append(callback)
        else:
            raise TypeError(
                f"a callback needs on_step/on_epoch or must be callable as callback(epoch, history), got {callback!r}"
            )
    return on_step, on_epoch


class StopRequest:
    """Set by a signal handler (the command line's, for SIGINT and SIGTERM): :func:`train` stops at the
    end of the step in progress and raises :class:`~bayesprune.core.errors.Interrupted`."""

    signal: int | None = None

    def request(self, number: int, frame=None):
        """The handler of ``number``: stop at the end of the training step in progress; a second signal
        stops at once, with the same one line (:class:`~bayesprune.core.errors.StopNow`)."""
        if self.signal is not None:
            raise StopNow(number)
        self.signal = number


STOP = StopRequest()


def check_stop(where: str):
    """Raise :class:`~bayesprune.core.errors.Interrupted` if :data:`STOP` was set; every long loop outside
    :func:`train` (Monte-Carlo certificates, perturbations, saliency) calls it once per iteration."""
    if STOP.signal is not None:
        raise Interrupted(f"stopped by signal {STOP.signal} {where}", STOP.signal)


def train(
    step,
    batches,
    *,
    epochs: int,
    callbacks=(),
    progress: bool = False,
    scheduler=None,
    resume: "LoopState | None" = None,
    desc: str = "fit",
) -> History:
    """The one training loop: ``epochs`` passes of ``step`` over ``batches``; every method's fit runs on it.

    Args:
        step: ``step(x, y, index, num_batches)`` does one optimisation step on minibatch ``index``
            (0-based) and returns its loss as a 0-dim tensor, without reading it back to the host
            (an SVI step (:func:`svi_step`), a plain optimiser step (:func:`optimizer_step`), a
            projected step).
        batches: an iterable of ``(x, y)`` minibatches with ``len()``, re-iterated every epoch.
        epochs: number of passes.
        callbacks: objects with optional hooks ``on_step(epoch, index, loss)`` (run after every step,
            in order) and ``on_epoch(epoch, history)`` (run after every epoch, in order; one returning
            ``True`` stops training after that epoch, the others still run), see :class:`Callback`;
            a plain callable ``callback(epoch, history)`` acts as ``on_epoch``.
        progress: show a progress bar with the epoch's loss, labelled ``desc``.
        scheduler: stepped once per epoch (``.step()``) before the epoch callbacks, e.g. a
            ``pyro.optim.PyroLRScheduler`` or a ``torch.optim.lr_scheduler`` object.
        resume: a :class:`LoopState` to continue from: the loop starts after its epoch with its
            history (the caller has restored the parameters and the optimiser).

    Under :func:`~bayesprune.core.graphs.graph_mode` (``train.graphs``) a plain optimiser step on a CUDA
    device runs as a CUDA graph (:func:`~bayesprune.core.graphs.graphed`); the history's ``graphs`` then
    holds what the captures cost, also said in one line.

    Returns:
        The :class:`History`: every step's loss and each epoch's mean, the float64 sum of the steps'
        losses in step order divided by the number of batches.

    A CPU loss is checked at once; losses on another device stay there until the end of the epoch,
    so a CUDA step never waits for the host (one synchronisation per epoch). Steps run with the
    arguments of distributions (``torch.distributions``, Pyro) unchecked: a check reads them back to
    the host, and a step whose arguments go wrong shows it as a loss that is not finite.

    Raises:
        TrainingDiverged: a loss became NaN or infinite, naming the epoch and the first such step
            (1-based); ``on_epoch`` callbacks of earlier epochs (such as checkpoints) have run, so
            their results are the last good state.
        Interrupted: :data:`STOP` was set (a signal); the step in progress finished, the epoch's
            ``on_epoch`` callbacks did not run, so checkpoints hold the last completed epoch.
    """
    on_step, on_epoch = _hooks(callbacks)
    history = History() if resume is None else resume.history
    num_batches = len(batches)
    run_step = None  # the step as the device runs it (:func:`~bayesprune.core.graphs.graphed`), once it is known
    first = 0 if resume is None else epochs if resume.stopped else resume.epoch
    bar = tqdm(range(first, epochs), disable=not progress, desc=desc, unit="epoch")
    for epoch in bar:
        losses = []
        for index, (x, y) in enumerate(batches):
            run_step = run_step or graphed(step, x.device if torch.is_tensor(x) else torch.device("cpu"), desc)
            with pyro.validation_enabled(False):  # checking arguments reads them back to the host
                loss = run_step(x, y, index, num_batches)
            if loss.device.type == "cpu":
                _check_finite(loss.item(), epoch, index)
            losses.append(loss)
            for hook in on_step:
                hook(epoch, index, loss)
            if STOP.signal is not None:
                raise Interrupted(f"stopped by signal {STOP.signal} in epoch {epoch + 1}", STOP.signal)
        # One host synchronisation per epoch; on several processes, the whole minibatches' losses.
        values = distributed.average(torch.stack(losses)).tolist() if losses else []
        for index, value in enumerate(values):
            _check_finite(value, epoch, index)
        history.step_losses.extend(values)
        history.epoch_losses.append(sum(values) / num_batches)
        if scheduler is not None:
            scheduler.step()
        bar.set_postfix(loss=f"{history.epoch_losses[-1]:.4g}")
        if any([bool(hook(epoch, history)) for hook in on_epoch]):
            break
    if isinstance(run_step, GraphedStep):
        history.graphs = run_step.summary()
        report_graphs(desc, history.graphs)
    return history


def _check_finite(value: float, epoch: int, index: int):
    if not math.isfinite(value):
        raise TrainingDiverged(f"loss became {value} at epoch {epoch + 1}, step {index + 1}; lower optim.lr")


def optimizer_step(loss_fn, optimizer):
    """A :func:`train` step of plain gradient descent: ``loss_fn(x, y)`` (at the current
    :func:`~bayesprune.core.precision.training_precision`) minimised by a ``torch.optim`` optimiser
    (gradients set to ``None`` before each backward pass).

    Example (deterministic training of a classifier)::

        step = optimizer_step(lambda x, y: F.cross_entropy(net(x), y), torch.optim.Adam(net.parameters()))
        history = train(step, TensorBatches(x, y, batch_size=128), epochs=10)
    """

    def step(x, y, index, num_batches):
        optimizer.zero_grad(set_to_none=True)
        loss = autocast_calls(loss_fn, x.device)(x, y)
        loss.backward()
        distributed.average_gradients([param for group in optimizer.param_groups for param in group["params"]])
        optimizer.step()
        return loss.detach()

    step.optimizer = optimizer  # a CUDA graph may capture the whole step (:mod:`bayesprune.core.graphs`)
    return step


def svi_step(model, guide, *, objective, optim, penalty=None):
    """A :func:`train` step of stochastic variational inference: ``pyro.infer.SVI.step`` without
    reading the loss back to the host, the KL weighted by ``penalty`` (:class:`PenaltyScale`), the
    model's forward pass at the current :func:`~bayesprune.core.precision.training_precision`."""
    penalty = penalty or UniformPenalty()

    def step(x, y, index, num_batches):
        weight = penalty.weight(index, num_batches)
        # A weight of 1 leaves every scale as it is (x * 1.0 == x): no messenger on the stack then.
        scaled = PenaltyScale(weight) if weight != 1.0 else contextlib.nullcontext()
        with scaled, poutine.trace(param_only=True) as capture:
            loss = objective.loss_and_grads(autocast_calls(model, x.device), guide, x, y)
        # In the trace's order, the same in every process of a distributed run.
        params = list(dict.fromkeys(site["value"].unconstrained() for site in capture.trace.nodes.values()))
        distributed.average_gradients(params)
        optim(params)
        for param in params:  # as pyro.infer.util.zero_grads, without allocating zeros for the next backward
            param.grad = None
        return loss.detach() if torch.is_tensor(loss) else torch.tensor(loss)

    return step


def fit(
    model,
    guide,
    batches,
    *,
    objective,
    optim,
    epochs: int,
    penalty=None,
    callbacks=(),
    progress: bool = False,
    resume: LoopState | None = None,
) -> History:
    """Fit ``guide`` to the posterior of ``model`` by SVI: :func:`train` over :func:`svi_step`.

    Args:
        model, guide: Pyro programs called as ``model(x, y)``.
        batches: an iterable of ``(x, y)`` minibatches with ``len()``, re-iterated every epoch.
        objective: a ``pyro.infer.ELBO``.
        optim: a ``pyro.optim.PyroOptim``; a ``PyroLRScheduler`` is stepped once per epoch.
        epochs: number of passes over ``batches``.
        penalty: minibatch penalty scheme (:class:`UniformPenalty` by default).
        callbacks: as in :func:`train`: objects with ``on_step(epoch, index, loss)`` and/or
            ``on_epoch(epoch, history)``, or callables ``callback(epoch, history)`` run after every
            epoch; one returning ``True`` stops the fit early.
        progress: show a progress bar with the running loss.
        resume: continue from this :class:`LoopState` (as :func:`train`).

    Returns:
        The :class:`History` of losses.

    Raises:
        TrainingDiverged: the loss became NaN or infinite; callbacks of earlier epochs (such as
            checkpoints) have already run, so their results are the last good state.
    """
    step = svi_step(model, guide, objective=objective, optim=optim, penalty=penalty)
    scheduler = optim if isinstance(optim, PyroLRScheduler) else None
    return train(
        step, batches, epochs=epochs, callbacks=callbacks, scheduler=scheduler, progress=progress, resume=resume
    )
