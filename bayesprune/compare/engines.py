"""Engines: they only schedule cells (:func:`bayesprune.compare.cells.execute`), so every engine gives
the same numbers for the same seeds.

* ``local``: a pool of ``jobs`` worker processes (``spawn``), each with one torch thread.
* ``ray``: one Ray task per cell (one CPU each) on the cluster at ``address``, or on a local Ray
  started for the call when no address is given; needs the optional extra ``bayesprune[ray]``.
"""
import multiprocessing
import os
import signal
import socket
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from bayesprune.errors import BayesPruneError, Interrupted
from bayesprune.fit import STOP

from .cells import execute

ENGINES = ("local", "ray")


def check_engine(engine: str, *, jobs: int, address=None):
    """Refuse, before anything is written, an unknown engine, a bad ``jobs`` or a Ray that is missing."""
    if engine not in ENGINES:
        raise BayesPruneError(f"--engine must be one of {list(ENGINES)}, got {engine!r}")
    if not isinstance(jobs, int) or jobs < 1:
        raise BayesPruneError(f"--jobs must be a positive integer, got {jobs}")
    if address is not None and engine != "ray":
        raise BayesPruneError("--address names a Ray cluster; give it with --engine ray")
    if engine == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise BayesPruneError("--engine ray needs Ray: pip install 'bayesprune[ray]'") from None
        if address not in (None, "auto", "local"):
            _probe(address)


def _probe(address: str):
    """Refuse an address where nothing answers (Ray itself retries for minutes before giving up)."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError):
        raise BayesPruneError(f"--address {address}: no Ray cluster answers there (give host:port of its head)") from None


def run_cells(cells: list, folders: list, *, engine: str = "local", jobs: int = 1, address=None, report=print) -> list:
    """Execute every cell into its folder on ``engine``; returns their metrics in order.

    ``report(cell, metrics, done, total)`` is called as each cell finishes. After SIGINT or SIGTERM no
    further cell starts; cells in progress finish, and the call raises
    :class:`~bayesprune.errors.Interrupted` (the finished cells are kept for the next call).
    """
    check_engine(engine, jobs=jobs, address=address)
    if not cells:
        return []
    folders = [str(Path(folder).resolve()) for folder in folders]  # Ray's workers start elsewhere
    if engine == "ray":
        return _ray(cells, folders, address=address, report=report)
    return _local(cells, folders, jobs=jobs, report=report)


def _local(cells, folders, *, jobs: int, report) -> list:
    results = [None] * len(cells)
    # Workers inherit one thread for every library that reads it (BLAS, OpenMP) before they import torch.
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(cells)), mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_signals)
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    with pool:
        pending = {pool.submit(execute, cell, folder): index for index, (cell, folder) in enumerate(zip(cells, folders))}
        done = 0
        while pending:
            finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                index = pending.pop(future)
                results[index] = future.result()  # a cell's own error (a diverged fit) stops the grid
                done += 1
                report(cells[index], results[index], done, len(cells))
            if STOP.signal is not None:
                for future in pending:
                    future.cancel()
                for child in multiprocessing.active_children():  # the workers stop their fits at the end of a step
                    os.kill(child.pid, STOP.signal)
                raise Interrupted(f"stopped after {done} of {len(cells)} cells; the cells in progress keep their last "
                                  "checkpoint; run the same command again to continue", STOP.signal)
    return results


def _worker_signals():
    """In a worker, SIGINT and SIGTERM stop the fit in progress at the end of its step (as the command
    line does), so that its checkpoint is kept for the next call."""
    def request_stop(number, frame):
        STOP.signal = number

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, request_stop)


def _ray(cells, folders, *, address, report) -> list:
    import ray

    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError, … for a bad address
            message = " ".join(str(error).split())[:200]
            raise BayesPruneError(f"--address {address}: no Ray cluster answers ({type(error).__name__}: {message})") from None
    try:
        task = ray.remote(num_cpus=1)(execute)
        refs = {task.remote(cell, folder): index for index, (cell, folder) in enumerate(zip(cells, folders))}
        results = [None] * len(cells)
        done = 0
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
            for ref in ready:
                index = refs.pop(ref)
                results[index] = ray.get(ref)
                done += 1
                report(cells[index], results[index], done, len(cells))
            if STOP.signal is not None:
                for ref in refs:
                    ray.cancel(ref)
                raise Interrupted(f"stopped after {done} of {len(cells)} cells; run the same command again to continue",
                                  STOP.signal)
        return results
    finally:
        if started:
            ray.shutdown()


def progress_line(cell, metrics, done, total):
    """The default ``report``: one line per finished cell on stderr."""
    print(f"[{done}/{total}] {cell.name}", file=sys.stderr, flush=True)
