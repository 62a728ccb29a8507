"""--track mlflow: a real MLflow file store, read back with MLflow's own client: one run per cell whose
params are the cell's config.toml, whose metrics are its metrics.json, with its files as artifacts;
a second call adds no run; without MLflow the flag is refused in one line."""

import json
import sys
import tomllib

import pytest

from bayesprune.cli import main
from bayesprune.pipeline.compare.tracking import basis_points, cell_metrics, flatten
from helpers import PBP_TINY, TINY

mlflow = pytest.importorskip("mlflow")

CELLS = ("magnitude-seed0", "pbp-s0.5-seed0")

pytestmark = pytest.mark.usefixtures("cells_in_this_process")  # tracking is the parent's: no worker needed


def _argv(out):
    return [
        "compare",
        "--out",
        str(out),
        "--methods",
        "magnitude",
        "pbp",
        "--sparsities",
        "0.5",
        *(flag for item in TINY for flag in ("--set", item)),
        "--track",
        "mlflow",
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory, cells_in_this_process):
    """A tracked comparison of two methods at one sparsity, and MLflow's client on its store."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks a reader of a file store for it
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        out = tmp_path_factory.mktemp("tracked") / "cmp"
        assert main(_argv(out)) == 0
        yield out, mlflow.tracking.MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())


def _runs(client, out):
    experiment = client.get_experiment_by_name(str(out.resolve()))
    return client.search_runs([experiment.experiment_id], run_view_type=mlflow.entities.ViewType.ALL)


def _independent_flatten(table, prefix=""):
    """The leaves of a TOML table as ``section.key`` (written here again, not taken from bayesprune)."""
    leaves = {}
    for key, value in table.items():
        if isinstance(value, dict):
            leaves.update(_independent_flatten(value, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def _param(value):
    return value if isinstance(value, str) else json.dumps(value)


def test_one_run_per_cell_with_its_config_metrics_and_files(store, tmp_path):
    out, client = store
    runs = _runs(client, out)
    assert len(runs) == 3  # two cells and the comparison's parent run
    parent = (out / "mlflow_run_id").read_text().strip()
    for name in CELLS:
        folder = out / "cells" / name
        run = client.get_run((folder / "mlflow_run_id").read_text().strip())
        assert run.info.status == "FINISHED" and run.info.run_name == name
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent and tags["seed"] == "0" and tags["sparsity"] == "0.5"
        assert tags["method"] == name.split("-")[0]
        metrics = json.loads((folder / "metrics.json").read_text())
        numbers = {
            key: value
            for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        plain = {key: value for key, value in run.data.metrics.items() if not key.startswith("pruning_curve.")}
        assert plain == pytest.approx(numbers) and len(plain) == len(numbers)  # curves: stepped metrics, below
        config = tomllib.loads((folder / "config.toml").read_text())  # every cell is a run, the baseline too
        assert run.data.params == {key: _param(value) for key, value in _independent_flatten(config).items()}
        assert run.data.params["train.epochs"] == "1"
        history = client.get_metric_history(run.info.run_id, "pruning_curve.test_error")
        assert {m.step: m.value for m in history} == {
            round(1e4 * row["droprate"]): row["test_error"] for row in metrics["pruning_curve"]
        }
        expected = {"metrics.json", "config.toml", "report.md", "loss.png"}
        if name.startswith("pbp"):
            assert run.data.params["pbp.sparsity"] == "0.5"
            expected |= {"pruning_curve.png", "keep_probabilities.png"}
        else:  # magnitude: each pruned network fine-tuned compare.finetune_epochs, its rows stepped too
            history = client.get_metric_history(run.info.run_id, "pruning_curve.test_error_finetuned")
            assert {m.step: m.value for m in history} == {
                round(1e4 * row["droprate"]): row["test_error_finetuned"] for row in metrics["pruning_curve"]
            }
        artifacts = {item.path for item in client.list_artifacts(run.info.run_id)}
        assert expected <= artifacts, artifacts
        copy = client.download_artifacts(run.info.run_id, "metrics.json", str(tmp_path))
        assert open(copy, "rb").read() == (folder / "metrics.json").read_bytes()
    top = client.get_run(parent)
    assert top.info.status == "FINISHED"
    assert {"leaderboard.md", "leaderboard.csv", "leaderboard.json", "leaderboard.png", "comparison.toml"} <= {
        item.path for item in client.list_artifacts(parent)
    }


def test_resuming_adds_no_run(store):
    out, client = store
    before = sorted(run.info.run_id for run in _runs(client, out))
    held = {name: (out / "cells" / name / "mlflow_run_id").read_text() for name in CELLS}
    files = {path: path.stat().st_mtime_ns for path in (out / "cells").rglob("*")}
    assert main(["compare", "--resume", str(out), "--track", "mlflow"]) == 0
    assert sorted(run.info.run_id for run in _runs(client, out)) == before
    assert {name: (out / "cells" / name / "mlflow_run_id").read_text() for name in CELLS} == held
    assert {path: path.stat().st_mtime_ns for path in (out / "cells").rglob("*")} == files  # cells untouched


def test_a_sweep_is_tracked_to_a_given_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    out, where = tmp_path / "sweep", tmp_path / "elsewhere"
    assert (
        main(
            [
                "sweep",
                "pbp-digits",
                "--grid",
                "pbp.alpha=0.5,0.7",
                "--out",
                str(out),
                "--track",
                "mlflow",
                "--track-uri",
                str(where),
                *(flag for item in PBP_TINY for flag in ("--set", item)),
            ]
        )
        == 0
    )
    assert not (out / "mlruns").exists()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(tracking_uri=where.as_uri())
    runs = {run.info.run_name: run for run in _runs(client, out)}
    assert set(runs) == {"pbp.alpha=0.5-seed0", "pbp.alpha=0.7-seed0", "sweep"}
    for alpha in (0.5, 0.7):
        run = runs[f"pbp.alpha={alpha}-seed0"]
        metrics = json.loads((out / "cells" / f"pbp.alpha={alpha}-seed0" / "metrics.json").read_text())
        assert run.data.tags["grid.pbp.alpha"] == str(alpha) and run.data.params["pbp.alpha"] == str(alpha)
        assert run.data.tags["method"] == "pbp" and run.data.tags["sparsity"] == run.data.params["pbp.sparsity"]
        assert run.data.params["pbp.grid_size"] == "2" and run.data.metrics["bound"] == pytest.approx(metrics["bound"])
    assert {"summary.md", "summary.csv", "sweep.toml"} <= {
        item.path for item in client.list_artifacts(runs["sweep"].info.run_id)
    }


def test_without_mlflow_track_is_refused_in_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    for name in [name for name in sys.modules if name == "mlflow" or name.startswith("mlflow.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed: its import fails
    out = tmp_path / "out"
    assert main(_argv(out)) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install 'bayesprune[track]'" in error, error
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--track-uri", "x"], "--track-uri names where --track logs"),
        (["--track", "mlflow", "--track-uri", "FILE"], "exists and is not a directory"),
    ],
)
def test_bad_tracking_flags_are_refused_in_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("")
    argv = [item.replace("FILE", str(tmp_path / "file")) for item in argv]
    out = tmp_path / "out"
    assert main(["compare", "--out", str(out), "--methods", "pbp", *argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error, error
    assert not out.exists()


def test_metrics_and_params_of_a_cell():
    metrics = {
        "method": "pbp",
        "seed": 0,
        "test_error": 12.5,
        "ok": True,
        "histogram": [1.0, 2.0],
        "gap": None,
        "pruning_curve": [{"droprate": 0.0, "test_error": 10.0}, {"droprate": 0.95, "test_error": 30.0}],
    }
    assert cell_metrics(metrics) == [
        ("seed", 0.0, 0),
        ("test_error", 12.5, 0),
        ("pruning_curve.test_error", 10.0, 0),
        ("pruning_curve.test_error", 30.0, 9500),
    ]
    assert basis_points(0.995) == 9950
    assert flatten({"seed": 1, "prune": {"sparsities": [0.0, 0.5], "scope": "global"}, "a": {"b": {"c": True}}}) == {
        "seed": "1",
        "prune.sparsities": "[0.0, 0.5]",
        "prune.scope": "global",
        "a.b.c": "true",
    }
