"""Checkpoints that load with ``torch.load(weights_only=True)``: tensors and plain metadata only.

A checkpoint holds ``method`` (the registered name), ``structure`` (site name → shape of the network
when saved, so a network that shrank while training can be rebuilt before its state is loaded),
``state`` (the :meth:`~bayesprune.methods.Fitted.state_dict`), ``metadata`` (``epoch``, ...),
``versions`` and, for a fit that can resume, ``loop`` (:class:`~bayesprune.fit.LoopState`).
Checkpoints of earlier versions (``{model, guide, metadata}``, sBNN only) still read.
"""
import os
import pickle
import zipfile

import pyro
import torch

from .errors import BayesPruneError
from .fit import LoopState, rng_state


def save_checkpoint(path, fitted, *, metadata=None, loop=None):
    """Write the state of ``fitted`` atomically (a crash never leaves a half-written file), with the
    training loop's state ``loop`` (:meth:`~bayesprune.fit.LoopState.state_dict`) when given."""
    from bayesprune import __version__

    state = {
        "method": fitted.method,
        "structure": {name: list(shape) for name, shape in fitted.sites.items()},
        "state": fitted.state_dict(),
        "metadata": dict(metadata or {}),
        "versions": {"bayesprune": __version__, "torch": str(torch.__version__)},
    }
    if loop is not None:
        state["loop"] = loop
    partial = f"{path}.partial"
    torch.save(state, partial)
    os.replace(partial, path)


def read_checkpoint(path) -> dict:
    """The checkpoint at ``path`` as saved by :func:`save_checkpoint` (older layouts converted).

    Raises:
        BayesPruneError: the file is missing, not a checkpoint, or holds anything but tensors and plain data.
    """
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as error:
        raise BayesPruneError(f"{path}: not a readable checkpoint ({' '.join(str(error).split())[:200]})") from None
    if not isinstance(saved, dict):
        raise BayesPruneError(f"{path}: not a bayesprune checkpoint")
    if "method" not in saved and {"model", "guide"} <= saved.keys():
        saved = {"method": "sbnn", "structure": None, "state": {"model": saved["model"], "guide": saved["guide"]},
                 "metadata": saved.get("metadata", {}), "versions": {}}
    if not {"method", "state"} <= saved.keys():
        raise BayesPruneError(f"{path}: not a bayesprune checkpoint")
    return saved


def load_module_state(module, state: dict):
    """``module.load_state_dict(state)``, then drop Pyro param-store entries of the same names.

    A ``PyroModule`` adopts a stored value over its own on its next call, which would silently undo
    the load.
    """
    module.load_state_dict(state)
    store = pyro.get_param_store()
    for name, _ in module.named_parameters():
        stored_name = name.removesuffix("_unconstrained")
        if stored_name in store:
            del store[stored_name]


class Checkpoint:
    """Fit callback that saves ``fitted`` after every ``every`` epochs and after the last one.

    Given the fit's ``optimizer`` (a ``pyro.optim.PyroOptim``) and ``batches``
    (:class:`~bayesprune.fit.TensorBatches`), the checkpoint also holds the loop's
    :class:`~bayesprune.fit.LoopState` under ``"loop"``, from which the fit resumes exactly;
    ``stateful`` callbacks (with ``state_dict()``) are saved with it, in order.
    """

    def __init__(self, path, fitted, *, epochs: int, every: int = 1, optimizer=None, batches=None, stateful=()):
        self.path, self.fitted = path, fitted
        self.epochs, self.every = epochs, every
        self.optimizer, self.batches, self.stateful = optimizer, batches, list(stateful)

    def __call__(self, epoch, history):
        if (epoch + 1) % self.every == 0 or epoch + 1 == self.epochs:
            loop = None
            if self.optimizer is not None:
                loop = LoopState(epoch + 1, history, self.optimizer.get_state(), self.batches.generator.get_state(),
                                 rng_state(), [callback.state_dict() for callback in self.stateful]).state_dict()
            save_checkpoint(self.path, self.fitted, metadata={"epoch": epoch + 1}, loop=loop)
