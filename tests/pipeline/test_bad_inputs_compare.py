"""Bad inputs of ``compare`` and ``sweep`` (and of ``run --resume``), answered as every bad input is:
one line naming the field or file, exit status 2, no traceback, nothing changed (the harness of
:mod:`test_bad_inputs`: ``(files, argv, named)`` rows). A finished comparison (``CMP``) or sweep
(``SWEEP``) is copied into the working folder and then tampered with: cell folders or ``cells/``
replaced by links or files, unparseable or mistyped ``metrics.json``, ``config.toml``, ``sweep.toml``,
an edited ``comparison.toml`` or cell ``config.toml``; every such case is refused before anything is
fitted, never followed, never written through.

Beside the table: a comparison in which two methods refuse the network names both, one line each,
before any fit; ``run --resume`` of a run whose ``config.toml`` was edited is refused naming the key.
(A Ray address where no Ray head answers: test_ray_address.py.)
"""

import io
import json
import os
import pickle
import shutil
import signal
import time
import tomllib

import pytest
import tomli_w
import torch

from bayesprune.cli import main
from bayesprune.core.loop import STOP
from test_bad_inputs import DIR, RUN, _build, _tree

CMP, SWEEP, GONE = "<complete comparison>", "<complete sweep>", "<removed>"
TINY = [
    "--set",
    "train.epochs=1",
    "--set",
    "baseline.epochs=1",
    "--set",
    "compare.finetune_epochs=1",
    "--set",
    "compare.latency_repeats=2",
]
NEW = ["compare", "--out", "new", "--methods", "sbnn", "--sparsities", "0.5", *TINY]
RESUME = ["compare", "--resume", "cmp"]

pytestmark = pytest.mark.usefixtures("cells_in_this_process")  # every refusal comes before the engine's workers


def edit_json(change):
    """Content made from the file already there (JSON), changed by ``change(value)``."""

    def edited(path):
        value = json.loads(path.read_text())
        change(value)
        return json.dumps(value)

    return edited


def replace_text(old, new):
    def edited(path):
        text = path.read_text()
        assert old in text, (path, old)
        return text.replace(old, new)

    return edited


def edit_toml(section, key, value):
    """Content made from the TOML file already there, ``[section] key`` set to ``value``."""

    def edited(path):
        config = tomllib.loads(path.read_text())
        config.setdefault(section, {})[key] = value
        return tomli_w.dumps(config)

    return edited


def _pop(key):
    return lambda value: value.pop(key)


def _curve_text(value):
    value["pruning_curve"][0]["test_error"] = "low"


def _seeds_text(value):
    value["seeds"] = "all"


MAGNITUDE_CELL, SBNN_CELL = "cmp/cells/magnitude-seed0", "cmp/cells/sbnn-seed0"


class _Planted:
    """Unpickled, it would make a folder ``pwned`` (the harness sees any change in the working folder)."""

    def __reduce__(self):
        return (os.mkdir, ("pwned",))


MALICIOUS = pickle.dumps(_Planted())


def _other_network(path):
    """The checkpoint at ``path`` holding another network's state dict (the rest as saved)."""
    saved = torch.load(path, weights_only=True)
    saved["state"]["net"] = {"x": torch.zeros(3)}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    return buffer.getvalue()


def _state_dict_bytes(net) -> bytes:
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    return buffer.getvalue()


#: The weights of another network than the comparison's (64-50-10 where it builds 64-100-10).
OTHER_WEIGHTS = _state_dict_bytes(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 50)))
#: Three methods (the baseline among them): a refusal of the config's own key is one line, not one per method.
METHODS = ["compare", "--out", "new", "--methods", "sbnn", "sparse-vd", "--sparsities", "0.5", *TINY]

CASES = {
    # cell folders and cells/ that are links or files: never followed, never written through
    "cells/ a link to a folder outside": (
        {"cmp": CMP, "elsewhere": DIR, "cmp/cells": GONE, "cmp/cells ": ("link", "../elsewhere")},
        RESUME,
        "cells",
    ),
    "cells/ a file": ({"cmp": CMP, "cmp/cells": GONE, "cmp/cells ": "not a folder"}, RESUME, "cells"),
    "a cell folder a link to another run": (
        {"cmp": CMP, "done": RUN, SBNN_CELL: GONE, SBNN_CELL + " ": ("link", "../../done")},
        RESUME,
        "sbnn-seed0",
    ),
    "a cell folder a link to nowhere": (
        {"cmp": CMP, SBNN_CELL: GONE, SBNN_CELL + " ": ("link", "/nonexistent/cell")},
        RESUME,
        "sbnn-seed0",
    ),
    "a cell a file": ({"cmp": CMP, MAGNITUDE_CELL: GONE, MAGNITUDE_CELL + " ": "a file"}, RESUME, "magnitude-seed0"),
    "comparison.toml a link": (
        {
            "cmp": CMP,
            "elsewhere.toml": "[compare]\n",
            "cmp/comparison.toml": GONE,
            "cmp/comparison.toml ": ("link", "../elsewhere.toml"),
        },
        RESUME,
        "comparison.toml",
    ),
    "sweep cells/ a link": (
        {"swp": SWEEP, "elsewhere": DIR, "swp/cells": GONE, "swp/cells ": ("link", "../elsewhere")},
        ["sweep", "--resume", "swp"],
        "cells",
    ),
    # tampered cell files: one line naming the file
    "metrics.json not JSON": ({"cmp": CMP, SBNN_CELL + "/metrics.json": "{not json"}, RESUME, "metrics.json"),
    "metrics.json a list": ({"cmp": CMP, SBNN_CELL + "/metrics.json": "[1, 2]"}, RESUME, "metrics.json"),
    "metrics.json not UTF-8": ({"cmp": CMP, SBNN_CELL + "/metrics.json": b"\xff\xfe{"}, RESUME, "metrics.json"),
    "metrics.json without its curve": (
        {"cmp": CMP, SBNN_CELL + "/metrics.json": edit_json(_pop("pruning_curve"))},
        RESUME,
        "pruning_curve",
    ),
    "metrics.json with a text error": (
        {"cmp": CMP, SBNN_CELL + "/metrics.json": edit_json(_curve_text)},
        RESUME,
        "test_error",
    ),
    "metrics.json without its task": (
        {"cmp": CMP, SBNN_CELL + "/metrics.json": edit_json(_pop("task"))},
        RESUME,
        "task",
    ),
    "magnitude metrics.json without its rows": (
        {"cmp": CMP, MAGNITUDE_CELL + "/metrics.json": edit_json(_pop("pruning_curve"))},
        RESUME,
        "pruning_curve",
    ),
    "magnitude config.toml not TOML": ({"cmp": CMP, MAGNITUDE_CELL + "/config.toml": "]["}, RESUME, "config.toml"),
    "a cell's checkpoint a malicious pickle, read to evaluate a sparsity added": (
        {"cmp": CMP, MAGNITUDE_CELL + "/checkpoint.pt": MALICIOUS},
        [*RESUME, "--sparsities", "0.5", "0.9"],
        "checkpoint.pt: holds a pickled object, not a checkpoint, or another file (never unpickled)",
    ),
    "a cell's checkpoint another cell's fit, read to evaluate a sparsity added": (
        {
            "cmp": CMP,
            MAGNITUDE_CELL + "/checkpoint.pt": lambda path: (path.parents[1] / "sbnn-seed0" / path.name).read_bytes(),
        },
        [*RESUME, "--sparsities", "0.5", "0.9"],
        "checkpoint.pt: saved by method 'sbnn'",
    ),
    "a cell's checkpoint holding another network, read to evaluate a sparsity added": (
        {"cmp": CMP, MAGNITUDE_CELL + "/checkpoint.pt": _other_network},
        [*RESUME, "--sparsities", "0.5", "0.9"],
        "checkpoint.pt: not the fit metrics.json records",
    ),
    "run --resume with seeds/ a link to a forged seed record": (
        {
            "r": RUN,
            "r/metrics.json": None,
            "forged/seed-0.json": '{"method": "sbnn"}',
            "r/seeds": ("link", "../forged"),
        },
        ["run", "--resume", "r", "--quiet"],
        "seed-0.json",
    ),
    "run --resume with a forged seed record": (
        {"r": RUN, "r/metrics.json": None, "r/seeds/seed-0.json": '{"method": "sbnn", "task": "classification"}'},
        ["run", "--resume", "r", "--quiet"],
        "seed-0.json",
    ),
    "magnitude config.toml of another fine-tuning": (
        {"cmp": CMP, MAGNITUDE_CELL + "/config.toml": edit_toml("prune", "finetune_epochs", 99)},
        RESUME,
        "prune.finetune_epochs",
    ),
    "magnitude config.toml a link": (
        {
            "cmp": CMP,
            "other.toml": "",
            MAGNITUDE_CELL + "/config.toml": GONE,
            MAGNITUDE_CELL + "/config.toml ": ("link", "../../../other.toml"),
        },
        RESUME,
        "config.toml",
    ),
    # edited configs: refused naming the key, a finished cell never refitted from another config
    "comparison.toml with other epochs": (
        {"cmp": CMP, "cmp/comparison.toml": edit_toml("train", "epochs", 2)},
        RESUME,
        "train.epochs",
    ),
    "comparison.toml not TOML": ({"cmp": CMP, "cmp/comparison.toml": "[compare\n"}, RESUME, "comparison.toml"),
    "a cell's config.toml with another learning rate": (
        {"cmp": CMP, SBNN_CELL + "/config.toml": edit_toml("optim", "lr", 0.5)},
        RESUME,
        "optim.lr",
    ),
    "sweep.toml not TOML": ({"swp": SWEEP, "swp/sweep.toml": "grid = ["}, ["sweep", "--resume", "swp"], "sweep.toml"),
    "sweep.toml without its grid": (
        {"swp": SWEEP, "swp/sweep.toml": replace_text("[grid]", "[nogrid]")},
        ["sweep", "--resume", "swp"],
        "grid",
    ),
    "sweep.toml with text seeds": (
        {"swp": SWEEP, "swp/sweep.toml": replace_text("seeds = [\n    0,\n]", 'seeds = "all"')},
        ["sweep", "--resume", "swp"],
        "seeds",
    ),
    # --resume keeps the grid's config
    "compare --resume with --set": ({"cmp": CMP}, [*RESUME, "--set", "train.epochs=2"], "--set"),
    "sweep --resume with --grid": ({"swp": SWEEP}, ["sweep", "--resume", "swp", "--grid", "optim.lr=0.1"], "--grid"),
    # numbers without a practical bound, keys that would be ignored
    "latency repeats 10**9": ({}, [*NEW, "--set", "compare.latency_repeats=1000000000"], "compare.latency_repeats"),
    "latency batch 10**9": ({}, [*NEW, "--set", "compare.latency_batch=1000000000"], "compare.latency_batch"),
    "fine-tuning 10**12 epochs": (
        {},
        [*NEW, "--set", "compare.finetune_epochs=1000000000000"],
        "compare.finetune_epochs",
    ),
    "an empty list of methods": ({}, [*NEW, "--set", "compare.methods=[]"], "compare.methods"),
    "budget of 0 epochs": ({}, [*NEW, "--set", "compare.budget_epochs=0"], "compare.budget_epochs"),
    "budget below a method's stages": (
        {},
        ["compare", "--out", "new", "--methods", "pft", "--set", "compare.budget_epochs=2"],
        "compare.budget_epochs",
    ),
    "budget and train.steps": (
        {},
        [*NEW, "--set", "compare.budget_epochs=4", "--set", "train.steps=10"],
        "train.steps",
    ),
    "another method's config in compare.configs": (
        {},
        [*NEW, "--set", "compare.configs={sbnn = 'pbp-digits'}"],
        "compare.configs must map each method to a config of its own (sbnn = 'pbp-digits' is pbp's)",
    ),
    "unknown config in compare.configs": (
        {},
        [*NEW, "--set", "compare.configs={sbnn = 'nonesuch'}"],
        "compare.configs must be a table of method = packaged config",
    ),
    "certify 10**6 networks": ({"done": RUN}, ["certify", "done", "--samples", "1000000"], "--samples"),
    # refusals of the run's own checks, before any fit
    "a method that refuses the network": (
        {},
        ["compare", "--out", "new", "--methods", "unit-gates", "--set", "model.hidden=[]"],
        "unit-gates",
    ),
    # the same refusal of every method's cells: one line
    "a weights file of another network, every method": (
        {"other.pt": OTHER_WEIGHTS},
        [*METHODS, "--set", "model.weights='other.pt'"],
        "model.weights: ",
    ),
    "a pickled object as the weights file, every method": (
        {"net.pt": MALICIOUS},
        [*METHODS, "--set", "model.weights='net.pt'"],
        "net.pt holds a pickled object",
    ),
    "a MAC target below the floors, every method": (
        {},
        [*METHODS, "--set", "prune.level='unit'", "--set", "prune.macs=0.01", "--methods", "sbnn", "unit-gates"],
        "prune.macs: 0.01 of the dense MACs is below what the floors allow",
    ),
    "a Ray address where nothing answers": ({}, [*NEW, "--engine", "ray", "--address", "127.0.0.1:9"], "--address"),
}


@pytest.fixture(scope="module")
def finished_grids(tmp_path_factory, cells_in_this_process):
    """A finished comparison (sbnn and magnitude at 50 %, one seed, every stage one epoch) and sweep."""
    root = tmp_path_factory.mktemp("grids")
    assert (
        main(["compare", "--out", str(root / "cmp"), "--methods", "sbnn", "--sparsities", "0.5", "--seeds", "0", *TINY])
        == 0
    )
    assert (
        main(
            [
                "sweep",
                "default",
                "--grid",
                "optim.lr=0.01",
                "--out",
                str(root / "swp"),
                "--seeds",
                "0",
                "--set",
                "train.epochs=1",
                "--set",
                "baseline.enabled=false",
                "--set",
                "sbnn.predictive_samples=1",
            ]
        )
        == 0
    )
    return {CMP: root / "cmp", SWEEP: root / "swp"}


def build(files, root, complete_run, grids):
    """The harness's :func:`test_bad_inputs._build`, with finished grids copied in (``CMP``, ``SWEEP``),
    paths removed (``GONE``), and content computed from the file already there (a function). A trailing
    space in a name lets a path be removed and then written again in one table."""
    for name, content in files.items():
        path = root / name.rstrip()
        if content in (CMP, SWEEP):
            shutil.copytree(grids[content], path, symlinks=True)
        elif content == GONE:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        elif callable(content):
            made = content(path)
            path.write_bytes(made) if isinstance(made, bytes) else path.write_text(made)
        else:
            _build({name.rstrip(): content}, root, complete_run)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_grid_input_is_one_line_exit_2_and_changes_nothing(
    case,
    tmp_path,
    monkeypatch,
    capsys,
    complete_run,
    finished_grids,
):
    files, argv, named = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    build(files, work, complete_run, finished_grids)
    before = _tree(work)
    status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("bayesprune: error:") and err.count("\n") == 1 and named in err, err
    assert _tree(work) == before


def test_every_refusing_method_is_named_before_any_fit(tmp_path, capsys):
    """unit gates (early stopping while units leave) and PFT (early stopping on a pre-training it skips) refuse;
    sBNN and magnitude would fit: nothing is fitted, nothing written, one line per refusal."""
    start = time.perf_counter()
    status = main(
        [
            "compare",
            "--out",
            str(tmp_path / "new"),
            "--methods",
            "sbnn",
            "unit-gates",
            "pft",
            "--sparsities",
            "0.5",
            "--set",
            "model.hidden=[]",
            "--set",
            "train.validation=0.2",
            "--set",
            "pft.pretrain_epochs=0",
        ]
    )
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert status == 2 and len(lines) == 2 and all(line.startswith("bayesprune: error: method ") for line in lines), err
    assert "unit-gates" in lines[0] and "pft" in lines[1] and all("train.validation" in line for line in lines)
    assert not (tmp_path / "new").exists() and time.perf_counter() - start < 30


def test_run_resume_refuses_a_config_edited_after_the_fit_started(tmp_path, capsys, monkeypatch):
    """The reported case: an interrupted run, its config.toml then edited (the learning rate, the seed, the
    data): --resume names the key instead of continuing the old fit under the new config; unedited, it resumes."""
    from bayesprune.methods import context

    original, calls = context.write_checkpoint, []

    def stop_after_first(*args, **kwargs):  # SIGTERM once the first epoch's checkpoint is written
        original(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            STOP.request(signal.SIGTERM)

    monkeypatch.setattr(context, "write_checkpoint", stop_after_first)
    out = tmp_path / "run"
    try:
        status = main(
            [
                "run",
                "--out",
                str(out),
                "--quiet",
                "--set",
                "train.epochs=3",
                "--set",
                "baseline.enabled=false",
                "--set",
                "sbnn.predictive_samples=1",
            ]
        )
    finally:
        STOP.signal = None
    assert status == 143 and (out / "checkpoint.pt").is_file(), capsys.readouterr().err
    monkeypatch.setattr(context, "write_checkpoint", original)
    capsys.readouterr()
    config = (out / "config.toml").read_text()
    for old, new, key in (
        ("lr = 0.005", "lr = 0.02", "optim.lr"),
        ("seed = 0", "seed = 7", "seed"),
        ('dataset = "digits"', 'dataset = "iris"', "data.dataset"),
    ):
        assert old in config, config
        (out / "config.toml").write_text(config.replace(old, new))
        status = main(["run", "--resume", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and key in err and "config.toml" in err, err
        assert not (out / "metrics.json").exists()
    (out / "config.toml").write_text(config)
    assert main(["run", "--resume", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert (out / "metrics.json").is_file()


def test_the_table_covers_the_grid_cases_of_the_issue():
    named = " ".join(CASES)
    for kind in (
        "link",
        "file",
        "metrics.json",
        "sweep.toml",
        "comparison.toml",
        "config.toml",
        "latency",
        "fine-tuning",
        "compare.configs",
        "Ray",
    ):
        assert kind in named, kind


@pytest.mark.parametrize(
    "argv",
    [
        NEW,
        ["sweep", "default", "--grid", "optim.lr=0.01", "--out", "new", "--set", "train.epochs=1"],
        ["run", "--out", "new", "--quiet", "--set", "train.epochs=1"],
        [*RESUME[:2], "new"],
    ],
    ids=["compare", "sweep", "run", "compare --resume"],
)
def test_one_writer_per_out_whether_run_compare_or_sweep(argv, tmp_path, monkeypatch, capsys, finished_grids):
    """The reported case: two comparisons (or a comparison and a sweep) on one empty --out both finished
    into one folder. While another command holds the folder's lock (what a run, a comparison or a sweep in
    progress holds), each of them is refused in one line, nothing written."""
    import fcntl

    monkeypatch.chdir(tmp_path)
    if argv[:2] == RESUME[:2]:
        shutil.copytree(finished_grids[CMP], tmp_path / "new", symlinks=True)
    with open(tmp_path / ".new.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = _tree(tmp_path)
        status = main(list(argv))
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and "another run is writing it" in err, err
        assert _tree(tmp_path) == before


def test_a_sweep_over_a_long_description_fits_and_summarises_every_point(tmp_path, monkeypatch, capsys):
    """The reported case: ``--grid "description=<300 characters>"`` made a cell folder name beyond the
    file system's 255 bytes; its cell failed, and summary.csv died on the rows' differing columns. Each
    point now has a folder (a long name cut, with a digest keeping points apart), and the summary both rows."""
    import csv

    monkeypatch.chdir(tmp_path)
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    argv = ["sweep", "default", "--grid", f"description={long_a},{long_b},short", "--out", "swp", "--seeds", "0"]
    quick = ["train.epochs=1", "baseline.enabled=false", "sbnn.predictive_samples=1", "train.steps=5"]
    assert main([*argv, *(arg for item in quick for arg in ("--set", item))]) == 0, capsys.readouterr().err
    names = [path.name for path in (tmp_path / "swp" / "cells").iterdir()]
    assert len(names) == 3 and all(len(f".{name}.12345678.partial".encode()) <= 255 for name in names), names
    with open(tmp_path / "swp" / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["description"] for row in rows) == sorted([long_a, long_b, "short"])
    assert all(row["failed"] == "" and float(row["test_error"]) >= 0 for row in rows), rows


def test_a_summary_whose_first_point_failed_keeps_the_others_numbers(tmp_path):
    """A failed cell's row has no numbers: summary.csv's columns are every row's, not the first row's."""
    import csv

    from bayesprune.pipeline.compare.sweep import summary_rows, write_csv

    cells = [type("Cell", (), {"point": {"optim.lr": lr}, "name": f"optim.lr={lr}-seed0"}) for lr in (0.1, 0.2)]
    rows = summary_rows(cells, [{"failed": "diverged"}, {"test_error": 0.25, "seed": 0}])
    write_csv(tmp_path / "summary.csv", rows)
    with open(tmp_path / "summary.csv") as handle:
        read = list(csv.DictReader(handle))
    assert [row["test_error"] for row in read] == ["", "0.25"] and read[0]["failed"].endswith("diverged")


def test_a_databricks_store_without_credentials_is_one_line_and_no_folder(tmp_path, monkeypatch, capsys):
    """The reported case: ``--track-uri databricks`` made a folder called databricks/ (MLflow's URI read as a
    path). Without credentials it is refused at once, offline, naming the flag; nothing is written."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DATABRICKS_HOST", raising=False)
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    status = main([*NEW, "--track", "mlflow", "--track-uri", "databricks"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--track-uri databricks" in err, err
    assert list(tmp_path.iterdir()) == [] and time.perf_counter() - start < 15


@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "--quiet"])
def test_cells_evaluated_again_are_counted_apart_and_quiet_prints_no_progress(quiet, tmp_path, capsys, finished_grids):
    """The reported cases: compare's progress said "0 finished earlier, 2 to fit" for the two cells of a
    finished comparison only evaluated again at an added sparsity from their saved fits; compare had no
    --quiet where run has one. With --quiet, stderr is empty; the summary line is still printed."""
    shutil.copytree(finished_grids[CMP], tmp_path / "cmp", symlinks=True)
    argv = ["compare", "--resume", str(tmp_path / "cmp"), "--sparsities", "0.5", "0.9", *(["--quiet"] if quiet else [])]
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "4 rows" in captured.out
    if quiet:
        assert captured.err == ""
    else:
        first = captured.err.splitlines()[0]
        assert first.endswith("0 finished earlier (read back), 2 to evaluate again from their saved fits, 0 to fit"), (
            first
        )


def test_run_resume_refuses_a_checkpoint_whose_losses_are_text(tmp_path, capsys, monkeypatch):
    """The reported case: an interrupted run's checkpoint with ``step_losses`` a string resumed (the string's
    characters taken for losses). Refused in one line naming checkpoint.pt; nothing written."""
    from bayesprune.methods import context

    original = context.write_checkpoint

    def stop_after_first(*args, **kwargs):
        original(*args, **kwargs)
        STOP.request(signal.SIGTERM)

    monkeypatch.setattr(context, "write_checkpoint", stop_after_first)
    out = tmp_path / "run"
    quick = ["train.epochs=3", "baseline.enabled=false", "sbnn.predictive_samples=1"]
    try:
        status = main(["run", "--out", str(out), "--quiet", *(arg for item in quick for arg in ("--set", item))])
    finally:
        STOP.signal = None
    assert status == 143, capsys.readouterr().err
    monkeypatch.setattr(context, "write_checkpoint", original)
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    saved["loop"]["current"]["loop"]["step_losses"] = "0.5, 0.4"
    torch.save(saved, out / "checkpoint.pt")
    capsys.readouterr()
    before = _tree(tmp_path)
    status = main(["run", "--resume", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "checkpoint.pt" in err and "step_losses" in err, err
    assert _tree(tmp_path) == before
