"""``bayesprune export`` stopped by SIGINT or SIGTERM (the reported case: ``--repeats 10000`` went on, wrote
every file and exited 0): exit status 130 or 143, one line, and nothing written beside ``--out``, neither
the files nor their hidden partial copies. The signal is sent for real, to this process, while the export
times its networks."""

import os
import signal

import pytest

from bayesprune.cli import main
from bayesprune.core import export as core_export


@pytest.mark.parametrize("formats", [["pt2"], ["pt2", "onnx"]], ids=["pt2", "onnx"])
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_export_stops_it_with_nothing_written(
    number, formats, tmp_path, monkeypatch, capsys, complete_run
):
    if "onnx" in formats:
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    original, calls = core_export.measure_latency, []

    def signalled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), number)
        return original(*args, **kwargs)

    monkeypatch.setattr(core_export, "measure_latency", signalled)
    out = tmp_path / "out"
    out.mkdir()
    status = main(
        ["export", str(complete_run), "--out", str(out / "net.pt2"), "--repeats", "10000", "--format", *formats]
    )
    err = capsys.readouterr().err
    assert status == 128 + number and err.count("\n") == 1 and "interrupted" in err, err
    assert list(out.iterdir()) == [] and len(calls) == 1


def test_without_a_signal_the_same_export_writes_its_files(tmp_path, capsys, complete_run):
    """The control: the export the signal stopped writes the .pt2 and the trainable file, and only those."""
    assert main(["export", str(complete_run), "--out", str(tmp_path / "net.pt2"), "--repeats", "2"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["net.pt2", "net.trainable.pt"]
