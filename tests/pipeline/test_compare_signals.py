"""A signal while compare's workers fit or start: compare and its workers end, with no hang and no traceback."""

import sys

import pytest

from helpers import start_compare


def _children(pid: int) -> list:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("number, when", [("SIGTERM", "fitting"), ("SIGTERM", "starting"), ("SIGKILL", "fitting")])
def test_a_signal_with_cells_pending_ends_compare_and_its_workers(tmp_path, number, when):
    """Two workers, four cells, a signal once the workers fit (or while they start): SIGTERM ends compare
    (143, one line, no hang, no traceback) and its workers; after SIGKILL of compare its workers end too
    (they die with their parent)."""
    import signal
    import time

    out = tmp_path / "cmp"
    options = ["--methods", "sbnn", "sparse-vd", "pft", "--sparsities", "0.5", "--jobs", "2"]
    process = start_compare(out, tmp_path, *options, settings=["train.epochs=400", "baseline.epochs=400"])
    deadline = time.time() + 120
    for line in process.stderr:  # the first progress line naming a cell being fitted, or the one before the pool
        if ("] fitting " if when == "fitting" else " to fit") in line or time.time() > deadline:
            break
    if when == "fitting":
        time.sleep(1)
    else:
        while not _children(process.pid) and time.time() < deadline:  # the first worker spawned, not yet started
            time.sleep(0.01)
    workers = _children(process.pid)
    assert workers, "no worker started"
    process.send_signal(getattr(signal, number))
    _, error = process.communicate(timeout=60)
    assert process.returncode == (143 if number == "SIGTERM" else -signal.SIGKILL), error
    if number == "SIGTERM":
        ends = [line for line in error.splitlines() if not line.startswith("bayesprune: [")]  # after the progress lines
        assert len(ends) == 1 and ends[0].startswith("bayesprune: interrupted:") and "Traceback" not in error, error
    deadline = time.time() + 30
    while any(_alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)


def test_a_worker_signalled_while_it_started_begins_no_cell(tmp_path, monkeypatch):
    """A SIGTERM held while a worker starts is handled once it is ready: its cells stop before their data
    is loaded or their network built (a magnitude cell used to load the data and train an epoch first)."""
    import signal

    from bayesprune.core.errors import Interrupted
    from bayesprune.core.loop import STOP
    from bayesprune.pipeline import checks
    from bayesprune.pipeline.compare.cells import Cell, execute
    from bayesprune.pipeline.config import load_config

    def never(*args, **kwargs):
        raise AssertionError("the cell loaded its data")

    monkeypatch.setattr(checks, "load_datasets", never)
    config = load_config("default", ["train.epochs=1", "baseline.epochs=1"]).to_dict()
    STOP.signal = signal.SIGTERM
    try:
        for method in ("magnitude", "sbnn"):
            cell = Cell(method, {**config, "method": method}, method, seed=0, sparsities=(0.5,))
            with pytest.raises(Interrupted, match="before the cell started"):
                execute(cell, str(tmp_path / method))
    finally:
        STOP.signal = None
    assert not any(tmp_path.iterdir())
