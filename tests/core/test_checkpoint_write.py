"""A checkpoint that cannot be written (a full disk: torch.save raises) and memory torch's allocator cannot
give: one line from the command line, never a traceback, and the previous checkpoint kept."""

import pytest
import torch

from bayesprune.cli import main
from bayesprune.core import checkpoint
from bayesprune.core.errors import BayesPruneError

FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 700724736 vs 700724636"


def test_a_failed_write_keeps_the_previous_checkpoint_and_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    checkpoint.write_checkpoint(path, method="sbnn", state={"w": torch.ones(3)})

    def full_disk(value, file):
        with open(file, "wb") as handle:
            handle.write(b"partial")
        raise RuntimeError(FULL_DISK)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(BayesPruneError, match="checkpoint.pt: the checkpoint could not be written .*disk full"):
        checkpoint.write_checkpoint(path, method="sbnn", state={"w": torch.zeros(3)})
    monkeypatch.undo()
    assert torch.equal(checkpoint.read_checkpoint(path)["state"]["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no partial file left


ALLOCATOR = "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: 210280668 bytes"


@pytest.mark.parametrize(
    "where, error, said",
    [
        ("bayesprune.core.checkpoint.torch.save", FULL_DISK, "disk full"),
        ("bayesprune.pipeline.runner._evaluate", ALLOCATOR, "out of memory"),
    ],
)
def test_the_command_line_says_it_in_one_line(where, error, said, tmp_path, capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError(error)

    monkeypatch.setattr(where, fail)
    status = main(["run", "default", "--out", str(tmp_path / "run"), "--quiet", "--set", "train.epochs=1"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and said in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
