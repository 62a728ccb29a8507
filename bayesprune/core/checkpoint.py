"""Checkpoints that load with ``torch.load(weights_only=True)``: tensors and plain metadata only.

A checkpoint holds ``method`` (the registered name), ``structure`` (site name → shape of the network
when saved, so a network that shrank while training can be rebuilt before its state is loaded),
``built`` (the same for the network as the run's config built it, before any unit was removed), ``state``
(the :meth:`~bayesprune.methods.Fitted.state_dict`), ``metadata`` (``epoch``, ...),
``versions``, ``preprocessing`` (what the data loader did to the raw data, as
:meth:`bayesprune.core.preprocessing.Preprocessing.state`; absent in checkpoints written before it was kept)
and, for an unfinished fit, ``loop``: the finished stages' results and the
:class:`~bayesprune.core.loop.LoopState` of the stage in progress (:class:`bayesprune.methods.FitContext`).
Checkpoints of earlier versions (``{model, guide, metadata}``, sBNN only) still read.
"""

import copy
import hashlib
import pickle
import zipfile
from collections import OrderedDict

import pyro
import torch

from bayesprune.core.errors import BayesPruneError, ConfigError, one_line
from bayesprune.core.files import replacing


def shapes(net) -> dict:
    """Parameter name → shape (a list) of every parameter of ``net``, as a checkpoint records them."""
    return {name: list(param.shape) for name, param in net.named_parameters()}


def save_checkpoint(path, fitted, *, metadata=None, built=None, preprocessing=None):
    """Write the state of the finished fit ``fitted`` atomically, with the structure of its network,
    ``built``, the :func:`shapes` of the network the fit started from (``None``: not known), and the
    data's ``preprocessing`` (a :class:`~bayesprune.core.preprocessing.Preprocessing`, or ``None``)."""
    write_checkpoint(
        path,
        method=fitted.method,
        state=fitted.state_dict(),
        metadata=metadata,
        structure=shapes(fitted.net),
        built=built,
        preprocessing=None if preprocessing is None else preprocessing.state(),
    )


def write_checkpoint(
    path, *, method: str, state: dict, metadata=None, structure=None, built=None, loop=None, preprocessing=None
):
    """Write a checkpoint atomically (a crash never leaves a half-written file): ``state`` of a
    ``method``, and for an unfinished fit the stages' state ``loop``
    (:meth:`bayesprune.methods.FitContext.train`) it resumes from."""
    from bayesprune.version import __version__

    saved = {
        "method": method,
        "structure": structure,
        "built": built,
        "state": state,
        "metadata": dict(metadata or {}),
        "versions": {"bayesprune": __version__, "torch": str(torch.__version__)},
    }
    if loop is not None:
        saved["loop"] = loop
    if preprocessing is not None:
        saved["preprocessing"] = preprocessing
    try:
        with replacing(path) as partial:
            torch.save(on_cpu(saved), partial)
    except (OSError, RuntimeError) as error:  # torch.save's failure on a full disk is a RuntimeError
        raise BayesPruneError(
            f"{path}: the checkpoint could not be written ({one_line((str(error).splitlines() or [''])[0])}); is "
            "the disk full? The previous checkpoint is kept"
        ) from None


def on_cpu(value):
    """``value`` with every tensor in its dicts, lists and tuples moved to the CPU: a checkpoint of a
    fit on CUDA reads back on a machine without one."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        moved = {key: on_cpu(item) for key, item in value.items()}
        if hasattr(value, "_metadata"):  # a state dict's versions, read by modules (torchvision's MNASNet) on loading
            moved = OrderedDict(moved)
            moved._metadata = copy.deepcopy(value._metadata)
        return moved
    if isinstance(value, list):
        return [on_cpu(item) for item in value]
    if isinstance(value, tuple):
        return tuple(on_cpu(item) for item in value)
    return value


#: What ``torch.load`` raises on a file that is no torch file (missing, empty, another format).
UNREADABLE = (OSError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError)
#: What its reader of the legacy (non-zip) format raises on other bytes: a text file gives ``KeyError``.
LEGACY_READER = (KeyError, IndexError)


def read_checkpoint(path) -> dict:
    """The checkpoint at ``path`` as saved by :func:`save_checkpoint` (older layouts converted).

    Raises:
        BayesPruneError: the file is missing, not a checkpoint, or holds anything but tensors and plain data.
    """
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's message would advise weights_only=False: running the file's code
        raise BayesPruneError(
            f"{path}: holds a pickled object, not a checkpoint, or another file (never unpickled)"
        ) from None
    except (*UNREADABLE, *LEGACY_READER) as error:
        raise BayesPruneError(f"{path}: not a readable checkpoint ({' '.join(str(error).split())[:200]})") from None
    if not isinstance(saved, dict):
        raise BayesPruneError(f"{path}: not a bayesprune checkpoint")
    if "method" not in saved and {"model", "guide"} <= saved.keys():
        saved = {
            "method": "sbnn",
            "structure": None,
            "state": {"model": saved["model"], "guide": saved["guide"]},
            "metadata": saved.get("metadata", {}),
            "versions": {},
        }
    if not {"method", "state"} <= saved.keys():
        raise BayesPruneError(f"{path}: not a bayesprune checkpoint")
    problem = _layout_problem(saved)
    if problem:
        raise BayesPruneError(f"{path}: not a checkpoint bayesprune wrote ({problem})")
    return saved


def _layout_problem(saved: dict):
    """What in a checkpoint's fields is not of the type :func:`write_checkpoint` writes, or ``None``."""

    def count(value):
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    if not isinstance(saved["method"], str):
        return "method is not a string"
    if not isinstance(saved["state"], dict):
        return "state is not a table"
    if not isinstance(saved.get("metadata", {}), dict):
        return "metadata is not a table"
    epoch = saved.get("metadata", {}).get("epoch")
    if epoch is not None and not count(epoch):
        return f"metadata epoch {epoch!r} is not a non-negative integer"
    for key in ("structure", "built"):
        table = saved.get(key)
        if table is not None and not (
            isinstance(table, dict)
            and all(isinstance(shape, list) and all(count(size) for size in shape) for shape in table.values())
        ):
            return f"{key} is not a table of shapes"
    if not isinstance(saved.get("preprocessing", {}), dict):
        return "preprocessing is not a table"
    loop = saved.get("loop")
    if loop is not None:
        current = loop.get("current") if isinstance(loop, dict) else None
        if not (
            isinstance(loop, dict)
            and isinstance(loop.get("stages"), list)
            and all(isinstance(stage, dict) and isinstance(stage.get("name"), str) for stage in loop["stages"])
        ):
            return "loop stages are not a list of stages"
        if current is not None and not (
            isinstance(current, dict)
            and count(current.get("index"))
            and isinstance(current.get("name"), str)
            and isinstance(current.get("loop"), dict)
            and count(current["loop"].get("epoch"))
        ):
            return "the loop's current stage is not an index, a name and an epoch"
        histories = [stage.get("history") for stage in loop["stages"]] + ([current["loop"]] if current else [])
        if not all(_losses(history) for history in histories):
            return "a stage's step_losses or epoch_losses are not lists of numbers"
        if current is not None and current["index"] != len(loop["stages"]):
            return (
                f"the loop's current stage {current['index']} does not follow its {len(loop['stages'])} finished stages"
            )
    return None


def _losses(history) -> bool:
    """Whether ``history`` holds the losses :meth:`~bayesprune.core.loop.LoopState.history_dict` writes."""
    return isinstance(history, dict) and all(
        isinstance(history.get(key), list)
        and all(isinstance(loss, (int, float)) and not isinstance(loss, bool) for loss in history[key])
        for key in ("step_losses", "epoch_losses")
    )


#: The key of ``metrics.json`` holding :func:`state_digest` of the run's final checkpoint: a command
#: reading the run refuses a checkpoint.pt of another fit, even one of the same shapes.
CHECKPOINT_DIGEST = "checkpoint_sha256"


def state_digest(state) -> str:
    """A SHA-256 of a checkpoint's state (every tensor's place, dtype, shape and bytes; every other value's
    ``repr``), equal for equal states however they were written."""
    digest = hashlib.sha256()

    def visit(value, path):
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                visit(value[key], f"{path}.{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                visit(item, f"{path}[{index}]")
        elif torch.is_tensor(value):
            value = value.detach().cpu().contiguous()
            digest.update(f"{path}\0{value.dtype}\0{list(value.shape)}\0".encode())
            digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(f"{path}\0{value!r}\0".encode())

    visit(state, "state")
    return digest.hexdigest()


def state_mismatch(saved, restored, path: str = "state"):
    """Where ``saved`` (a checkpoint's state) holds a tensor of another dtype or shape than ``restored``
    (the state the fit restored from it writes) at the same place, or ``None``."""
    if torch.is_tensor(saved) and torch.is_tensor(restored):
        if saved.dtype != restored.dtype or saved.shape != restored.shape:
            return f"{path} is {saved.dtype} of shape {list(saved.shape)}, not {restored.dtype} of shape {list(restored.shape)}"
    elif isinstance(saved, dict) and isinstance(restored, dict):
        for key in saved.keys() & restored.keys():
            problem = state_mismatch(saved[key], restored[key], f"{path}.{key}")
            if problem:
                return problem
    return None


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


def load_weights(net, path, *, key: str = "model.weights"):
    """Put the weights file ``path`` (``torch.save(net.state_dict(), path)`` of the same network, or a
    dict holding such a state under ``"state_dict"``) into ``net``, read with ``torch.load(weights_only=True)``:
    a file that holds any other object is refused, never unpickled.

    Raises:
        ConfigError: the file is missing or unreadable, holds a pickled object, or does not match ``net``;
            one line naming ``key``, the file and the first mismatched state key in ``net``'s order.
    """
    state = _weights_file(path, key)
    own = net.state_dict()
    for name, tensor in own.items():
        if name not in state:
            raise ConfigError(f"{key}: {path} does not match the network: it has no {name!r}")
        if not torch.is_tensor(state[name]) or state[name].shape != tensor.shape:
            held = list(state[name].shape) if torch.is_tensor(state[name]) else type(state[name]).__name__
            raise ConfigError(
                f"{key}: {path} does not match the network: {name!r} is {held} in the file, "
                f"{list(tensor.shape)} in the network"
            )
    extra = next((name for name in state if name not in own), None)
    if extra is not None:
        raise ConfigError(f"{key}: {path} does not match the network: the network has no {extra!r}")
    net.load_state_dict(state)
    return net


def _weights_file(path, key: str) -> dict:
    """The state dict a weights file holds (see :func:`load_weights`)."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path}: no such file") from None
    except pickle.UnpicklingError:
        raise ConfigError(
            f"{key}: {path} holds a pickled object, not weights; save net.state_dict() with torch.save"
        ) from None
    except (*UNREADABLE, *LEGACY_READER) as error:
        reason = getattr(error, "strerror", None) or one_line(
            str(error).splitlines()[0] if str(error) else type(error).__name__
        )
        raise ConfigError(f"{key}: {path}: not a readable weights file ({reason[:200]})") from None
    if isinstance(saved, dict) and isinstance(saved.get("state_dict"), dict):
        saved = saved["state_dict"]
    if not isinstance(saved, dict) or not saved or not all(isinstance(name, str) for name in saved):
        raise ConfigError(f"{key}: {path} is not a state dict (torch.save(net.state_dict(), path) writes one)")
    return saved
