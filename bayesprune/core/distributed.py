"""One fit on several processes: PyTorch's distributed data parallelism, as ``torchrun`` launches it.

Every process runs the whole run with the same seed, so that parameters start equal and every draw
that does not depend on the data (a weight sample, a gate sample) is the same in each; the processes
differ only in their share of each minibatch (:func:`shard`). After each backward pass the gradients
are averaged over the processes (:func:`average_gradients`) and every process takes the same
optimiser step, so their parameters stay equal. Each process's loss is the N/B-scaled estimate on
its share (N/(B/P) on B/P rows), so the average of the processes' losses and of their gradients is
the one-process estimate on the whole minibatch of B rows: the same fit to float tolerance, where
B is a multiple of the number of processes P (a last, smaller minibatch split unevenly weighs its
shares equally) and no layer draws noise per row or pools statistics over the minibatch (local
reparameterisation, BatchNorm in training: each process sees its share).

Unlike ``torch.nn.parallel.DistributedDataParallel``, which wraps one ``nn.Module``, this averages
whatever a step differentiates (Pyro's guide parameters, gates, a point network), because a method's
trainable state is not one module.
"""

import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from bayesprune.core.errors import ConfigError

#: How long a process waits for the others at a collective before it gives up.
TIMEOUT = timedelta(minutes=10)


def launched() -> bool:
    """Whether this process was started by ``torchrun`` (or another launcher) as one of several."""
    return launched_size() > 1


def launched_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``; 1 without a launcher).

    Raises:
        ConfigError: ``WORLD_SIZE`` is not a positive integer.
    """
    size = _environment_integer("WORLD_SIZE", 1)
    if size < 1:
        raise ConfigError(f"distributed launch: environment variable WORLD_SIZE must be at least 1, got {size}")
    return size


def _environment_integer(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None and default is not None:
        return default
    if value is None:
        raise ConfigError(f"distributed launch: environment variable {name} is not set (torchrun sets it)")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(
            f"distributed launch: environment variable {name} must be an integer, got {value!r}"
        ) from None


def check_environment():
    """Refuse in one line the environment of a launch that torch's rendezvous cannot use (it would raise
    its own error, or wait for a process that cannot join): ``RANK`` outside ``[0, WORLD_SIZE)``,
    ``LOCAL_RANK`` negative, ``MASTER_ADDR`` or ``MASTER_PORT`` missing or not a port.

    Raises:
        ConfigError: naming the environment variable.
    """
    size = launched_size()
    rank = _environment_integer("RANK")
    if not 0 <= rank < size:
        raise ConfigError(f"distributed launch: environment variable RANK is {rank}, not in [0, WORLD_SIZE = {size})")
    if _environment_integer("LOCAL_RANK", 0) < 0:
        raise ConfigError("distributed launch: environment variable LOCAL_RANK must be at least 0")
    if not os.environ.get("MASTER_ADDR"):
        raise ConfigError("distributed launch: environment variable MASTER_ADDR is not set (torchrun sets it)")
    port = _environment_integer("MASTER_PORT")
    if not 0 < port < 65536:
        raise ConfigError(f"distributed launch: environment variable MASTER_PORT must be a port (1-65535), got {port}")


def active() -> bool:
    """Whether a process group of more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """The number of processes (1 without a process group)."""
    return dist.get_world_size() if active() else 1


def start(device: str = "auto"):
    """Join the process group ``torchrun`` describes in the environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``...): NCCL when the run's device is CUDA, else gloo. Does nothing when the process
    was not launched as one of several, or the group is running already."""
    if not launched() or active():
        return
    check_environment()
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank())
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)


def stop():
    """Leave the process group :func:`start` joined."""
    if active():
        dist.destroy_process_group()


def local_rank() -> int:
    """This process's rank on its machine (``LOCAL_RANK``; 0 without a launcher)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def shard(rows: torch.Tensor) -> torch.Tensor:
    """This process's share of a minibatch's row indices: the ``rank``-th of ``world_size`` nearly
    equal contiguous parts (all of them without a process group)."""
    if not active():
        return rows
    return rows.tensor_split(world_size())[rank()]


def average_gradients(params):
    """Average the ``.grad`` of ``params`` (an ordered sequence, in the same order in every process)
    over the processes, in one collective. Parameters without a gradient are left out; every process
    must have the same ones (they run the same code on the same model)."""
    if not active():
        return
    grads = [param.grad for param in params if param.grad is not None]
    if not grads:
        return
    flat = torch.cat([grad.reshape(-1) for grad in grads])
    dist.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def average(values: torch.Tensor) -> torch.Tensor:
    """``values`` averaged over the processes (itself without a process group)."""
    if not active():
        return values
    values = values.clone()
    dist.all_reduce(values)
    return values / world_size()


def check_same(settings: dict, what: str = "setting"):
    """Refuse in one line a launch whose processes were given different ``settings`` (flat key →
    value), naming the first key that differs.

    Raises:
        ConfigError: a key whose value differs between this process and another.
    """
    if not active():
        return
    digest = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()
    gathered = [None] * world_size()
    dist.all_gather_object(gathered, (digest, settings))
    for other, (other_digest, other_settings) in enumerate(gathered):
        if other_digest != digest:
            keys = sorted(set(settings) | set(other_settings), key=str)
            key = next(key for key in keys if settings.get(key) != other_settings.get(key))
            raise ConfigError(
                f"distributed launch: {what} {key} is {settings.get(key)!r} in process {rank()} "
                f"but {other_settings.get(key)!r} in process {other}; give every process the same"
            )
