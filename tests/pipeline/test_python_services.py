"""export, certify and report called from Python give what the command line gives on the same run: the
command line is the oracle (same files, same numbers, same one-line refusal)."""

import json
from pathlib import Path

import pytest
import torch

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.errors import BayesPruneError
from bayesprune.pipeline.runner import run

#: Entries of export's report that differ between two calls on the same run: timings and the paths written.
UNEQUAL = ("file", "trainable_file", "latency_seconds")


@pytest.fixture(scope="module")
def pbp_run(tmp_path_factory, short_config):
    """A short PBP run: it has scores, a median probability model and a certificate."""
    out = tmp_path_factory.mktemp("services") / "run"
    run(short_config("pbp", "baseline.enabled=false"), out)
    return out


def _cli(capsys, *argv) -> tuple:
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _comparable(report: dict) -> dict:
    """``report`` without what two calls cannot share (timings, paths)."""
    return {
        key: _comparable(value) if isinstance(value, dict) else value
        for key, value in report.items()
        if key not in UNEQUAL
    }


def test_export_from_python_writes_the_file_and_numbers_the_command_line_does(pbp_run, tmp_path, capsys):
    status, out, _ = _cli(
        capsys,
        "export",
        pbp_run,
        "--out",
        tmp_path / "cli.pt2",
        "--budget",
        "sparsity=0.5",
        "--budget",
        "min_keep=1",
        "--json",
        "--repeats",
        1,
    )
    assert status == 0
    expected = json.loads(out)
    exported = bp.export(
        pbp_run, out=tmp_path / "api.pt2", budget=bp.Budget(sparsity=0.5, level="unit", min_keep=1), repeats=1
    )
    assert _comparable(exported.report) == _comparable(expected)
    assert exported.report["file"] == str(tmp_path / "api.pt2")
    x = torch.randn(16, 1, 8, 8)
    with torch.no_grad():
        ours, theirs = (torch.export.load(str(tmp_path / name)).module()(x) for name in ("api.pt2", "cli.pt2"))
    assert torch.equal(ours, theirs)
    assert (tmp_path / "api.trainable.pt").is_file() == (tmp_path / "cli.trainable.pt").is_file()


def test_export_from_python_prints_nothing_and_its_summary_is_the_command_lines(pbp_run, tmp_path, capsys):
    status, out, _ = _cli(capsys, "export", pbp_run, "--out", tmp_path / "net.pt2", "--repeats", 1)
    assert status == 0
    exported = bp.export(pbp_run, out=tmp_path / "net.pt2", repeats=1, force=True)
    assert capsys.readouterr().out == ""
    timed = ("latency",)  # the only lines whose numbers are measured again
    assert [line for line in exported.summary() if not line.startswith(timed)] == [
        line for line in out.splitlines() if not line.startswith(timed)
    ]


@pytest.mark.parametrize("out, word", [("folder", "--out"), ("mine.pt2", "--force"), ("missing/net.pt2", "missing")])
def test_export_from_python_refuses_what_the_command_line_refuses_with_the_same_line(
    pbp_run, tmp_path, capsys, out, word
):
    (tmp_path / "folder").mkdir()
    (tmp_path / "mine.pt2").write_text("mine")
    status, _, err = _cli(capsys, "export", pbp_run, "--out", tmp_path / out, "--repeats", 1)
    assert status == 2
    with pytest.raises(BayesPruneError) as refused:
        bp.export(pbp_run, out=tmp_path / out, repeats=1)
    assert err == f"bayesprune: error: {refused.value}\n" and word in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder", "mine.pt2"]  # nothing written by either
    assert (tmp_path / "mine.pt2").read_text() == "mine"


def test_export_of_a_python_fit_writes_a_file_whose_error_is_the_reported_one(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    fitted = bp.fit_method("sparse-vd", net, (x, y), epochs=2, batch_size=32)
    exported = bp.export(fitted, data=(x, y), out=tmp_path / "net.pt2", repeats=1)
    with torch.no_grad():
        predicted = torch.export.load(str(tmp_path / "net.pt2")).module()(x).argmax(-1)
    assert exported.report["test_error"] == pytest.approx(100 * (predicted != y).float().mean().item())
    with pytest.raises(BayesPruneError, match=r"^data: "):
        bp.export(fitted, out=tmp_path / "again.pt2")


def test_certify_from_python_gives_the_command_lines_certificate(pbp_run, capsys):
    torch.manual_seed(1)
    status, out, _ = _cli(capsys, "certify", pbp_run, "--samples", 5, "--json")
    assert status == 0
    torch.manual_seed(1)
    assert bp.certify(pbp_run, samples=5) == json.loads(out)
    with pytest.raises(BayesPruneError) as refused:
        bp.certify(pbp_run, samples=0)
    assert _cli(capsys, "certify", pbp_run, "--samples", 0)[2] == f"bayesprune: error: {refused.value}\n"


def test_report_from_python_writes_the_command_lines_report(pbp_run, tmp_path, capsys):
    assert _cli(capsys, "report", pbp_run)[0] == 0
    expected = (pbp_run / "report.md").read_text()
    (pbp_run / "report.md").unlink()
    assert bp.report(pbp_run) == pbp_run / "report.md"
    assert (pbp_run / "report.md").read_text() == expected
    with pytest.raises(BayesPruneError) as refused:
        bp.report(tmp_path)
    assert _cli(capsys, "report", tmp_path)[2] == f"bayesprune: error: {refused.value}\n"


def test_the_command_line_is_argument_parsing_only():
    """Issue 36: the services live in the pipeline; ``cli.py`` parses arguments and calls them (the bound
    grew from 250 with this round's flags: export --finetune-epochs, compare/sweep --quiet)."""
    lines = len((Path(bp.__file__).parent / "cli.py").read_text().splitlines())
    assert lines < 260, f"bayesprune/cli.py has {lines} lines"


def test_importance_from_python_writes_the_files_and_lines_of_the_command_line(pbp_run, capsys):
    names = ("importance.csv", "node_importance.csv", "selection.json")
    status, out, _ = _cli(capsys, "importance", pbp_run, "--fdr", 0.2, "--top", 5, "--force")
    assert status == 0
    expected = {name: (pbp_run / name).read_text() for name in names}
    for name in names:
        (pbp_run / name).unlink()
    result = bp.importance(pbp_run, fdr=0.2, top=5, force=True)
    assert capsys.readouterr().out == ""
    assert {name: (pbp_run / name).read_text() for name in names} == expected
    assert result.summary() == out.splitlines()
    # NaN (a stability number of too few restarts) is not equal to itself: compared as written
    assert json.dumps(result.selection, sort_keys=True) == json.dumps(
        json.loads(expected["selection.json"]), sort_keys=True
    )
    with pytest.raises(BayesPruneError) as refused:
        bp.importance(pbp_run)  # the files exist, without force
    assert _cli(capsys, "importance", pbp_run)[2] == f"bayesprune: error: {refused.value}\n"
