"""A run on several processes: ``bayesprune run --processes N`` starts them, as ``torchrun`` would, and
each process of a run (:mod:`bayesprune.core.distributed`) knows what it may write.

Every process runs the whole run; process 0 writes the run directory, the others write theirs into a
scratch directory removed when they finish, so ``--out`` is written once.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bayesprune.core import distributed
from bayesprune.core.checkpoint import state_digest
from bayesprune.core.errors import BayesPruneError
from bayesprune.core.loop import STOP
from bayesprune.pipeline.config import leaves

#: Seconds the other processes are given to stop on their own once one has failed.
GRACE = 10.0


def join(config, out: Path, *, force: bool, resumed_from=None):
    """Join the process group of a launch of several processes (nothing for one process) and refuse
    in one line a launch whose processes were given different settings, naming the key."""
    if not distributed.launched():
        return
    if config.experiment.name is not None:
        raise BayesPruneError(f"experiment {config.experiment.name} does not run on several processes; run it in one")
    distributed.start(config.device)
    settings = {f"config {key}": value for key, value in leaves(config.to_dict()).items()}
    settings.update({"--out": str(Path(out).resolve()), "--force": force, "--resume": str(resumed_from)})
    distributed.check_same(settings, "the")


@contextmanager
def own_directory(out: Path, resumed_from=None):
    """``(out, resumed_from)`` as this process writes and reads them: the run's own for process 0 (and
    a run on one process); for the others a scratch directory, and a copy of the directory resumed
    from, both removed on exit."""
    if distributed.rank() == 0:
        yield out, resumed_from
        return
    scratch = Path(tempfile.mkdtemp(prefix=f"bayesprune-process-{distributed.rank()}-"))
    try:
        copy = None
        if resumed_from is not None:
            copy = scratch / "resumed"
            shutil.copytree(resumed_from, copy)
        yield scratch / Path(out).name, copy
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def on_processes(processes, argv: list, run):
    """``bayesprune run``'s body on ``processes`` processes: ``run()`` here (one of a launch, or alone),
    its line printed by process 0 alone, the process group left afterwards; or, asked for several
    processes outside a launch, :func:`launch` them with ``argv``. Returns the launch's exit status,
    or ``None``."""
    check_processes(processes)
    if (processes or 1) > 1 and not distributed.launched():
        return launch(argv, processes)
    try:
        line = run()
        if distributed.rank() == 0:  # process 0 of several speaks for the run
            print(line)
    finally:
        distributed.stop()
    return None


def check_processes(processes):
    """Refuse a ``--processes`` that is not a positive count, or that disagrees with the launcher's."""
    if processes is None:
        return
    if processes < 1:
        raise BayesPruneError(f"--processes must be at least 1, got {processes}")
    launched = distributed.launched_size()
    under_launcher = "WORLD_SIZE" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ  # torchrun's, even of 1
    if under_launcher and processes != launched:
        raise BayesPruneError(
            f"--processes {processes} but the launcher started {launched} processes; under torchrun, leave it out"
        )


def launch(argv: list, processes: int) -> int:
    """Run ``bayesprune`` with ``argv`` in ``processes`` local processes, as ``torchrun --nproc_per_node``
    does, and return the exit status of the launch: process 0's, or the first failure of another.

    Process 0 prints to this terminal; the others print nothing unless one fails on its own (its last
    line is printed then). A signal to the launcher is passed to every process (each stops at the end
    of its training step, keeping the checkpoint); one process failing stops the others.
    """
    port = _free_port()
    logs = [tempfile.TemporaryFile() for _ in range(processes - 1)]
    workers = []
    for rank in range(processes):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(processes),
            "LOCAL_WORLD_SIZE": str(processes),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            # The package this process imported, not one the working directory holds (-P: cwd not on the path).
            "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
        }
        quiet = {} if rank == 0 else {"stdout": subprocess.DEVNULL, "stderr": logs[rank - 1]}
        workers.append(subprocess.Popen([sys.executable, "-P", "-m", "bayesprune", *argv], env=env, **quiet))
    forwarded, failed_at = None, None
    while any(worker.poll() is None for worker in workers):
        if STOP.signal is not None and forwarded is None:
            forwarded = STOP.signal
            for worker in workers:
                worker.send_signal(forwarded)
        if failed_at is None and any(worker.poll() not in (None, 0) for worker in workers):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE:
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGKILL)
        time.sleep(0.05)
    first = workers[0].returncode
    if first != 0:
        return first if first > 0 else 128 - first
    for rank, worker in enumerate(workers[1:], start=1):
        if worker.returncode != 0:
            logs[rank - 1].seek(0)
            lines = logs[rank - 1].read().decode(errors="replace").strip().splitlines() or ["(no message)"]
            print(f"bayesprune: error: process {rank} of {processes} failed: {lines[-1]}", file=sys.stderr)
            return 1
    return 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_same_fits(fits: list, method: str):
    """Refuse the fits of a run on several processes whose parameters differ between processes: a
    method whose training steps do not average their gradients
    (:func:`~bayesprune.core.distributed.average_gradients`). Batch-norm running statistics, which
    each process estimates on its share of the data, are left out of the comparison."""
    if not distributed.active():
        return
    states = [
        {key: value for key, value in leaves(fitted.state_dict()).items() if not key.endswith(BATCH_STATISTICS)}
        for fitted in fits
    ]
    try:
        distributed.check_same({"digest": state_digest(states)})
    except BayesPruneError:
        raise BayesPruneError(
            f"method {method!r} ended with different parameters in different processes: its training steps "
            "do not average their gradients over processes; run it on one process"
        ) from None


#: State-dict keys of the statistics a batch norm estimates from each process's own share of the data.
BATCH_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")
