"""Independent fits of one network shape trained together, as one stacked model (issue 51, item 1).

K networks of one architecture (seeds, restarts, cells of one method) become one model whose every
parameter has a leading fit dimension (``torch.func.stack_module_state``), run by ``torch.func.vmap``
over ``functional_call`` (a plain MLP: by batched matrix products, without vmap's overhead): one step of the stacked model is one step of each fit, at the cost of a few
batched kernels instead of K programs of small ones. Each fit keeps its own

* start (its network as given) and minibatch order (its own :class:`~bayesprune.core.loop.TensorBatches`,
  seeded as its separate fit's);
* gradient: the loss is the sum of the fits' losses, and fit k's parameters enter only fit k's loss;
* optimiser state: Adam's and SGD's updates are elementwise, so one optimiser over the stacked tensors
  keeps each fit's moments apart (weight decay, momentum and the per-epoch schedule too);
* early stopping: each fit's validation score, best epoch and best state, as
  :class:`~bayesprune.core.early_stopping.EarlyStopping` keeps them; training ends when every fit stopped.

So each fit ends where its separate fit ends, up to the rounding of batched matrix products.
Networks that draw random numbers (dropout) or update buffers while training (batch norm) are refused:
their draws or statistics would not be the separate fits'.

Variational fits (the sBNN, Sparse VD) train on the same loop (:func:`train_stack`) with their own
stacked parameters (:class:`Stack`) and objective; their random draws come from :class:`FitGenerators`,
one generator per fit holding the global stream its separate fit draws from, so each fit draws the
numbers its separate fit draws, in the same order.
"""

import copy
import inspect
import math
from dataclasses import dataclass, field

import pyro
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from bayesprune.core.errors import ConfigError, Interrupted, TrainingDiverged
from bayesprune.core.loop import STOP, rng_state
from bayesprune.core.optim import torch_optimizer, torch_scheduler
from bayesprune.core.precision import autocast_calls
from bayesprune.core.predict import metric
from bayesprune.core.tasks import predictive_mean

#: Functions called as ``hook(stack, epoch, index)`` before every step of :func:`train_stack` (none by
#: default). The device's out-of-memory error (``torch.cuda.OutOfMemoryError``) raised by one takes the path
#: a CUDA device's takes out of the step, so that the fallback to fewer fits at a time
#: (the runner's, for a run's seeds) runs on the CPU too (``tests/pipeline/test_batched_seeds.py``).
BEFORE_STEP: list = []


class Stack:
    """The parameters of K fits as tensors with a leading fit dimension (``params``: name → ``[K, ...]``
    leaf tensors the optimiser steps), each fit's readable and writable alone."""

    def __init__(self, params: dict):
        self.params = params
        self.count = len(next(iter(params.values())))

    def fit(self, k: int) -> dict:
        """The parameters of fit ``k`` (detached clones)."""
        return {name: param[k].detach().clone() for name, param in self.params.items()}

    def load_fit(self, k: int, state: dict):
        with torch.no_grad():
            for name, value in state.items():
                self.params[name][k].copy_(value)


class StackedNetworks(Stack):
    """K networks of one shape as one model: ``params`` and ``buffers`` with a leading fit dimension,
    called on inputs ``[K, B, ...]`` (one minibatch per fit) or ``[B, ...]`` (the same rows for all).

    Raises:
        ConfigError: the networks differ in shape (naming the first parameter that differs), draw
            random numbers (dropout) or hold buffers (batch norm).
    """

    def __init__(self, nets: list):
        check_stackable(nets)
        params, buffers = stack_module_state(nets)
        super().__init__({name: param.detach().requires_grad_() for name, param in params.items()})
        self.buffers = buffers
        self._base = copy.deepcopy(nets[0]).to("meta")
        self.layers = plain_layers(nets[0])

    def _one(self, params, buffers, x):
        return functional_call(self._base, (params, buffers), (x,))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(self.params, x)

    def forward(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """The networks' outputs ``[K, B, ...]`` with ``params`` (name → ``[K, ...]``) in place of their
        parameters (a draw of the weights)."""
        shared = x.dim() == 0 or x.shape[0] != self.count
        if self.layers is not None and (x.dim() - (not shared) == 2 or isinstance(self.layers[0][1], nn.Flatten)):
            return self._mlp(params, x.expand(self.count, *x.shape) if shared else x)
        return vmap(self._one, in_dims=(0, 0, None if shared else 0), randomness="error")(params, self.buffers, x)

    def _mlp(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        """The forward pass of a plain MLP as batched matrix products: ``x`` is ``[K, B, ...]``."""
        for name, module in self.layers:
            if isinstance(module, nn.Flatten):
                x = x.flatten(2)
            elif isinstance(module, nn.Linear):
                weight, bias = params[f"{name}.weight"].transpose(1, 2), params.get(f"{name}.bias")
                x = torch.bmm(x, weight) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight)
            else:  # elementwise
                x = module(x)
        return x

    def unstack(self, nets: list):
        """Copy every fit's parameters into its network."""
        for k, net in enumerate(nets):
            state = self.fit(k)
            with torch.no_grad():
                for name, param in net.named_parameters():
                    param.copy_(state[name])


class FitGenerators:
    """Each fit's own random numbers: one ``torch.Generator`` per fit on ``device``, seeded as
    ``pyro.set_rng_seed(seed)`` seeds torch's global generator, so that the draws of fit k, made in the
    order its separate fit makes them, are that fit's. :meth:`stop` keeps a fit's state where its
    separate fit ends (early stopping) while the stack trains on."""

    def __init__(self, seeds: list, device: torch.device):
        self.seeds, self.device = list(seeds), torch.device(device)
        self.generators = [torch.Generator(self.device).manual_seed(seed) for seed in self.seeds]
        self._stopped = {}

    def randn(self, shape, *, dtype=torch.float32) -> torch.Tensor:
        """``[K, *shape]``: each fit's next ``torch.randn(shape)``."""
        return torch.stack(
            [torch.randn(shape, generator=generator, dtype=dtype, device=self.device) for generator in self.generators]
        )

    def stop(self, k: int):
        self._stopped.setdefault(k, self.generators[k].get_state())

    def rng_state(self, k: int) -> dict:
        """The global random states (:func:`~bayesprune.core.loop.rng_state`) fit k's separate fit leaves:
        seeded, then its draws. Seeds the global generators as a side effect."""
        pyro.set_rng_seed(self.seeds[k])
        state = rng_state()
        drawn = self._stopped.get(k, self.generators[k].get_state())
        if self.device.type == "cpu":
            state["torch"] = drawn
        else:
            state["cuda"][self.device.index or 0] = drawn
        return state


#: Modules that act on each element alone: a plain MLP of them and Linear layers runs as batched products.
ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.ELU, nn.Softplus, nn.Identity)


def plain_layers(net: nn.Module) -> list | None:
    """``(name, module)`` of a ``Sequential`` of ``Linear`` layers, elementwise activations and
    ``Flatten()`` (from the batch dimension on), or ``None`` for any other network (run by ``vmap``)."""
    if type(net) is not nn.Sequential:
        return None
    layers = list(net.named_children())
    for _, module in layers:
        flat = isinstance(module, nn.Flatten) and (module.start_dim, module.end_dim) == (1, -1)
        if not (flat or type(module) is nn.Linear or type(module) in ELEMENTWISE):
            return None
    return layers or None


def check_stackable(nets: list):
    """Refuse, in one line, networks that cannot train as one stacked model (see :class:`StackedNetworks`)."""
    if not nets:
        raise ConfigError("batched fits need at least one network")
    first = dict(nets[0].named_parameters())
    for index, net in enumerate(nets):
        params = dict(net.named_parameters())
        for name in [*first, *(params.keys() - first.keys())]:
            mine, theirs = params.get(name), first.get(name)
            if mine is None or theirs is None or mine.shape != theirs.shape or mine.dtype != theirs.dtype:
                shape = "absent" if mine is None else tuple(mine.shape)
                raise ConfigError(
                    f"batched fits must share one network shape: fit {index + 1}'s {name} is {shape}, fit 1's "
                    f"{'absent' if theirs is None else tuple(theirs.shape)}"
                )
        for where, module in net.named_modules():
            for name, value in _attributes(module).items():
                theirs = _attributes(nets[0].get_submodule(where)).get(name)
                if not _same(value, theirs):
                    label = f"{where}.{name}" if where else name
                    raise ConfigError(
                        f"batched fits must share one network: fit {index + 1}'s {label} is {value!r}, fit 1's {theirs!r}"
                    )
        if any(True for _ in net.buffers()):
            raise ConfigError("batched fits: a network with buffers (batch norm) trains one fit at a time")
        if any(isinstance(module, nn.modules.dropout._DropoutNd) for module in net.modules()):
            raise ConfigError("batched fits: a network with dropout trains one fit at a time")


def _attributes(module: nn.Module) -> dict:
    """A module's own attributes beside its parameters, buffers, submodules and hooks (``nn.Module``'s private
    ones), which its forward may read: the stack runs fit 1's module for every fit."""
    return {name: value for name, value in vars(module).items() if not name.startswith("_")}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values without a truth of equality (arrays): the same object only
        return a is b


@dataclass
class FitRecord:
    """One fit's side of a stacked training: its losses (every step's, each epoch's mean), the epochs it
    trained, and early stopping's best epoch (0-based) and validation scores."""

    step_losses: list = field(default_factory=list)
    epoch_losses: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    best_epoch: int = -1
    best_score: float = math.inf
    stopped: bool = False
    best: dict | None = field(default=None, repr=False)


def train_stacked(
    nets: list,
    batches: list,
    *,
    epochs: int,
    loss,
    optim,
    validation: tuple | list | None = None,
    task: str = "classification",
    patience: int | None = None,
) -> list:
    """Train ``nets`` in place together: ``epochs`` passes, fit k over ``batches[k]`` (one
    :class:`~bayesprune.core.loop.TensorBatches` per fit, same rows and batch size), minimising
    ``loss(output, y)`` with the optimiser and schedule of ``optim`` (an :class:`~bayesprune.core.optim.OptimConfig`).
    With ``validation = (x, y)`` (or a list of one per fit), each fit keeps its best epoch's state
    (after ``patience`` epochs without improvement it stops). Returns one :class:`FitRecord` per fit. The losses are read back once
    an epoch.

    Raises:
        ConfigError: see :class:`StackedNetworks`; ``batches`` not one per network.
        TrainingDiverged: a fit's loss became NaN or infinite (naming the fit, the epoch and the step).
    """
    if len(batches) != len(nets):
        raise ConfigError(f"batched fits need one minibatch stream per network, got {len(batches)} for {len(nets)}")
    stacked = StackedNetworks(nets)
    optimizer = torch_optimizer(optim, list(stacked.params.values()))
    per_fit = _per_fit(loss)
    records = train_stack(
        stacked,
        batches,
        epochs=epochs,
        losses=lambda x, y, index, num_batches: per_fit(autocast_calls(stacked, x.device)(x), y),
        optimizer=optimizer,
        scheduler=torch_scheduler(optim, optimizer, epochs=epochs),
        validation=validation,
        predict=lambda x: predictive_mean(stacked(x), task),
        task=task,
        patience=patience,
    )
    stacked.unstack(nets)
    return records


def train_stack(
    stack: Stack,
    batches: list,
    *,
    epochs: int,
    losses,
    optimizer,
    scheduler=None,
    validation: tuple | list | None = None,
    predict=None,
    task: str = "classification",
    patience: int | None = None,
    on_epoch=(),
    on_stop=None,
) -> list:
    """The loop of every stacked training: ``epochs`` passes, fit k over ``batches[k]``, each step
    minimising the sum of ``losses(x, y, index, num_batches)`` (``[K]``, fit k's loss on its minibatch
    ``x[k], y[k]``) with ``optimizer`` over ``stack.params`` (elementwise updates: each fit's own), the
    ``scheduler`` stepped and ``on_epoch(epoch)`` hooks run after every epoch, as
    :func:`~bayesprune.core.loop.train` runs them. With ``validation``, ``predict(x)`` (``[K, rows, ...]``
    predictive means) scores each fit after every epoch for its early stopping; ``on_stop(k)`` runs when
    fit k stops. Each fit ends in its best state. Returns one :class:`FitRecord` per fit.

    Raises:
        TrainingDiverged: a fit's loss became NaN or infinite (naming the fit, the epoch and the step).
    """
    for group in optimizer.param_groups:  # a few tensors, each K fits': one kernel per update over all of them
        if "foreach" in group and not group.get("fused"):
            group["foreach"] = True
    records = [FitRecord() for _ in range(stack.count)]
    num_batches = len(batches[0])
    for epoch in range(epochs):
        steps = []
        for index, (x, y) in enumerate(_stacked_minibatches(batches)):
            for hook in BEFORE_STEP:
                hook(stack, epoch, index)
            optimizer.zero_grad(set_to_none=True)
            with pyro.validation_enabled(False):  # checking arguments reads them back to the host
                value = losses(x, y, index, num_batches)
            value.sum().backward()
            optimizer.step()
            steps.append(value.detach())
            if STOP.signal is not None:  # as core.loop.train: the step in progress finished, no epoch's end
                raise Interrupted(f"stopped by signal {STOP.signal} in epoch {epoch + 1}", STOP.signal)
        _record_epoch(records, torch.stack(steps).double().cpu(), epoch)
        if scheduler is not None:
            scheduler.step()
        for hook in on_epoch:
            hook(epoch)
        if validation is not None and _early_stopping(
            stack, predict, records, validation, task, (epoch, epochs, patience), on_stop
        ):
            break
    for k, record in enumerate(records):  # a fit that stopped early trained on with the others: its best state
        if record.best is not None:
            stack.load_fit(k, record.best)
    return records


def _per_fit(loss):
    """``loss(output, y)`` of each fit, ``[K]``: a loss that takes ``reduction`` (those of
    ``torch.nn.functional``, whose mean must be the plain mean over rows: no class weights) on all fits'
    rows at once, averaged per fit; any other through ``vmap``."""
    if "reduction" not in inspect.signature(loss).parameters:
        return vmap(loss)

    def each(output, y):
        rows = loss(output.flatten(0, 1), y.flatten(0, 1), reduction="none")
        return rows.view(*output.shape[:2], -1).flatten(1).mean(1)

    return each


def _stacked_minibatches(batches: list):
    """``(x, y)`` of one epoch with a leading fit dimension, fit k's rows drawn by ``batches[k]``: one
    gather for all fits when they share their rows in memory, else each fit's minibatches stacked."""
    first = batches[0]
    plain = all(b.augment is None and b.memory_format != torch.channels_last for b in batches)
    if plain and all(torch.is_tensor(b.x) and b.x is first.x and b.y is first.y for b in batches):
        for rows in zip(*[b.chunks() for b in batches]):
            rows = torch.stack(rows)
            yield first.x[rows], first.y[rows]
        return
    for parts in zip(*batches):
        yield torch.stack([x for x, _ in parts]), torch.stack([y for _, y in parts])


def _record_epoch(records: list, losses: torch.Tensor, epoch: int):
    """Each fit's losses of one epoch (``[steps, K]``, on the host), checked finite."""
    for k, record in enumerate(records):
        column = losses[:, k]
        if not record.stopped:
            bad = (~torch.isfinite(column)).nonzero()
            if len(bad):
                raise TrainingDiverged(
                    f"fit {k + 1}'s loss became {column[bad[0, 0]].item()} at epoch {epoch + 1}, step "
                    f"{bad[0, 0].item() + 1}; lower optim.lr"
                )
            record.step_losses.extend(column.tolist())
            record.epoch_losses.append(column.sum().item() / len(column))


def _early_stopping(stack, predict, records, validation, task, when, on_stop) -> bool:
    """:class:`~bayesprune.core.early_stopping.EarlyStopping` for every fit: score this epoch, keep each
    fit's best state, and put it back once the fit stops or training ends; ``True`` when all stopped."""
    epoch, epochs, patience = when
    device = next(iter(stack.params.values())).device
    with torch.no_grad():
        if isinstance(validation, tuple):
            means, ys = predict(validation[0].to(device)), [validation[1]] * len(records)
        else:  # each fit its own rows: one pass of the stack over each fit's
            means = [predict(x.to(device))[k] for k, (x, _) in enumerate(validation)]
            ys = [y for _, y in validation]
    for k, (record, y) in enumerate(zip(records, ys)):
        if record.stopped:
            continue
        value = metric(task, means[k].cpu(), y.cpu())
        record.scores.append(value)
        if value < record.best_score or record.best is None:
            record.best_score, record.best_epoch, record.best = value, epoch, stack.fit(k)
        if (patience is not None and epoch - record.best_epoch >= patience) or epoch + 1 == epochs:
            record.stopped = True
            stack.load_fit(k, record.best)
            if on_stop is not None:
                on_stop(k)
    return all(record.stopped for record in records)
