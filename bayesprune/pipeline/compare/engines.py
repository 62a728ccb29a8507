"""Engines: they only schedule cells (:func:`bayesprune.pipeline.compare.cells.execute`), so every engine gives
the same numbers for the same seeds. Cells of one method that differ only in their seed, where the method
fits several together (:func:`~bayesprune.pipeline.compare.cells.together_key`), are one task, trained as
one stacked model (:func:`~bayesprune.pipeline.compare.cells.execute_together`); a task whose cells cannot
train together is split into one task a cell.

* ``local``: a pool of ``jobs`` worker processes (``spawn``), each with one torch thread.
* ``ray``: one Ray task per cell (one CPU each) on the cluster at ``address``, or on a local Ray
  started for the call when no address is given; needs the optional extra ``bayesprune[ray]``.
"""

import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from pathlib import Path

from bayesprune.core.errors import BayesPruneError, Interrupted
from bayesprune.core.loop import STOP
from bayesprune.pipeline.compare.cells import (
    complete,
    execute,
    execute_together,
    failure,
    finished,
    read_json,
    together_key,
)
from bayesprune.pipeline.compare.ray_head import check_address, started

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
        check_address(address)


def engine_started(engine: str, address=None):
    """The engine started for a block (a context manager): Ray started or reached at ``address``
    (:func:`~bayesprune.pipeline.compare.ray_head.started`), before a grid writes anything; nothing to
    start for the local engine (its workers start with the cells)."""
    return started(address) if engine == "ray" else nullcontext()


def run_tracked(cells: list, folders: list, tracker, *, engine: str, jobs: int, alone: bool, report, status) -> list:
    """:func:`run_cells` as ``compare`` and ``sweep`` run their grid: each finished cell also logged by ``tracker``
    (:func:`~bayesprune.pipeline.compare.tracking.open_tracker`; ``None``: not tracked)."""
    if tracker is not None:
        report = tracker.reporter(report or (lambda *args: None))
    return run_cells(cells, folders, engine=engine, jobs=jobs, alone=alone, report=report, status=status)


def run_cells(
    cells: list, folders: list, *, engine: str = "local", jobs: int = 1, alone: bool = False, report=None, status=None
) -> list:
    """Execute every cell into its folder on ``engine``, which the caller has checked (:func:`check_engine`) and,
    for Ray, started (:func:`engine_started`: ``compare`` and ``sweep`` reach it before they write anything);
    returns their metrics in order.

    A finished cell is read back, never fitted again (one evaluated at every sparsity is evaluated at
    those it lacks, from its saved fit). Cells of one method that differ only in their seed train together
    (:func:`_tasks`) unless ``alone``. A cell whose fit fails (it diverges, the user's
    network raises) does not stop the others: its result is ``{"failed": "<why>"}`` and its folder
    keeps what the fit left for the next call. ``report(cell, metrics, done, total)`` is called as each
    cell finishes; ``status(line)`` gets the progress (default: a line on stderr per cell: cells done,
    those running and an estimate of the time left). After SIGINT or SIGTERM no further cell starts;
    cells in progress stop at the end of their step, keeping their checkpoint, and the call raises
    :class:`~bayesprune.core.errors.Interrupted` (the finished cells are kept for the next call).
    """
    progress = Progress(cells, status or to_stderr, workers=jobs)
    results = [None] * len(cells)
    todo = []
    for index, (cell, folder) in enumerate(zip(cells, folders)):
        if complete(cell, folder):
            results[index] = read_json(Path(folder) / "metrics.json")
        else:
            todo.append(index)
    progress.start(len(cells) - len(todo), again=sum(finished(folders[index]) for index in todo))

    def finish(index, metrics):
        results[index] = metrics
        progress.finished(cells[index], metrics)
        if report is not None:
            report(cells[index], metrics, progress.done, len(cells))

    if todo:
        # absolute, never resolved: a folder is never reached through a link (Ray's workers start elsewhere)
        tasks = _tasks([(index, cells[index], os.path.abspath(folders[index])) for index in todo], alone=alone)
        if engine == "ray":
            _ray(tasks, finish=finish, progress=progress)
        else:
            _local(tasks, jobs=jobs, finish=finish, progress=progress)
    return results


def _tasks(chosen: list, *, alone: bool = False) -> list:
    """``chosen`` (``(index, cell, folder)``) as tasks: the cells of one :func:`together_key` together (in
    the order of their first), every other cell alone (``alone``: every cell)."""
    tasks, groups = [], {}
    for entry in chosen:
        key = None if alone else together_key(entry[1], entry[2])
        if key is None:
            tasks.append([entry])
        elif key in groups:
            groups[key].append(entry)
        else:
            groups[key] = [entry]
            tasks.append(groups[key])
    return tasks


def execute_task(cells: list, folders: list) -> list | None:
    """What a worker runs for a task: its cells' metrics (``None``: they could not train together)."""
    if len(cells) == 1:
        return [execute(cells[0], folders[0])]
    return execute_together(cells, folders)


def _settle(task: list, results, *, finish, submit):
    """Hand each cell's result of a finished ``task`` to ``finish``; a task whose cells could not train
    together (``results`` is ``None``) is submitted again as one task a cell."""
    if results is None:
        for entry in task:
            submit([entry])
        return
    for (index, _, _), metrics in zip(task, results):
        finish(index, metrics)


#: Seconds a worker is given to stop at the end of its step after SIGINT or SIGTERM before it is killed.
STOP_GRACE = 60


def _local(tasks, *, jobs: int, finish, progress):
    cells = sum(len(task) for task in tasks)
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, cells),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_start,
        initargs=(os.getpid(),),
    )
    pending, workers = {}, set()

    def submit(task):
        with _starting_workers():  # the pool starts its workers as tasks come
            future = pool.submit(execute_task, [cell for _, cell, _ in task], [folder for _, _, folder in task])
        pending[future] = task
        workers.update(multiprocessing.active_children())

    try:
        for task in tasks:
            submit(task)
        while pending:
            progress.running([task for future, task in pending.items() if future.running()])
            ready, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in ready:
                task = pending.pop(future)
                try:
                    results = future.result()
                except Interrupted:
                    continue  # the worker saw the signal first; the loop below reports it
                except BrokenProcessPool as error:  # a worker killed (out of memory, SIGKILL): no cell runs further
                    raise BayesPruneError(
                        f"a worker of the local engine died ({error}); finished cells are kept, "
                        "run the same command again to continue"
                    ) from None
                except Exception as error:  # noqa: BLE001 - a cell's own failure is recorded, the others go on
                    results = [failure(error)] * len(task)
                _settle(task, results, finish=finish, submit=submit)
            if STOP.signal is not None:
                raise Interrupted(
                    f"stopped after {progress.done} of {progress.total} cells; the cells in progress keep "
                    "their last checkpoint; run the same command again to continue",
                    STOP.signal,
                )
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        _stop_workers(workers, STOP.signal or signal.SIGTERM)
        raise
    pool.shutdown()


@contextmanager
def _starting_workers():
    """Workers started inside inherit one thread for every library that reads it (BLAS, OpenMP) before they
    import torch, and start with SIGINT and SIGTERM blocked until their handlers are in place
    (:func:`_worker_start`): a signal while they start is held, never a worker killed half-started."""
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = previous


def _stop_workers(workers, number):
    """Ask the workers still alive to stop at the end of their step (``number``), then end them: the
    pool is never left waiting on a fit that no one will read."""
    alive = [worker for worker in workers if worker.is_alive()]
    for worker in alive:
        try:
            os.kill(worker.pid, number)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE
    for worker in alive:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join(5)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _worker_start(parent: int):
    """In a worker: SIGINT and SIGTERM stop the fit in progress at the end of its step (as the command
    line does), so that its checkpoint is kept for the next call; the worker is killed when its parent
    dies (Linux: ``PR_SET_PDEATHSIG``), so that a compare killed with SIGKILL leaves no fit running (the
    fit's checkpoint of its last epoch, written atomically, is what the next call continues from)."""

    def request_stop(number, frame):
        STOP.signal = number

    for number in STOP_SIGNALS:
        signal.signal(number, request_stop)
    from bayesprune.core.process_exit import exit_without_collection

    exit_without_collection()  # the pool's shutdown waits for the workers' exit
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _ray(tasks, *, finish, progress):
    """One Ray task per task of cells on the Ray started for the call (:func:`engine_started`)."""
    import ray

    remote = ray.remote(num_cpus=1)(execute_task)
    refs = {}

    def submit(task):
        refs[remote.remote([cell for _, cell, _ in task], [folder for _, _, folder in task])] = task

    for task in tasks:
        submit(task)
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
        for ref in ready:
            task = refs.pop(ref)
            try:
                results = ray.get(ref)
            except ray.exceptions.TaskCancelledError:
                continue
            except Exception as error:  # noqa: BLE001 - a cell's own failure is recorded, the others go on
                results = [failure(getattr(error, "cause", None) or error)] * len(task)
            _settle(task, results, finish=finish, submit=submit)
        if STOP.signal is not None:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise Interrupted(
                f"stopped after {progress.done} of {progress.total} cells; run the same command again to continue",
                STOP.signal,
            )


def to_stderr(line: str):
    """A progress line on stderr, at once (the default of every ``status``)."""
    print(line, file=sys.stderr, flush=True)


class Progress:
    """The progress of a grid in lines: cells done of all, the cells running, and the time left
    estimated from the cells finished in this call (wall-clock seconds per cell, so parallel
    workers are counted)."""

    def __init__(self, cells, status, workers: int):
        self.total, self.status, self.workers = len(cells), status, workers
        self.done = self.fitted = 0
        self.start_time = time.monotonic()
        self.current = ()

    def start(self, read_back: int, again: int = 0):
        """``read_back`` cells complete, ``again`` fitted earlier but evaluated again (at sparsities they lack)."""
        self.done = read_back
        left = self.total - read_back - again
        evaluated = f"{again} to evaluate again from their saved fits, " if again else ""
        self.status(
            f"bayesprune: {self.total} cells, {read_back} finished earlier (read back), {evaluated}{left} to fit"
        )

    def running(self, tasks):
        """``tasks`` (lists of ``(index, cell, folder)``) the pool marks running: one more than it runs, queued."""
        names = tuple(cell.name for task in tasks[: self.workers] for _, cell, _ in task)
        if names and names != self.current:
            self.current = names
            self.status(f"bayesprune: [{self.done}/{self.total}] fitting {', '.join(names)}")

    def finished(self, cell, metrics):
        self.done += 1
        self.fitted += 1
        elapsed = time.monotonic() - self.start_time
        left = self.total - self.done
        estimate = f"about {_duration(elapsed / self.fitted * left)} left" if left else "all done"
        outcome = f"failed: {metrics['failed']}" if "failed" in metrics else "done"
        self.status(
            f"bayesprune: [{self.done}/{self.total}] {cell.name} {outcome} ({_duration(elapsed)} so far; {estimate})"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
