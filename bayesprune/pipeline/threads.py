"""The torch thread count of a command: as many intra-op threads as there are idle cores, less one.

PyTorch's default (one thread per core) collapses when another process holds a core: every
parallel operation waits at its barrier for the thread that is not running. Measured on 2 cores
with another process spinning on one (the default run at 20 epochs; ``python
benchmarks/threads.py`` repeats it): 2 threads took 266 and 142 s in two rounds, 1 thread 72 s.
So the default is every core this process may run on, less those busy now (other runnable tasks,
from ``/proc/loadavg``), less one left free for a process that starts later, and at least one:
one thread on a two-core machine, 15 on an idle 16-core one. ``--threads N`` (or ``OMP_NUM_THREADS``) sets the count instead; the compare and sweep
engines pin each worker to one thread themselves.
"""

import os

import torch

from bayesprune.core.errors import ConfigError

#: The most threads ``--threads`` takes.
MAX_THREADS = 1024


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def busy_cores() -> int:
    """Other tasks runnable now (``/proc/loadavg``'s running count less this one); 0 where unknown."""
    try:
        with open("/proc/loadavg") as file:
            running = int(file.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - 1)


def default_threads(cores: int, busy: int) -> int:
    """``cores`` less the ``busy`` ones less one spare, at least one."""
    return max(1, min(cores - 1, cores - busy))


def set_threads(requested: int | None = None) -> int:
    """Set torch's intra-op threads once, at a command's start: ``requested``, else
    ``OMP_NUM_THREADS`` when the user set it, else :func:`default_threads`; returns the count."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or not 1 <= requested <= MAX_THREADS:
            raise ConfigError(f"--threads must be an integer from 1 to {MAX_THREADS}, got {requested!r}")
        threads = requested
    elif os.environ.get("OMP_NUM_THREADS", "").strip():
        return torch.get_num_threads()  # torch read it when it started
    else:
        threads = default_threads(available_cores(), busy_cores())
    torch.set_num_threads(threads)
    return threads
