"""bayesprune.pipeline.compare: a comparison's cells and leaderboard read back against the cells' own files, a
finished cell never refitted, a sweep's grid and PBP's union bound, engines that agree, bad grids refused."""

import csv
import json
import sys
import tomllib

import pytest

from bayesprune.cli import main
from bayesprune.core.errors import BayesPruneError
from bayesprune.methods import available_methods
from bayesprune.pipeline.compare import compare, comparison_cells, load_comparison
from bayesprune.pipeline.compare.leaderboard import pareto_front
from bayesprune.pipeline.compare.sweep import parse_grid, sweep
from bayesprune.pipeline.config import load_config
from helpers import PBP_TINY, TINY

REQUIRED = (
    "method",
    "sparsity",
    "achieved_sparsity",
    "test_error",
    "test_error_std",
    "plain_test_error",
    "train_seconds",
    "params",
    "macs",
    "latency_ms",
    "bound",
)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "cmp"
    rows = compare(
        None,
        out,
        methods=["sbnn", "pbp"],
        sparsities=[0.5, 0.9],
        seeds=[0],
        overrides=[*TINY, "compare.certify=true"],
        report=lambda *a: None,
    )
    return out, rows


def _metrics(out, name):
    return json.loads((out / "cells" / name / "metrics.json").read_text())


def test_the_cells_of_a_comparison():
    raw, options = load_comparison(None, TINY)
    cells = {cell.name: cell for cell in comparison_cells(raw, options)}
    assert {
        "magnitude-seed0",
        "sbnn-seed0",
        "sparse-vd-seed0",
        "unit-gates-seed0",
        "pft-s0.5-seed0",
        "pbp-s0.95-seed0",
        "probmask-s0.8-seed0",
        "saliency-s0.9-seed0",
    } <= set(cells)
    methods = available_methods().values()
    per_sparsity = sum(method.sparsity_option is not None for method in methods)  # one cell per sparsity and seed
    assert len(options.seeds) == 1 and len(cells) == 1 + len(methods) - per_sparsity + per_sparsity * len(
        options.sparsities
    )
    pft, pbp = cells["pft-s0.9-seed0"].run_config(), cells["pbp-s0.8-seed0"].run_config()
    assert pft.method_options.sparsities == (0.9,) and pft.prune.droprates == (0.0, 0.9)
    assert pbp.method_options.sparsity == 0.8 and pbp.optim.name == "sgd"  # [optim] of pbp-digits
    sbnn = cells["sbnn-seed0"].run_config()
    assert (
        sbnn.prune.droprates == (0.0, 0.5, 0.8, 0.9, 0.95) and sbnn.optim.name == "adam" and not sbnn.baseline.enabled
    )
    assert {config.train.epochs for config in (pft, pbp, sbnn)} == {1}  # the same budget
    assert cells["unit-gates-seed0"].run_config().prune.level == "unit"


def test_the_leaderboard_reads_back_the_cells(comparison):
    out, rows = comparison
    with open(out / "leaderboard.csv") as handle:
        table = list(csv.DictReader(handle))
    assert set(REQUIRED) <= set(table[0])
    assert (out / "leaderboard.md").read_text().count("\n| ") == 7  # the certificate cells add no row
    assert (out / "leaderboard.png").stat().st_size > 20_000  # drawn (60 kB); the same axes left empty: 13 kB
    by = {(row["method"], row["sparsity"]): row for row in rows}
    assert set(by) == {(method, s) for method in ("magnitude", "sbnn", "pbp") for s in (0.5, 0.9)}
    magnitude, sbnn = _metrics(out, "magnitude-seed0"), _metrics(out, "sbnn-seed0")
    for s in (0.5, 0.9):
        pbp = _metrics(out, f"pbp-s{s:g}-seed0")
        curve = {row["droprate"]: row["test_error"] for row in sbnn["pruning_curve"]}
        assert by[("sbnn", s)]["test_error"] == curve[s] and by[("sbnn", s)]["train_seconds"] == sbnn["train_seconds"]
        assert (
            by[("pbp", s)]["test_error"] == pbp["pruning_curve"][1]["test_error"]
            and by[("pbp", s)]["bound"] == pbp["bound"]
        )
        assert by[("magnitude", s)]["test_error"] == next(
            r["test_error"] for r in magnitude["per_sparsity"] if r["sparsity"] == s
        )
        for method in ("magnitude", "sbnn", "pbp"):
            row = by[(method, s)]
            assert row["plain_test_error"] == magnitude["baseline_test_error"] and row["seeds"] == 1
            assert row["test_error_std"] is None  # one seed
            # at least the budget is removed (dead units go too), and params count what is left
            assert row["achieved_sparsity"] >= s - 1e-9 and row["params"] <= round(7400 * (1 - s)) + 110
            assert row["macs"] > 0 and row["latency_ms"] > 0
    # compare.certify: the sbnn rows carry the bound of PBP started from sbnn's mask on S_P; the magnitude
    # rows PBP's own (pbp-digits starts from magnitude pruning), which is not fitted twice
    for s in (0.5, 0.9):
        folder = out / "cells" / f"certificate-sbnn-s{s:g}-seed0"
        config = tomllib.loads((folder / "config.toml").read_text())
        assert config["pbp"]["start_mask"] == "sbnn" and config["pbp"]["sparsity"] == s
        assert (
            config["pbp"]["prior_epochs"] == 1 and config["pbp"]["start_optim"]["name"] == "adam"
        )  # sbnn's budget and optimiser
        assert by[("sbnn", s)]["bound"] == json.loads((folder / "metrics.json").read_text())["bound"] > 0
        assert by[("magnitude", s)]["bound"] == _metrics(out, f"pbp-s{s:g}-seed0")["bound"]
    assert not list((out / "cells").glob("certificate-magnitude-*"))
    assert float(table[0]["test_error"]) == rows[0]["test_error"]


def test_resume_reads_back_finished_cells_and_a_new_start_never_overwrites(comparison):
    out, rows = comparison
    files = sorted((out / "cells").rglob("*"))
    before = {path: path.stat().st_mtime_ns for path in files}
    again = compare(out=out, resume=True, report=lambda *a: None)
    assert sorted((out / "cells").rglob("*")) == files and {path: path.stat().st_mtime_ns for path in files} == before
    assert [row["test_error"] for row in again] == [row["test_error"] for row in rows]
    with pytest.raises(BayesPruneError, match="holds a comparison; continue it with --resume"):
        compare(None, out, methods=["sbnn", "pbp"], sparsities=[0.5, 0.9], seeds=[0], overrides=TINY)
    with pytest.raises(BayesPruneError, match="--set cannot be given"):  # a resumed grid runs as it was started
        compare(out=out, resume=True, overrides=["train.epochs=2"])
    with pytest.raises(BayesPruneError, match="holds no comparison.toml"):
        compare(out=out / "cells", resume=True)
    assert {path: path.stat().st_mtime_ns for path in files} == before


def test_a_sweep_counts_the_grid_for_pbp_and_jobs_do_not_change_numbers(tmp_path):
    results = {}
    for jobs in (1, 2):
        rows = sweep(
            "pbp-digits",
            ["pbp.alpha=0.5,0.7"],
            tmp_path / f"jobs{jobs}",
            seeds=[0, 1],
            jobs=jobs,
            overrides=PBP_TINY,
            report=lambda *a: None,
        )
        results[jobs] = rows
    cells = sorted((tmp_path / "jobs1" / "cells").iterdir())
    assert [cell.name for cell in cells] == [
        "pbp.alpha=0.5-seed0",
        "pbp.alpha=0.5-seed1",
        "pbp.alpha=0.7-seed0",
        "pbp.alpha=0.7-seed1",
    ]
    for cell in cells:
        metrics = json.loads((cell / "metrics.json").read_text())
        assert metrics["grid_size"] == 2 and "grid_size = 2" in (cell / "config.toml").read_text()
    rows = results[1]
    assert [row["pbp.alpha"] for row in rows] == [0.5, 0.7] and all(row["seeds"] == 2 for row in rows)
    errors = [
        json.loads((tmp_path / "jobs1" / "cells" / f"pbp.alpha=0.5-seed{k}" / "metrics.json").read_text())["test_error"]
        for k in (0, 1)
    ]
    assert rows[0]["test_error"] == pytest.approx(sum(errors) / 2) and rows[0]["test_error_std"] == pytest.approx(
        abs(errors[0] - errors[1]) / 2**0.5
    )
    for key in ("test_error", "bound", "empirical_risk"):
        assert [row[key] for row in results[2]] == [row[key] for row in rows]
    assert "pbp.alpha" in (tmp_path / "jobs1" / "summary.md").read_text()
    assert (tmp_path / "jobs1" / "summary.csv").is_file()
    # --resume rebuilds the grid from sweep.toml alone: the same cells, read back, none refitted
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "jobs1" / "cells").rglob("*")}
    assert sweep(None, None, tmp_path / "jobs1", resume=True, report=lambda *a: None) == rows
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "jobs1" / "cells").rglob("*")} == before


def test_the_ray_engine_gives_the_local_numbers(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)  # Ray's workers import from the driver's folder first: not the source checkout
    grid = dict(methods=["pbp"], sparsities=[0.5], seeds=[0], overrides=TINY, report=lambda *a: None)
    local = compare(None, tmp_path / "local", **grid)
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}}
    )
    try:
        remote = compare(None, tmp_path / "ray", engine="ray", **grid)
    finally:
        ray.shutdown()

    def untimed(value):
        if isinstance(value, dict):
            return {key: untimed(item) for key, item in value.items() if "seconds" not in key}
        return [untimed(item) for item in value] if isinstance(value, list) else value

    for name in ("magnitude-seed0", "pbp-s0.5-seed0"):  # both kinds of cell, every number of their metrics.json
        assert untimed(_metrics(tmp_path / "local", name)) == untimed(_metrics(tmp_path / "ray", name))
    for key in ("test_error", "plain_test_error", "bound", "params"):
        assert [row[key] for row in remote] == [row[key] for row in local]


def test_grids_parse_with_lists_and_strings():
    assert parse_grid(["pbp.alpha=0.5,0.7", "model.hidden=[10],[20, 30]", "pbp.start_mask=magnitude,snip"]) == {
        "pbp.alpha": [0.5, 0.7],
        "model.hidden": [[10], [20, 30]],
        "pbp.start_mask": ["magnitude", "snip"],
    }


def test_the_pareto_front():
    assert pareto_front([(50, 3.0), (80, 2.5), (90, 4.0), (70, 3.5)]) == [(80, 2.5), (90, 4.0)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--methods", "nope"], "--methods must contain only methods"),
        (["compare", "--sparsities", "1.5"], "--sparsities"),
        (["compare", "--sparsities", "0.5", "0.5"], "--sparsities must be a non-empty list of distinct"),
        (["compare", "--jobs", "0"], "--jobs must be a positive integer"),
        (["compare", "no-such-comparison"], "unknown comparison config"),
        (["sweep", "pbp-digits", "--grid", "pbp.nope=1,2"], "unknown config key 'pbp.nope'"),
        (["sweep", "pbp-digits", "--grid", "pbp.alpha="], "non-empty list"),
        (["sweep", "pbp-digits", "--grid", "pbp.alpha=0.5,high"], "pbp.alpha"),
        (["sweep", "pbp-digits", "--grid", "nothing.here=1"], "nothing"),
        (["sweep", "pbp-digits", "--grid", "seed=1,2"], "--seeds"),
        (["sweep", "pbp-digits"], "at least one --grid"),
        (
            ["sweep", "pbp-digits", "--grid", "pbp.alpha=0.5", "--engine", "ray", "--address", "127.0.0.1:1"],
            "--address|Ray",
        ),
    ],
)
def test_bad_grids_are_refused_in_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    import re

    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and re.search(message, error), error
    assert not out.exists()


def test_sigterm_then_resume_continues_without_touching_finished_cells(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "cmp"
    argv = [
        sys.executable,
        "-m",
        "bayesprune",
        "compare",
        "--out",
        str(out),
        "--methods",
        "sbnn",
        "--sparsities",
        "0.5",
        *(flag for item in TINY for flag in ("--set", item)),
        "--set",
        "train.epochs=40",
    ]
    # From another folder: in the checkout, ``-m bayesprune`` would import the source tree, not the installed package.
    process = subprocess.Popen(
        argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    deadline = time.time() + 120
    while not (out / "cells" / "magnitude-seed0" / "metrics.json").exists() and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, error = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, error
    assert "interrupted" in error and not (out / "leaderboard.csv").exists()
    finished = {path: path.stat().st_mtime_ns for path in (out / "cells" / "magnitude-seed0").iterdir()}
    assert not (out / "cells" / "sbnn-seed0" / "metrics.json").exists()
    assert main(["compare", "--resume", str(out)]) == 0
    assert {path: path.stat().st_mtime_ns for path in (out / "cells" / "magnitude-seed0").iterdir()} == finished
    with open(out / "leaderboard.csv") as handle:
        assert {row["method"] for row in csv.DictReader(handle)} == {"magnitude", "sbnn"}


FLAKY = '''
import math

import torch
from torch import nn


class Flaky(nn.Sequential):
    """Fails while training when built from seed 1 (a user's network that breaks mid-fit)."""

    def forward(self, x):
        if self.training and self.fails:
            raise RuntimeError("the network of seed 1 fails while training")
        return super().forward(x)


def net(input_shape, output_dim, hidden=(16,)):
    network = Flaky(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden[0]), nn.ReLU(), nn.Linear(hidden[0], output_dim))
    network.fails = torch.initial_seed() == 1
    return network
'''


def test_a_cell_failing_mid_fit_leaves_a_complete_leaderboard_and_progress_is_reported(tmp_path, monkeypatch, capsys):
    """Seed 1's network raises while training (after passing every check, as a fit that breaks does): its
    two cells are recorded as failed with the reason, seed 0's fill the rows, the command exits 1; stderr
    reports each cell started and finished, cells done of 4 and the time left."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flaky.py").write_text(FLAKY)
    status = main(
        [
            "compare",
            "--out",
            "cmp",
            "--methods",
            "sbnn",
            "--sparsities",
            "0.5",
            "--seeds",
            "0",
            "1",
            "--set",
            "model.factory='flaky:net'",
            *(flag for item in TINY for flag in ("--set", item)),
        ]
    )
    err = capsys.readouterr().err.splitlines()
    assert status == 1, err
    with open(tmp_path / "cmp" / "leaderboard.csv") as handle:
        rows = {row["method"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"magnitude", "sbnn"}
    sbnn, magnitude = _metrics(tmp_path / "cmp", "sbnn-seed0"), _metrics(tmp_path / "cmp", "magnitude-seed0")
    assert float(rows["sbnn"]["test_error"]) == next(
        r["test_error"] for r in sbnn["pruning_curve"] if r["droprate"] == 0.5
    )
    assert float(rows["magnitude"]["plain_test_error"]) == magnitude["baseline_test_error"]
    for method in ("magnitude", "sbnn"):
        assert rows[method]["seeds"] == "1" and rows[method]["cells"] == f"cells/{method}-seed0 cells/{method}-seed1"
        assert rows[method]["failed"].startswith(
            f"{method}-seed1: RuntimeError: the network of seed 1 fails while training"
        )
    assert not (tmp_path / "cmp" / "cells" / "sbnn-seed1" / "metrics.json").exists()
    assert "failed" in (tmp_path / "cmp" / "leaderboard.md").read_text()
    # progress: the start, each cell fitting and finished in order of completion, the time left, the end
    progress = [line for line in err if line.startswith("bayesprune: ") and "error" not in line]
    assert progress[0] == "bayesprune: 4 cells, 0 finished earlier (read back), 4 to fit"
    finished = [line for line in progress if " done (" in line or " failed: " in line]
    assert [line.split("]")[0] for line in finished] == [f"bayesprune: [{k}/4" for k in range(1, 5)]
    assert all("left)" in line for line in finished[:-1]) and finished[-1].endswith("all done)")
    assert sum(" failed: RuntimeError" in line for line in finished) == 2
    names = {"magnitude-seed0", "magnitude-seed1", "sbnn-seed0", "sbnn-seed1"}
    assert {line.split("] ")[1].split()[0] for line in finished} == names
    fitting = {line.rsplit(" ", 1)[-1] for line in progress if "] fitting " in line}  # seen every half second
    assert fitting and fitting <= names
    assert "rows have a failed cell" in err[-1]


def test_resume_with_a_method_added_or_dropped_fits_only_the_new_cells(tmp_path):
    """--resume with other --methods: the cells already finished are read back (their files untouched), only
    the new method's cell is fitted; dropping a method leaves its folder and drops its rows. Under
    compare.budget every cell trains the same epochs (the leaderboard's train_epochs, counted by the fit)."""
    lines = []
    grid = dict(sparsities=[0.5], seeds=[0], report=None, status=lines.append)
    compare(None, tmp_path / "cmp", methods=["sbnn"], overrides=[*TINY, "compare.budget=3"], **grid)
    files = sorted((tmp_path / "cmp" / "cells").rglob("*"))
    before = {path: path.stat().st_mtime_ns for path in files}
    lines.clear()
    rows = compare(out=tmp_path / "cmp", resume=True, methods=["sbnn", "sparse-vd"], **grid)
    assert lines[0] == "bayesprune: 3 cells, 2 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in files} == before
    assert sorted(path.name for path in (tmp_path / "cmp" / "cells").iterdir()) == [
        "magnitude-seed0",
        "sbnn-seed0",
        "sparse-vd-seed0",
    ]
    assert {row["method"] for row in rows} == {"magnitude", "sbnn", "sparse-vd"}
    assert {row["method"]: row["train_epochs"] for row in rows} == {"magnitude": 3, "sbnn": 3, "sparse-vd": 3}
    assert all(row["train_steps"] == 3 * 12 for row in rows)  # 1,437 digits in batches of 128: 12 steps an epoch
    held = tomllib.loads((tmp_path / "cmp" / "comparison.toml").read_text())
    assert held["compare"]["methods"] == ["sbnn", "sparse-vd"] and held["compare"]["budget"] == 3
    lines.clear()
    rows = compare(out=tmp_path / "cmp", resume=True, methods=["sparse-vd"], **grid)
    assert lines[0] == "bayesprune: 2 cells, 2 finished earlier (read back), 0 to fit"
    assert {row["method"] for row in rows} == {"magnitude", "sparse-vd"} and (
        tmp_path / "cmp" / "cells" / "sbnn-seed0"
    ).is_dir()
    assert {path: path.stat().st_mtime_ns for path in files} == before


@pytest.mark.parametrize("budget", [6, 13])
def test_a_budget_splits_every_methods_epochs_in_its_own_proportions(budget):
    raw, options = load_comparison(None, [f"compare.budget={budget}"])
    for cell in comparison_cells(raw, options):
        config = cell.run_config()
        if cell.kind == "magnitude":
            stages = {"plain": config.baseline.epochs, "finetune": cell.finetune_epochs}
            packaged = {"plain": 40, "finetune": 10}  # compare-digits
        else:
            own = {
                key: value for key, value in vars(config.method_options).items() if key.endswith("_epochs") and value
            }
            stages = {"train": config.train.epochs, **own}
            packaged_config = load_config(f"{cell.method}-digits")
            packaged = {"train": 40, **{key: getattr(packaged_config.method_options, key) for key in own}}
        assert sum(stages.values()) == budget, (cell.name, stages)
        total = sum(packaged.values())
        for key, epochs in stages.items():  # one each, the rest by largest remainder: within one of the share
            assert abs(epochs - (1 + (budget - len(stages)) * packaged[key] / total)) < 1, (cell.name, key, stages)
        if cell.method == "pft":
            assert (
                config.method_options.start_masks == ("magnitude",) and not config.method_options.equal_budget_baseline
            )


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
    import os
    import signal
    import subprocess
    import time

    out = tmp_path / "cmp"
    argv = [
        sys.executable,
        "-m",
        "bayesprune",
        "compare",
        "--out",
        str(out),
        "--methods",
        "sbnn",
        "sparse-vd",
        "pft",
        "--sparsities",
        "0.5",
        "--jobs",
        "2",
        *(flag for item in TINY for flag in ("--set", item)),
        "--set",
        "train.epochs=400",
        "--set",
        "baseline.epochs=400",
    ]
    process = subprocess.Popen(
        argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
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


def test_resume_with_a_sparsity_added_evaluates_finished_cells_without_fitting_them(tmp_path):
    """--resume with --sparsities 0.5 0.8 after a comparison at 0.5: the magnitude cell prunes its saved plain
    network at 0.8, the sBNN cell evaluates its saved fit there; nothing is trained again (the fit's files
    untouched), and the new rows equal those of a comparison asked for both sparsities from the start."""
    grid = dict(methods=["sbnn"], seeds=[0], overrides=TINY, report=None, status=lambda line: None)
    compare(None, tmp_path / "cmp", sparsities=[0.5], **grid)
    cells = tmp_path / "cmp" / "cells"
    fits = [
        cells / "sbnn-seed0" / "checkpoint.pt",
        cells / "sbnn-seed0" / "history.csv",
        cells / "magnitude-seed0" / "network-plain.pt",
        cells / "magnitude-seed0" / "network-s0.5.pt",
    ]
    before = {path: path.stat().st_mtime_ns for path in fits}
    rows = compare(out=tmp_path / "cmp", resume=True, sparsities=[0.5, 0.8], **{**grid, "overrides": ()})
    assert {path: path.stat().st_mtime_ns for path in fits} == before
    whole = compare(None, tmp_path / "whole", sparsities=[0.5, 0.8], **grid)
    by = {(row["method"], row["sparsity"]): row for row in rows}
    assert set(by) == {(method, s) for method in ("magnitude", "sbnn") for s in (0.5, 0.8)}
    for row in whole:
        assert by[(row["method"], row["sparsity"])]["test_error"] == row["test_error"], row
    assert json.loads((cells / "magnitude-seed0" / "cell.json").read_text())["sparsities"] == [0.5, 0.8]
    assert tomllib.loads((cells / "sbnn-seed0" / "config.toml").read_text())["prune"]["droprates"] == [0.0, 0.5, 0.8]


def test_sweep_resume_with_a_seed_added_fits_only_its_cells(tmp_path):
    quick = ["train.epochs=1", "baseline.enabled=false", "sbnn.predictive_samples=1"]
    lines = []
    sweep("default", ["optim.lr=0.01"], tmp_path / "swp", seeds=[0], overrides=quick, status=lines.append)
    first = tmp_path / "swp" / "cells" / "optim.lr=0.01-seed0"
    before = {path: path.stat().st_mtime_ns for path in first.iterdir()}
    lines.clear()
    rows = sweep(None, None, tmp_path / "swp", seeds=[0, 1], resume=True, status=lines.append)
    assert lines[0] == "bayesprune: 2 cells, 1 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in first.iterdir()} == before
    errors = [
        json.loads((tmp_path / "swp" / "cells" / f"optim.lr=0.01-seed{k}" / "metrics.json").read_text())["test_error"]
        for k in (0, 1)
    ]
    assert (
        rows[0]["seeds"] == 2 and rows[0]["test_error"] == pytest.approx(sum(errors) / 2) and rows[0]["failed"] is None
    )
    assert tomllib.loads((tmp_path / "swp" / "sweep.toml").read_text())["seeds"] == [0, 1]
