"""The small typed context a method's ``fit`` receives beside its network, data and options, and the
one way a method trains: :meth:`FitContext.train`, a named stage whose checkpoints, resumption, early
stopping and progress bar the context provides, so that every method gets every service.

A fit is a sequence of stages (pre-training, mask training, fine-tuning, ...), each a :func:`bayesprune.core.loop.train`
loop over the objects it changes (its ``state``: networks, guides, gates, optimisers). At the end of
every ``checkpoint_every`` epochs the context writes a checkpoint holding, for each finished stage,
its result (``state`` snapshot, losses, and the random-number and minibatch-shuffling states at its
end) and, for the stage in progress, its :class:`~bayesprune.core.loop.LoopState`. Resuming runs the fit
again: a finished stage is not trained but its result is put back (with the random states it left), and
the stage in progress continues from its last epoch. The code between stages runs again and draws
the same random numbers, so the resumed fit equals the uninterrupted one.
"""

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyro
import torch
from torch import nn

from bayesprune.core.batched import train_stack, train_stacked
from bayesprune.core.checkpoint import load_module_state, write_checkpoint
from bayesprune.core.early_stopping import EarlyStopping, hold_out
from bayesprune.core.errors import BayesPruneError, ConfigError, Interrupted
from bayesprune.core.export import mask_parameters, unmask_parameters
from bayesprune.core.fused import kernel_mode
from bayesprune.core.graphs import graph_mode
from bayesprune.core.layout import resolve_memory_format
from bayesprune.core.loop import (
    STOP,
    History,
    LoopState,
    TensorBatches,
    optimizer_step,
    rng_state,
    set_rng_state,
    train,
)
from bayesprune.core.optim import OptimConfig, torch_optimizer, torch_scheduler
from bayesprune.core.plain import validation_stopping
from bayesprune.core.precision import training_precision
from bayesprune.core.predict import metric
from bayesprune.core.sites import site_names
from bayesprune.core.tasks import mean_loss, predict_network

#: The services a method may not support; a config asking for one it does not is refused.
SERVICES = ("validation", "checkpoint", "resume")


@dataclass
class FitContext:
    """What a run gives a method's fit besides the network, the data and the method's own options.

    Attributes:
        device: the training device.
        seed: seeds the fit (global RNGs, minibatch order).
        epochs: ``train.epochs`` (resolved from ``train.steps`` on this data): the length of the
            method's main stage.
        batch_size: minibatch size (``data.batch_size``, resolved).
        optim: ``[optim]``: optimiser, learning rate and schedule.
        task: ``"classification"`` or ``"regression"``.
        noise_scale: the fixed Gaussian noise of regression (``model.noise_scale``), ``None`` if learned.
        expose, hide: ``model.expose`` and ``model.hide``: what :meth:`sites` adds or takes out.
        priors: ``[[model.priors]]``, the tables of per-module priors as given, read by a method that places
            priors (:func:`bayesprune.models.module_priors.module_priors`).
        validation: ``(x, y)`` held out of the training split (``train.validation``), or ``None``;
            the stage given ``validate`` keeps its best epoch on it.
        patience: stop that stage after this many epochs without improvement.
        checkpoint: where checkpoints are written, or ``None``.
        checkpoint_every: epochs between checkpoints (and after the last epoch of every stage).
        resume: a checkpoint of this fit as read (:func:`bayesprune.core.checkpoint.read_checkpoint`) to
            continue from, or ``None``.
        progress: one progress bar per stage, named after it.
        callbacks: further :func:`bayesprune.core.loop.train` callbacks run in every stage.
        method: the registered name of the method, recorded in checkpoints.
        kernels: ``train.kernels``, the mode every stage runs the per-weight kernels in
            (:func:`bayesprune.core.fused.kernel_mode`).
        precision: ``train.precision``, the precision of every stage's forward passes
            (:func:`bayesprune.core.precision.training_precision`).
        graphs: ``train.graphs``: stages' plain optimiser steps as CUDA graphs (:mod:`bayesprune.core.graphs`).
        config: the run config (TOML layout) the fit is made from, kept in its checkpoints so that
            ``--resume`` refuses a ``config.toml`` edited since (:func:`bayesprune.pipeline.runner.resume_run`).
        augment: applied to every training minibatch's inputs (the data's ``augment``,
            :class:`~bayesprune.data.streaming.Augment`), or ``None``.
        memory_format: the layout of every training minibatch of images (``train.memory_format``
            resolved, :func:`bayesprune.core.layout.resolve_memory_format`).
        calibration, unpruned_draws: what the :class:`~bayesprune.methods.Fitted` a fit or restore builds
            takes (``Fitted(..., ctx=ctx)``): the inputs masked statistics are estimated on, and the recorder
            of the pruning curve's draws of the unpruned model (:class:`~bayesprune.methods.Fitted`); or ``None``.

    After the fit, ``best_epoch`` (1-based) is the epoch early stopping kept, or ``None``; after a fit
    trained together with others (:func:`train_plain_together`, :func:`train_stack_together`,
    :func:`fit_one_after_another`), ``rng_after`` is the global random state
    (:func:`~bayesprune.core.loop.rng_state`) its separate fit would have left, for the caller to put back.
    """

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    seed: int = 0
    epochs: int = 1
    batch_size: int = 128
    optim: OptimConfig = field(default_factory=OptimConfig)
    task: str = "classification"
    noise_scale: float | None = None
    expose: tuple = ()
    hide: tuple = ()
    priors: tuple = ()
    validation: tuple | None = None
    patience: int | None = None
    checkpoint: Path | None = None
    checkpoint_every: int = 1
    resume: dict | None = None
    progress: bool = False
    callbacks: tuple = ()
    method: str = ""
    kernels: str = "auto"
    precision: str = "float32"
    graphs: str = "off"
    config: dict | None = None
    augment: object = None
    memory_format: torch.memory_format = torch.contiguous_format
    calibration: object = None
    unpruned_draws: object = None
    best_epoch: int | None = field(default=None, init=False)
    rng_after: dict | None = field(default=None, init=False)
    _finished: list = field(default_factory=list, init=False, repr=False)

    @classmethod
    def from_config(cls, config, data, *, device, seed: int | None = None, **services) -> "FitContext":
        """The context of a run config's training settings on ``data`` (``train.steps`` and
        ``data.batch_size = "auto"`` resolved on its training rows), at ``seed`` (the config's by
        default); ``services`` set the other fields (``validation``, ``checkpoint``, ``resume``, ...)."""
        resolved = config.for_data(data.num_train)
        return cls(
            device=device,
            seed=config.seed if seed is None else seed,
            epochs=resolved.train.epochs,
            batch_size=resolved.data.batch_size,
            optim=config.optim,
            task=data.task,
            noise_scale=config.model.noise_scale,
            expose=config.model.expose,
            hide=config.model.hide,
            priors=config.model.priors,
            patience=config.train.patience,
            checkpoint_every=config.train.checkpoint_every,
            method=config.method,
            kernels=config.train.kernels,
            precision=config.train.precision,
            graphs=config.train.graphs,
            config=config.to_dict(),
            augment=data.augment,
            memory_format=resolve_memory_format(config.train.memory_format, data.input_shape, device),
            **services,
        )

    def training_cost(self) -> dict:
        """The fit's training over all its stages so far: ``train_epochs``, ``train_steps`` (optimiser steps)
        and ``train_seconds`` (its stages' wall time: the one place a fit is timed), so that fits of methods
        with several stages compare by what they cost (``compare``'s leaderboard)."""
        histories = [stage["history"] for stage in self._finished]
        return {
            "train_epochs": sum(len(history["epoch_losses"]) for history in histories),
            "train_steps": sum(len(history["step_losses"]) for history in histories),
            "train_seconds": round(sum(stage.get("seconds", 0.0) for stage in self._finished), 3),
        }

    def sites(self, net) -> list:
        """The names of ``net``'s site parameters under ``expose`` and ``hide`` (:func:`bayesprune.core.sites.site_names`)."""
        return site_names(net, expose=self.expose, hide=self.hide)

    def batches(self, x, y, *, seed: int | None = None) -> TensorBatches:
        """Shuffled minibatches of ``(x, y)`` on the device, of the run's size, seeded with ``seed``
        (the fit's seed by default), augmented by :attr:`augment`, laid out as :attr:`memory_format`.
        ``x`` may be rows read on demand (:class:`~bayesprune.data.streaming.Rows`): each minibatch is
        decoded as it is needed."""
        return TensorBatches(
            x.to(self.device),
            y.to(self.device),
            batch_size=self.batch_size,
            seed=self.seed if seed is None else seed,
            augment=self.augment,
            memory_format=self.memory_format,
        )

    def train(
        self, name: str, step, batches, *, epochs: int, state: dict, scheduler=None, callbacks=(), validate=None
    ) -> History:
        """Run one stage of the fit: ``epochs`` passes of ``step`` over ``batches`` (:func:`bayesprune.core.loop.train`).

        Args:
            name: the stage's name, shown on its progress bar and kept in checkpoints.
            step: ``step(x, y, index, num_batches)`` → 0-dim loss tensor.
            batches: :class:`~bayesprune.core.loop.TensorBatches` (its shuffling state is checkpointed).
            epochs: passes over ``batches``.
            state: name → every object the stage changes, each with ``state_dict()`` and
                ``load_state_dict()`` (or a Pyro optimiser's ``get_state()`` and ``set_state()``);
                checkpoints hold them, resuming puts them back.
            scheduler: stepped once per epoch (put it in ``state`` too when it has a state).
            callbacks: further loop callbacks of this stage.
            validate: for the stage early stopping acts on, ``validate(x)`` → the predictive mean
                of the current state (class probabilities, or regression means); the stage then
                keeps the state of its epoch that scores best on :attr:`validation`.

        Returns:
            The stage's :class:`~bayesprune.core.loop.History`.
        """
        index = len(self._finished)
        saved = self._saved_stages()
        if STOP.signal is not None:
            raise Interrupted(f"stopped by signal {STOP.signal} before stage {name!r}", STOP.signal)
        if index < len(saved):
            with _resuming():
                return self._put_back(saved[index], name, state, batches)
        callbacks = [*callbacks, *self.callbacks]
        early = None
        if validate is not None and self.validation is not None:
            early = self._early_stopping(validate, state, epochs)
            callbacks.append(early)
        # callbacks with a state of their own that ``state`` does not already hold (early stopping)
        stateful = [c for c in callbacks if hasattr(c, "state_dict") and not any(c is obj for obj in state.values())]
        with _resuming():
            loop = self._loop_to_resume(index, name, state, batches, stateful, epochs)
        if self.checkpoint is not None:
            callbacks.append(_StageCheckpoint(self, index, name, state, batches, epochs, stateful))
        start = time.perf_counter()
        with kernel_mode(self.kernels), training_precision(self.precision), graph_mode(self.graphs):
            history = train(
                step,
                batches,
                epochs=epochs,
                callbacks=callbacks,
                scheduler=scheduler,
                progress=self.progress,
                resume=loop,
                desc=name,
            )
        seconds = time.perf_counter() - start
        if early is not None:
            self.best_epoch = early.best_epoch + 1
        # A finished stage's result is kept for the checkpoints that follow (a fit without them never resumes).
        result = _snapshot(state) if self.checkpoint is not None else None
        self._finished.append(
            {
                "name": name,
                "history": LoopState.history_dict(history),
                "state": result,
                "rng": rng_state(),
                "batches": batches.generator.get_state(),
                "best_epoch": self.best_epoch,
                "seconds": seconds,
                **({} if history.graphs is None else {"graphs": history.graphs}),
            }
        )
        return history

    def train_network(
        self, name: str, net: nn.Module, batches, *, epochs: int, loss, mask=None, validate: bool = False
    ) -> History:
        """A stage of plain training: ``net`` in place by ``loss(net(x), y)`` with the run's optimiser and
        schedule. Under ``mask`` (site → bool) the pruned
        weights stay exactly zero whatever the optimiser does (:func:`bayesprune.core.export.mask_parameters`).
        ``validate`` makes it the stage early stopping acts on."""
        if mask is not None:
            mask_parameters(net, mask)
        optimizer = torch_optimizer(self.optim, net.parameters())
        scheduler = torch_scheduler(self.optim, optimizer, epochs=epochs)
        state = {"net": net, "optimizer": optimizer, **({"scheduler": scheduler} if scheduler is not None else {})}
        try:
            return self.train(
                name,
                optimizer_step(lambda x, y: loss(net(x), y), optimizer),
                batches,
                epochs=epochs,
                state=state,
                scheduler=scheduler,
                validate=(lambda x: predict_network(net, x, self.task)) if validate else None,
            )
        finally:
            if mask is not None:
                unmask_parameters(net)

    def train_plain(self, name: str, net: nn.Module, data, *, held_out: float) -> History:
        """A stage that trains ``net`` as the runner's plain network is trained
        (:func:`bayesprune.core.plain.fit_plain`: maximum likelihood with Adam at ``optim.lr``, no weight
        decay or schedule), keeping its epoch that scores best on :attr:`validation` or, when the run
        holds out none, on a ``held_out`` fraction of ``data``'s training rows held out for it (seeded by
        the fit's seed; every epoch runs, the best is kept). ``net`` ends in eval mode."""
        validation, patience = self.validation, self.patience
        if validation is None and held_out > 0:
            data, *validation = hold_out(data, held_out, seed=self.seed)
            patience = None
        callbacks = []
        if validation is not None:
            validation = tuple(part.to(self.device) for part in validation)
            callbacks.append(validation_stopping(net, validation, epochs=self.epochs, patience=patience))
        pyro.set_rng_seed(self.seed)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.optim.lr)
        loss = mean_loss(self.task)
        net.train()
        history = self.train(
            name,
            optimizer_step(lambda x, y: loss(net(x), y), optimizer),
            self.batches(data.x_train, data.y_train),
            epochs=self.epochs,
            state={"net": net, "optimizer": optimizer},
            callbacks=callbacks,
        )
        if callbacks and self.validation is not None:
            self.best_epoch = callbacks[0].best_epoch + 1
        net.eval()
        return history

    def _saved_stages(self) -> list:
        return [] if self.resume is None else self.resume["loop"]["stages"]

    def _put_back(self, record: dict, name: str, state: dict, batches) -> History:
        """A finished stage of the checkpoint resumed from: its result, not its training."""
        if record["name"] != name:
            raise ValueError(
                f"the checkpoint's stage {len(self._finished) + 1} is {record['name']!r}, this fit's is {name!r}"
            )
        _load(state, record["state"])
        set_rng_state(record["rng"])
        batches.generator.set_state(record["batches"])
        self.best_epoch = record["best_epoch"]
        self._finished.append(record)
        return LoopState.history_from_dict(record["history"])

    def _loop_to_resume(self, index: int, name: str, state: dict, batches, stateful, epochs: int) -> LoopState | None:
        current = None if self.resume is None else self.resume["loop"].get("current")
        if current is None or current["index"] != index:
            return None
        if current["name"] != name:
            raise ValueError(f"the checkpoint's stage {index + 1} is {current['name']!r}, this fit's is {name!r}")
        loop = LoopState.from_state_dict(current["loop"])
        if not (
            isinstance(loop.epoch, int) and 0 <= loop.epoch <= epochs and len(loop.history.epoch_losses) == loop.epoch
        ):
            raise ValueError(
                f"stage {name!r} stopped at epoch {loop.epoch!r} with {len(loop.history.epoch_losses)} epochs "
                f"of losses, and runs {epochs} epochs (was the config edited?)"
            )
        _load(state, self.resume["state"])
        batches.generator.set_state(loop.batches)
        for callback, saved in zip(stateful, loop.callbacks, strict=True):
            callback.load_state_dict(saved)
        set_rng_state(loop.rng)
        return loop

    def _early_stopping(self, validate, state: dict, epochs: int) -> EarlyStopping:
        x, y = self.validation[0].to(self.device), self.validation[1]

        def score():
            return metric(self.task, validate(x).cpu(), y)

        return EarlyStopping(
            score, lambda: _snapshot(state), lambda saved: _load(state, saved), epochs=epochs, patience=self.patience
        )


def train_networks_together(
    contexts: list, name: str, nets: list, x, y, *, epochs: int, loss, validate: bool = False, batches=None
) -> list:
    """:meth:`FitContext.train_network` for several independent fits at once, fit k being ``nets[k]``
    under ``contexts[k]`` (its seed's minibatch order over ``(x, y)``, its validation rows), trained as
    one stacked model (:func:`bayesprune.core.batched.train_stacked`): each ends where its separate fit
    ends, up to rounding. ``batches`` (one :class:`~bayesprune.core.loop.TensorBatches` per fit) continue
    streams a fit's earlier stage drew from, as its separate fit's stages share one. Returns each fit's
    :class:`~bayesprune.core.loop.History`.

    Raises:
        ConfigError: contexts that differ beyond their seeds and validation rows, or a checkpoint asked
            for, naming the key; networks that cannot be stacked (:class:`~bayesprune.core.batched.StackedNetworks`).
    """
    validation = [ctx.validation for ctx in contexts] if validate and contexts[0].validation is not None else None
    rows = [(x, y)] * len(nets)
    return _train_together(contexts, name, nets, rows, epochs, loss, contexts[0].optim, validation, batches=batches)


def train_plain_together(contexts: list, name: str, nets: list, datasets: list, *, held_out: float) -> list:
    """:meth:`FitContext.train_plain` for several independent fits at once (as
    :func:`train_networks_together`), fit k on ``datasets[k]``: each fit's epoch that scores best on its
    validation rows or, when the run holds out none, on the ``held_out`` fraction of its training rows
    its seed holds out.
    Each context's :attr:`~FitContext.rng_after` is the global random state its separate fit leaves (the
    fit seeded, no number drawn while training: the stack refuses dropout)."""
    first, rows, validation, patience = contexts[0], [], [], contexts[0].patience
    for ctx, data in zip(contexts, datasets):
        part, held = data, ctx.validation
        if held is None and held_out > 0:
            part, *held = hold_out(data, held_out, seed=ctx.seed)
            patience = None
        rows.append((part.x_train, part.y_train))
        validation.append(None if held is None else tuple(held))
    for net in nets:
        net.train()
    plain = OptimConfig(lr=first.optim.lr)
    kept = None if validation[0] is None else validation
    histories = _train_together(
        contexts, name, nets, rows, first.epochs, mean_loss(first.task), plain, kept, patience=patience
    )
    for ctx, net in zip(contexts, nets):
        pyro.set_rng_seed(ctx.seed)
        ctx.rng_after = rng_state()
        if kept is None or ctx.validation is None:
            ctx.best_epoch = None
        net.eval()
    return histories


def check_together(contexts: list):
    """Refuse, in one line naming the key, fits that cannot train as one stack: contexts that differ
    beyond their seeds and validation rows, or a checkpoint asked for."""
    first = contexts[0]
    for key in (
        "device",
        "epochs",
        "batch_size",
        "optim",
        "task",
        "noise_scale",
        "expose",
        "hide",
        "priors",
        "precision",
        "patience",
        "augment",
        "memory_format",
        "kernels",
    ):
        if any(getattr(ctx, key) != getattr(first, key) for ctx in contexts):
            raise ConfigError(f"batched fits must share {key}: the fits of one stack differ in it")
    if any(ctx.checkpoint is not None or ctx.resume is not None for ctx in contexts):
        raise ConfigError(
            "batched fits write no checkpoint: train.checkpoint_every and --resume train one fit at a time"
        )


def record_together(contexts: list, name: str, records: list, *, validated: bool, seconds: float) -> list:
    """Each fit's :class:`~bayesprune.core.loop.History` of a stage ``name`` trained together (one
    :class:`~bayesprune.core.batched.FitRecord` per context), recorded in its context as
    :meth:`FitContext.train` records a stage (its training cost, each fit's share of the stack's
    ``seconds``, and its best epoch when ``validated``)."""
    histories = []
    for ctx, record in zip(contexts, records):
        history = History(record.step_losses, record.epoch_losses)
        if validated:
            ctx.best_epoch = record.best_epoch + 1
        entry = {"name": name, "history": LoopState.history_dict(history), "state": None}
        ctx._finished.append({**entry, "best_epoch": ctx.best_epoch, "seconds": seconds / len(contexts)})
        histories.append(history)
    return histories


def train_stack_together(
    contexts: list,
    name: str,
    stack,
    batches: list,
    *,
    losses,
    predict,
    optimizer,
    scheduler=None,
    on_epoch=(),
    generators,
) -> list:
    """The stage ``name`` of several fits of a method's own objective trained together
    (:func:`bayesprune.core.batched.train_stack` over ``stack``, ``ctx.epochs`` epochs, ``losses`` and
    ``predict`` as it takes them), fit k under ``contexts[k]``: its minibatches ``batches[k]``, its
    validation rows and early stopping (on the predictive mean of ``predict``), its random draws from
    ``generators`` (:class:`~bayesprune.core.batched.FitGenerators`). Each context records the stage as
    :meth:`FitContext.train` does, and :attr:`~FitContext.rng_after` is the random state its separate
    fit leaves. Returns each fit's :class:`~bayesprune.core.loop.History`.

    Raises:
        ConfigError: as :func:`check_together`.
    """
    check_together(contexts)
    first = contexts[0]
    validation = None if first.validation is None else [ctx.validation for ctx in contexts]
    start = time.perf_counter()
    with kernel_mode(first.kernels), training_precision(first.precision):
        records = train_stack(
            stack,
            batches,
            epochs=first.epochs,
            losses=losses,
            optimizer=optimizer,
            scheduler=scheduler,
            validation=validation,
            predict=predict,
            task=first.task,
            patience=first.patience,
            on_epoch=on_epoch,
            on_stop=generators.stop,
        )
    seconds = time.perf_counter() - start
    histories = record_together(contexts, name, records, validated=validation is not None, seconds=seconds)
    for k, ctx in enumerate(contexts):
        ctx.rng_after = generators.rng_state(k)
    return histories


def _train_together(contexts, name, nets, rows, epochs, loss, optim, validation, *, patience=None, batches=None):
    check_together(contexts)
    first = contexts[0]
    start = time.perf_counter()
    with kernel_mode(first.kernels), training_precision(first.precision):
        records = train_stacked(
            [net.to(first.device) for net in nets],
            batches or [ctx.batches(x, y) for ctx, (x, y) in zip(contexts, rows)],
            epochs=epochs,
            loss=loss,
            optim=optim,
            validation=validation,
            task=first.task,
            patience=first.patience if patience is None and validation is not None else patience,
        )
    seconds = time.perf_counter() - start
    return record_together(contexts, name, records, validated=validation is not None, seconds=seconds)


@contextmanager
def _resuming():
    """Turn a checkpoint resumed from that does not fit the run (edited, tampered, another run's)
    into one line."""
    try:
        yield
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        message = " ".join(str(error).split())[:200] or type(error).__name__
        raise BayesPruneError(f"--resume: the checkpoint does not continue this fit ({message})") from None


class _StageCheckpoint:
    """Writes the fit's checkpoint after every ``every`` epochs of a stage and after its last."""

    def __init__(self, context: FitContext, index: int, name: str, state: dict, batches, epochs: int, stateful: list):
        self.context, self.index, self.name, self.state = context, index, name, state
        self.batches, self.epochs, self.stateful = batches, epochs, stateful

    def on_epoch(self, epoch, history):
        context = self.context
        if (epoch + 1) % context.checkpoint_every and epoch + 1 != self.epochs:
            return
        loop = LoopState(
            epoch + 1,
            history,
            {},
            self.batches.generator.get_state(),
            rng_state(),
            [callback.state_dict() for callback in self.stateful],
        )
        write_checkpoint(
            context.checkpoint,
            method=context.method,
            state={key: _state_of(obj) for key, obj in self.state.items()},
            metadata={
                "epoch": epoch + 1,
                "stage": self.name,
                **({} if context.config is None else {"config": context.config}),
            },
            loop={
                "stages": list(context._finished),
                "current": {"index": self.index, "name": self.name, "loop": loop.state_dict()},
            },
        )


def _state_of(obj):
    return obj.get_state() if hasattr(obj, "get_state") else obj.state_dict()


def _snapshot(state: dict) -> dict:
    """A copy of the state of every object, detached from the live tensors that later steps change."""
    return copy.deepcopy({key: _state_of(obj) for key, obj in state.items()})


def _load(state: dict, saved: dict):
    for key, obj in state.items():
        if isinstance(obj, nn.Module):
            load_module_state(obj, saved[key])
        elif hasattr(obj, "set_state"):
            obj.set_state(copy.deepcopy(saved[key]))
        else:
            obj.load_state_dict(copy.deepcopy(saved[key]))


def fit_one_after_another(method, nets: list, datasets: list, options, contexts: list) -> list:
    """``method.fit`` of each fit in turn, each context's :attr:`~FitContext.rng_after` the random state
    its fit left: what a method's ``fit_together`` does with fits its stack does not train."""
    fits = []
    for net, data, ctx in zip(nets, datasets, contexts):
        fits.append(method.fit(net, data, options, ctx))
        ctx.rng_after = rng_state()
    return fits
