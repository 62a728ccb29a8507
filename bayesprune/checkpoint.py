"""Checkpoints that load with ``torch.load(weights_only=True)``: tensors and plain metadata only.

A checkpoint holds ``method`` (the registered name), ``structure`` (site name → shape of the network
when saved, so a network that shrank while training can be rebuilt before its state is loaded),
``state`` (the :meth:`~bayesprune.methods.Fitted.state_dict`), ``metadata`` (``epoch``, ...),
``versions`` and, for an unfinished fit, ``loop``: the finished stages' results and the
:class:`~bayesprune.fit.LoopState` of the stage in progress (:class:`bayesprune.methods.FitContext`).
Checkpoints of earlier versions (``{model, guide, metadata}``, sBNN only) still read.
"""
import pickle
import zipfile

import pyro
import torch

from .errors import BayesPruneError
from .files import replacing


def save_checkpoint(path, fitted, *, metadata=None):
    """Write the state of the finished fit ``fitted`` atomically, with the structure of its network."""
    write_checkpoint(path, method=fitted.method, state=fitted.state_dict(), metadata=metadata,
                     structure={name: list(param.shape) for name, param in fitted.net.named_parameters()})


def write_checkpoint(path, *, method: str, state: dict, metadata=None, structure=None, loop=None):
    """Write a checkpoint atomically (a crash never leaves a half-written file): ``state`` of a
    ``method``, and for an unfinished fit the stages' state ``loop``
    (:meth:`bayesprune.methods.FitContext.train`) it resumes from."""
    from bayesprune.version import __version__

    saved = {"method": method, "structure": structure, "state": state, "metadata": dict(metadata or {}),
             "versions": {"bayesprune": __version__, "torch": str(torch.__version__)}}
    if loop is not None:
        saved["loop"] = loop
    with replacing(path) as partial:
        torch.save(saved, partial)


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
