"""End-to-end tests of the ``bayesprune`` command line: outputs of a run and rejection of bad input."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from helpers import signal_after_one_epoch

QUICK = ["--quiet", "--set", "train.epochs=2", "--set", "baseline.epochs=1", "--set", "sbnn.predictive_samples=2"]


def run_cli(capsys, *args):
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """One default run (the QUICK settings) from the installed console script, as a user starts it: the
    run directory and the finished process, read by the tests of a complete run (copied where changed).
    Its cache folder is new, as on a user's first run of the day (ArviZ warns once a day, stamped there);
    matplotlib's font cache is this process's."""
    import matplotlib

    folder = tmp_path_factory.mktemp("default")
    script = os.path.join(os.path.dirname(sys.executable), "bayesprune")
    environment = {"XDG_CACHE_HOME": str(folder / "cache"), "MPLCONFIGDIR": matplotlib.get_cachedir()}
    result = subprocess.run(
        [script, "run", "--out", str(folder / "run"), *QUICK],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "OMP_NUM_THREADS": "1", **environment},
    )
    return folder / "run", result


def test_a_default_run_prints_no_third_party_warning(default_run):
    """The reported case: every run printed ArviZ's FutureWarning about its refactor (once a day, so on
    a user's first run). Nothing but bayesprune's own lines reaches the terminal."""
    _, result = default_run
    assert result.returncode == 0, result.stderr
    assert re.search(r"\w+Warning\b", result.stderr) is None, result.stderr
    assert "ArviZ" not in result.stderr


def test_only_the_notices_are_ignored():
    """The filter is narrow: ArviZ's notice is dropped, but another FutureWarning of ArviZ, the same words
    as another category, or from another module, are shown."""
    import warnings

    from bayesprune.core.quiet import ignore_notices

    notice = "\nArviZ is undergoing a major refactor to improve flexibility"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignore_notices()
        for message, category, module in [
            (notice, FutureWarning, "arviz"),
            ("a deprecated argument", FutureWarning, "arviz"),
            (notice, UserWarning, "arviz"),
            (notice, FutureWarning, "bayesprune.analysis"),
        ]:
            warnings.warn_explicit(message, category, "file.py", 1, module=module)
    assert [(str(w.message)[:12], w.category) for w in caught] == [
        ("a deprecated", FutureWarning),
        (notice[:12], UserWarning),
        (notice[:12], FutureWarning),
    ]


def test_default_run_writes_a_complete_run_directory(default_run):
    out, result = default_run
    assert result.returncode == 0, result.stderr
    expected = {
        "metrics.json",
        "pruning_curve.csv",
        "report.md",
        "loss.png",
        "inclusion_cdf.png",
        "pruning_curve.png",
        "checkpoint.pt",
        "config.toml",
        "history.csv",
        "scores.npz",
        "posterior.nc",
    }
    assert expected <= {path.name for path in out.iterdir()}
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("method", "dataset", "device", "n_weights", "train_seconds", "test_error", "baseline_test_error"):
        assert key in metrics
    assert metrics["n_weights"] == 64 * 100 + 100 + 100 * 10 + 10  # the default 64-100-10 MLP
    rates = [row["droprate"] for row in metrics["pruning_curve"]]
    assert rates == sorted(rates) and rates[0] == 0.0
    # The curve's weights kept follow the sparsities exactly (global ranking drops floor(d n)).
    for row in metrics["pruning_curve"]:
        assert row["n_weights_kept"] == metrics["n_weights"] - int(row["droprate"] * metrics["n_weights"])
        assert 0.0 <= row["test_error"] <= 100.0
    lines = (out / "pruning_curve.csv").read_text().splitlines()
    assert lines[0].startswith("droprate,") and len(lines) == len(rates) + 1
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["metadata"]["epoch"] == 2
    assert not any(path.name.startswith(".") for path in out.parent.iterdir())  # no staging left behind


def test_the_report_sets_the_papers_rows_beside_the_curve_and_finds_the_half_point_sparsity(tmp_path, capsys):
    out = tmp_path / "run"
    reference = [
        "--set",
        "reference.source='paper X'",
        "--set",
        "reference.sparsities=[0.0, 0.5, 0.6]",
        "--set",
        "reference.values=[1.0, 1.25, 1.75]",
    ]
    assert (
        run_cli(
            capsys, "run", "--out", str(out), *QUICK, "--set", "prune.sparsities=[0.25, 0.5, 0.75, 0.9]", *reference
        )[0]
        == 0
    )
    with open(out / "pruning_curve.csv", newline="") as handle:
        curve = [{key: float(value) for key, value in row.items()} for row in csv.DictReader(handle)]
    worse = [row["sparsity"] for row in curve if row["test_error"] > curve[0]["test_error"] + 0.5]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sparsity_at_0.5_points_worse"] == pytest.approx(worse[0] if worse else None, abs=1e-6)
    table = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| ")]
    header = table[[line.startswith("| droprate |") for line in table].index(True)]
    assert header.endswith("| paper X |")
    by_rate = {
        line.split(" | ")[0].strip("| "): line.split(" | ")[-1].strip(" |") for line in table if line.startswith("| 0")
    }
    assert (by_rate["0"], by_rate["0.25"], by_rate["0.5"], by_rate["0.6"]) == ("1", "—", "1.25", "1.75")
    # The paper's own rows first exceed their full model's by 0.5 points at droprate 0.6.
    assert "(paper X: 0.6)" in (out / "report.md").read_text()


def test_saved_config_reruns_and_force_is_needed_to_overwrite(default_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(default_run[0], out)
    before = (out / "metrics.json").read_text()
    status, _, err = run_cli(capsys, "run", str(out / "config.toml"), "--out", str(out), "--quiet")
    assert status == 2 and "--force" in err and err.count("\n") == 1
    assert (out / "metrics.json").read_text() == before
    assert run_cli(capsys, "run", str(out / "config.toml"), "--out", str(out), "--quiet", "--force")[0] == 0
    # Same config, same seed: a CPU run is reproducible (the first ran in a process of its own).
    assert json.loads((out / "metrics.json").read_text())["pruning_curve"] == json.loads(before)["pruning_curve"]


BAD_SETTINGS = [
    (["sbnn.pi=1.5"], "sbnn.pi"),
    (["sbnn.log_tau0=2", "sbnn.log_tau1=1"], "sbnn.log_tau0"),
    (["data.dataset=imagenet"], "imagenet"),
    (["model.architecture=resnet-1000"], "model.architecture"),
    (["train.epochs=-3"], "train.epochs"),
    (["prune.sparsities=[0.5, 1.0]"], "prune.sparsities"),
    (["optim.lr=0"], "optim.lr"),
    (["sbnn.colour=1"], "sbnn.colour"),
    (["data.dataset=mnist", "data.root='/nonexistent/mnist'"], "/nonexistent/mnist"),
    (["data.dataset='uci'", "data.splits=[0]", "data.split=3"], "data.split"),
    (["seed=4294967296"], "seed"),
    (["seeds=[1, 1]"], "seeds"),
    (["sbnn.log_tau1=1e308"], "sbnn.log_tau1"),
    (["train.epochs=100000000000000000000"], "train.epochs"),
    (["device='cuda:7'"], "device"),
    (["model.name='lenet-5-caffe'"], "argument 'name'"),  # a key of the builder's own arguments: was a traceback
    (["model.output_dim=3"], "argument 'output_dim'"),
]


@pytest.mark.parametrize("settings, named", BAD_SETTINGS)
def test_bad_config_values_exit_2_naming_the_field_and_write_nothing(tmp_path, capsys, settings, named):
    out = tmp_path / "run"
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    status, _, err = run_cli(capsys, "run", "--out", str(out), "--quiet", *overrides)
    assert status == 2
    assert named in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def _write_uci(root, values):
    folder = root / "toy"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("\n".join(" ".join(str(v) for v in row) for row in values) + "\n")
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "index_train_0.txt").write_text("\n".join(str(i) for i in range(len(values) - 2)) + "\n")
    (folder / "index_test_0.txt").write_text(f"{len(values) - 2}\n{len(values) - 1}\n")
    (folder / "n_splits.txt").write_text("1\n")


def test_nan_in_data_file_exits_2_naming_the_file(tmp_path, capsys):
    values = [[i, 2 * i, 3 * i] for i in range(10)]
    values[4][1] = float("nan")
    _write_uci(tmp_path / "uci", values)
    out = tmp_path / "run"
    status, _, err = run_cli(
        capsys,
        "run",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "data.dataset=uci",
        "--set",
        f"data.root='{tmp_path / 'uci'}'",
        "--set",
        "data.name=toy",
    )
    assert status == 2 and "data.txt" in err and err.count("\n") == 1
    assert not out.exists()


def test_divergence_exits_2_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    """The loss is made NaN from the third epoch on; the epoch-2 checkpoint must survive."""
    from bayesprune.core.objectives import AnalyticKLELBO

    real_loss_and_grads, calls = AnalyticKLELBO.loss_and_grads, []

    def loss_and_grads(self, *args, **kwargs):
        calls.append(1)
        loss = real_loss_and_grads(self, *args, **kwargs)
        return torch.full_like(loss, float("nan")) if len(calls) > 2 * 12 else loss  # digits: 12 batches per epoch

    monkeypatch.setattr(AnalyticKLELBO, "loss_and_grads", loss_and_grads)
    out = tmp_path / "run"
    status, _, err = run_cli(
        capsys, "run", "--out", str(out), "--quiet", "--set", "train.epochs=5", "--set", "train.checkpoint_every=1"
    )
    assert status == 2 and "nan" in err.lower() and err.count("\n") == 1
    assert torch.load(out / "checkpoint.pt", weights_only=True)["metadata"]["epoch"] == 2
    assert not (out / "metrics.json").exists()


def test_a_diverged_plain_baseline_is_null_in_strict_json(tmp_path, capsys, monkeypatch):
    import bayesprune.core.plain

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    # the plain network's loss is NaN from its first step (a learning rate large enough to diverge is refused)
    monkeypatch.setattr(
        bayesprune.core.plain, "mean_loss", lambda task: lambda output, target: output.sum() * float("nan")
    )
    out = tmp_path / "run"
    status, _, _ = run_cli(capsys, "run", "--out", str(out), *QUICK, "--set", "baseline.epochs=2")
    metrics = json.loads((out / "metrics.json").read_text(), parse_constant=refuse)
    assert status == 0 and metrics["baseline_test_error"] is None and "nan" in metrics["baseline_diverged"]


def test_a_diverged_run_never_replaces_a_complete_one(default_run, tmp_path, capsys, monkeypatch):
    from bayesprune.core.objectives import AnalyticKLELBO

    out = tmp_path / "run"
    shutil.copytree(default_run[0], out)
    before = (out / "metrics.json").read_text()
    monkeypatch.setattr(AnalyticKLELBO, "loss_and_grads", lambda self, *args, **kwargs: torch.tensor(float("nan")))
    status, _, err = run_cli(capsys, "run", "--out", str(out), "--force", *QUICK)
    assert status == 2 and "keeps the earlier complete run" in err and err.count("\n") == 1
    assert (out / "metrics.json").read_text() == before


def test_list_shows_the_packaged_default(capsys):
    status, stdout, _ = run_cli(capsys, "list")
    assert status == 0 and any(line.startswith("default") for line in stdout.splitlines())


def test_a_successful_run_prints_its_result_line_and_nothing_else(default_run):
    """No ArviZ log line (a single chain's R-hat), no FutureWarning: stdout holds the result, stderr nothing."""
    _, result = default_run
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.count("\n") == 1 and "results in" in result.stdout


@pytest.mark.parametrize("name", ["default", "uci"])
def test_a_packaged_name_is_not_shadowed_by_a_file_of_that_name(tmp_path, monkeypatch, name):
    from bayesprune.pipeline.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("notes, not a config\n")
    assert load_config(name).method == "sbnn"
    with pytest.raises(ConfigError, match=f"./{name}"):
        load_config(f"./{name}")


def test_a_relative_data_root_is_stored_resolved(tmp_path, monkeypatch, capsys):
    """The run directory's config.toml must work from any directory."""
    seen = {}

    def fake_run(config, out, **options):
        seen["root"] = config.data.options["root"]
        return {"dataset": "uci/toy", "test_rmse": 1.0}

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("bayesprune.pipeline.runner.run", fake_run)
    status, _, _ = run_cli(capsys, "run", "uci", "--out", "run", "--data-root", "uci", "--quiet")
    assert status == 0 and seen["root"] == str(tmp_path / "uci")


def test_a_config_that_is_not_utf8_is_named_in_one_line(tmp_path, capsys):
    config = tmp_path / "latin1.toml"
    config.write_bytes(b'description = "caf\xe9"\n')
    status, _, err = run_cli(capsys, "run", str(config), "--out", str(tmp_path / "run"))
    assert status == 2 and err.count("\n") == 1 and str(config) in err and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def two_chain_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains") / "run"
    assert main(["run", "--out", str(out), *QUICK, "--set", "chains=2", "--set", "baseline.enabled=false"]) == 0
    return out


def test_chains_write_a_posterior_that_arviz_loads_and_summarises(two_chain_run):
    import arviz as az
    import numpy as np

    idata = az.from_netcdf(str(two_chain_run / "posterior.nc"))
    assert idata.posterior.sizes["chain"] == 2
    summary = az.summary(idata, var_names=["psi"])
    assert len(summary) == 64 and np.isfinite(summary["r_hat"].to_numpy(dtype=float)).all()
    psi = idata.variational["psi"].values
    assert not np.allclose(psi[0], psi[1])  # different seeds, different fits
    assert json.loads((two_chain_run / "metrics.json").read_text())["chains"] == 2
    report = (two_chain_run / "report.md").read_text()
    assert "Posterior diagnostics (ArviZ, 2 chains)" in report
    for name in ("forest_psi.png", "ppc.png", "inclusion_cdf.png"):
        assert f"]({name})" in report and (two_chain_run / name).stat().st_size > 0


def test_importance_command_pools_the_restarts_of_eq_3_18(two_chain_run, capsys):
    import numpy as np
    import xarray as xr

    assert run_cli(capsys, "importance", str(two_chain_run))[0] == 0
    with open(two_chain_run / "importance.csv") as handle:
        rows = list(csv.DictReader(handle))
    psi = np.array([float(row["psi"]) for row in rows])
    # Oracle, eq. 3.18 by hand for the 64-100-10 MLP of chain 0: psi_j = (1 / (100 * 10)) sum_{k,i} P2[k, i] P1[i, j]
    with np.load(two_chain_run / "scores.npz") as saved:  # the inclusion logits B - A of eq. 3.8
        p1, p2 = (0.5 * (1 + np.tanh(saved[name].astype(float) / 2)) for name in ("1.weight", "3.weight"))
    variational = xr.open_dataset(two_chain_run / "posterior.nc", group="variational")
    np.testing.assert_allclose(variational["psi"].values[0], p2.sum(0) @ p1 / (100 * 10), rtol=1e-5)
    # importance.csv pools the two restarts: the mean of their psi, an interval holding both
    np.testing.assert_allclose(psi, variational["psi"].values.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(
        [float(row["restart_low"]) for row in rows], variational["psi"].values.min(axis=0), rtol=1e-5
    )
    np.testing.assert_allclose(
        [float(row["restart_high"]) for row in rows], variational["psi"].values.max(axis=0), rtol=1e-5
    )
    assert all(
        float(row["psi_low"]) <= float(row["restart_low"]) and float(row["restart_high"]) <= float(row["psi_high"])
        for row in rows
    )
    phi = np.array([float(row["phi"]) for row in rows])
    np.testing.assert_allclose(phi, (psi - psi.min()) / (psi.max() - psi.min()), rtol=1e-5, atol=1e-7)
    assert sorted(int(row["rank"]) for row in rows) == list(range(1, 65))
    assert int(rows[int(np.argmax(psi))]["rank"]) == 1
    with open(two_chain_run / "node_importance.csv") as handle:
        nodes = list(csv.DictReader(handle))
    hidden = [float(row["importance"]) for row in nodes if row["layer"] == "1"]
    np.testing.assert_allclose(
        variational["node_importance.1"].values[0], p2.mean(0), rtol=1e-5
    )  # mean over the 10 outputs
    np.testing.assert_allclose(hidden, variational["node_importance.1"].values.mean(axis=0), rtol=1e-5)
    assert variational["node_importance.1"].dims == ("chain", "node_100")  # a dimension per layer width
    np.testing.assert_allclose([float(row["importance"]) for row in nodes if row["layer"] == "input"], psi)
    assert all(float(row["importance"]) == 1.0 for row in nodes if row["layer"] == "3")
    selection = json.loads((two_chain_run / "selection.json").read_text())
    assert selection["selected"] == [row["feature"] for row in rows if row["selected"] == "True"]
    assert selection["restarts"] == 2 and selection["fdr"] == 0.1
    # the report's table is the same pooled posterior
    report = (two_chain_run / "report.md").read_text()
    top = min(rows, key=lambda row: int(row["rank"]))
    assert f"| {top['feature']} | {float(top['psi']):.4g} |" in report
    # the warning names every feature whose R-hat across the restarts exceeds 1.05, as importance.csv gives it
    disagreeing = {row["feature"] for row in rows if float(row["r_hat"]) > 1.05}
    if disagreeing:
        warning = report.split("**Warning: the restarts disagree (R-hat > 1.05) on ")[1].split("\n")[0]
        assert set(warning.split(":** ")[1].split(". Their ranks")[0].split(", ")) == disagreeing
    else:
        assert "Every feature's R-hat is at most 1.05" in report

    status, _, err = run_cli(capsys, "importance", str(two_chain_run))
    assert status == 2 and "--force" in err and err.count("\n") == 1
    assert run_cli(capsys, "importance", str(two_chain_run), "--force")[0] == 0


def test_a_posterior_nc_with_a_dimension_per_site_axis_is_still_read(two_chain_run, tmp_path, capsys, monkeypatch):
    """posterior.nc written before the sites shared their dimensions (``<site>_dim_<axis>``, one per axis of
    every site, ``node_importance.<layer>_dim_0``) is read by importance as today's. Oracle: ψ pooled over
    the restarts is their mean (eq. 3.18 at each restart's p, in ``variational.psi``)."""
    import arviz as az
    import numpy as np
    import xarray as xr

    from bayesprune.analysis.diagnostics import write_posterior

    monkeypatch.syspath_prepend(Path(__file__).resolve().parents[1] / "benchmarks")
    from posterior_nc import per_site_names  # the names before, as the benchmark compares them

    old = tmp_path / "run"
    shutil.copytree(two_chain_run, old, ignore=shutil.ignore_patterns("*importance.*", "selection.json"))
    idata = az.from_netcdf(str(two_chain_run / "posterior.nc"))
    write_posterior(per_site_names(idata), old / "posterior.nc", method="sbnn")
    with xr.open_dataset(old / "posterior.nc", group="posterior") as written:
        assert {"1.weight_dim_0", "1.weight_dim_1", "node_importance.1_dim_0"} <= set(written.dims)
    status, _, err = run_cli(capsys, "importance", str(old))
    assert status == 0, err
    with open(old / "importance.csv") as handle:
        psi = [float(row["psi"]) for row in csv.DictReader(handle)]
    np.testing.assert_allclose(psi, idata["variational"]["psi"].values.mean(axis=0), rtol=1e-5)


def test_report_regenerates_from_the_run_directory_alone(two_chain_run, capsys):
    before = (two_chain_run / "report.md").read_text()
    for name in ("report.md", "forest_psi.png", "ppc.png", "pruning_curve.png"):
        (two_chain_run / name).unlink()
    (two_chain_run / "checkpoint.pt").rename(two_chain_run / "moved.pt")  # no refit: the checkpoint is not read
    try:
        assert run_cli(capsys, "report", str(two_chain_run))[0] == 0
    finally:
        (two_chain_run / "moved.pt").rename(two_chain_run / "checkpoint.pt")
    after = (two_chain_run / "report.md").read_text()
    assert _without_importance(after) == _without_importance(before)
    for name in ("forest_psi.png", "ppc.png", "pruning_curve.png"):
        assert (two_chain_run / name).exists()


def _without_importance(report):
    """``report`` less what ``bayesprune importance``, run on the shared run by other tests in any order,
    changes: its section, and the line naming the rule that selected the pooled inputs."""
    return re.sub(r"Rule \(.*\n", "", report.replace(_importance_section(report), ""))


def _importance_section(report):
    start = report.find("## Feature importance")
    return "" if start < 0 else report[start : report.index("## Posterior diagnostics")]


@pytest.mark.parametrize("command", ["report", "importance"])
def test_report_and_importance_reject_a_directory_that_is_not_a_run(tmp_path, capsys, command):
    status, stdout, err = run_cli(capsys, command, str(tmp_path))
    assert status == 2 and err.startswith("bayesprune: error:") and err.count("\n") == 1
    assert str(tmp_path) in err and not list(tmp_path.iterdir())


def test_unit_level_pruning_curve_and_export_of_a_run(tmp_path, capsys):
    """A run whose curve removes hidden units; `export` writes a smaller network whose outputs equal the
    masked dense network's and that loads with torch alone."""
    out = tmp_path / "run"
    assert (
        run_cli(
            capsys,
            "run",
            "--out",
            str(out),
            *QUICK,
            "--set",
            "prune.level='unit'",
            "--set",
            "prune.sparsities=[0.5]",
            "--set",
            "prune.min_keep=1",
        )[0]
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    row = metrics["pruning_curve"][1]
    assert row["droprate"] == 0.5 and row["n_weights_kept"] == 7510 - 50 * (64 + 1 + 10)  # 50 of 100 hidden units
    target = tmp_path / "small.pt2"
    status, stdout, _ = run_cli(
        capsys, "export", str(out), "--out", str(target), "--budget", "keep=30", "--json", "--repeats", "2"
    )
    assert status == 0
    report = json.loads(stdout)
    assert report["max_abs_difference_to_masked"] < 1e-5
    assert report["exported"]["parameters"]["total"] == 64 * 30 + 30 + 30 * 10 + 10
    # Torch-Pruning's count: each layer's products and bias additions, the activation one per unit
    assert report["exported"]["macs"] == 64 * 30 + 30 + 30 + 30 * 10 + 10
    assert set(report["dense"]["latency_seconds"]["cpu"]) == {"1", "64", "1024"}
    assert torch.export.load(str(target)).module()(torch.zeros(3, 1, 8, 8)).shape == (3, 10)  # digits: 8x8 images
    status, _, err = run_cli(capsys, "export", str(out), "--out", str(target))
    assert status == 2 and "--force" in err
    status, _, err = run_cli(capsys, "export", str(out), "--out", str(tmp_path / "x.pt2"), "--budget", "colour=1")
    assert status == 2 and "--budget colour" in err and err.count("\n") == 1


def test_seeds_repeat_the_run_and_report_mean_and_standard_deviation(tmp_path, capsys):
    import numpy as np

    quick = [*QUICK, "--set", "baseline.enabled=false", "--set", "sbnn.predictive_samples=1"]
    assert run_cli(capsys, "run", "--out", str(tmp_path / "both"), *quick, "--set", "seeds=[0, 1]")[0] == 0
    assert run_cli(capsys, "run", "--out", str(tmp_path / "one"), *quick, "--set", "seed=1")[0] == 0
    both = json.loads((tmp_path / "both" / "metrics.json").read_text())
    alone = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert both["seeds"] == [0, 1] and both["per_seed"][1]["test_error"] == alone["test_error"]
    values = [run["test_error"] for run in both["per_seed"]]
    assert both["test_error"] == pytest.approx(np.mean(values))
    assert both["test_error_std"] == pytest.approx(np.std(values, ddof=1))
    errors = [row["test_error"] for row in both["pruning_curve"]]
    assert errors[0] == pytest.approx(both["test_error"])


def test_out_never_names_a_directory_the_run_did_not_create(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "work"
    (folder / "data").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "data" / "train.csv").write_text("1,2\n")
    monkeypatch.chdir(folder)
    config = folder / "my.toml"
    config.write_text('method = "sbnn"\n')
    (tmp_path / "link").symlink_to(folder / "data")
    cases = {
        ".": "is the current directory or one above it",
        "..": "is the current directory or one above it",
        str(folder / "data"): "holds the input",
        str(tmp_path / "link"): "is a symbolic link",
        "x" * 250: "name too long",
    }
    for out, message in cases.items():
        extra = ["--data-root", str(folder / "data")] if "holds" in message else []
        status, stdout, err = run_cli(capsys, "run", str(config), "--out", out, "--force", *QUICK, *extra)
        assert status == 2 and message in err and err.count("\n") == 1, (out, err)
    # --force replaces an earlier run, never a folder of the user's.
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(capsys, "run", "--out", str(folder), "--force", *QUICK)
    assert status == 2 and "not a bayesprune run directory" in err
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "data" / "train.csv").exists()


def test_a_second_run_into_the_same_directory_is_refused_while_the_first_writes(tmp_path, capsys):
    import fcntl

    out = tmp_path / "run"
    with open(tmp_path / ".run.lock", "w") as lock:  # what a run in progress holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        status, _, err = run_cli(capsys, "run", "--out", str(out), *QUICK)
    assert status == 2 and "another run is writing it" in err and err.count("\n") == 1
    assert not out.exists()
    # A staging directory left by a killed run is reported, not deleted, and does not block.
    left = tmp_path / ".run.abcd1234.partial"
    left.mkdir()
    status, _, err = run_cli(capsys, "run", "--out", str(out), *QUICK)
    assert status == 0 and f"{left} is left from an interrupted run" in err and left.exists()


CORRUPTIONS = {
    "metrics.json": [b"", b"{}", b"[1, 2]", b'{"method": "sbnn"'],
    "scores.npz": [b"", b"garbage"],
    "history.csv": [b"", b"a,b\n1,2\n"],
    "posterior.nc": [b"garbage"],
}


@pytest.mark.parametrize(
    "name, content", [(name, content) for name, contents in CORRUPTIONS.items() for content in contents]
)
def test_report_names_a_corrupt_run_file_in_one_line(two_chain_run, tmp_path, capsys, name, content):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(two_chain_run, run_dir)
    (run_dir / name).write_bytes(content)
    status, _, err = run_cli(capsys, "report", str(run_dir))
    assert status == 2 and err.count("\n") == 1 and f"{run_dir / name}:" in err


RESUMABLE = [
    "--quiet",
    "--set",
    "train.epochs=15",
    "--set",
    "baseline.enabled=false",
    "--set",
    "train.validation=0.2",
    "--set",
    "optim.schedule='cosine'",
    "--set",
    "sbnn.predictive_samples=2",
]


def signalled_run(tmp_path, args, signal_number):
    """``bayesprune run --out tmp_path/run *args`` in its own process, sent ``signal_number`` once its
    first checkpoint is written; returns ``(returncode, stderr)``. The process runs in ``tmp_path``
    so that it imports the installed package, not the source tree (whose analysis/ setup.cfg maps in)."""
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "bayesprune", "run", "--out", str(tmp_path / "run"), *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob(".run.*.partial/checkpoint.pt")) and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal_number)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main(["run", "--out", str(out), *RESUMABLE]) == 0
    return out


def resumed_equals_uninterrupted(tmp_path, capsys, uninterrupted):
    """Resume ``tmp_path/run`` and compare every metric but time with the uninterrupted run."""
    status, _, err = run_cli(capsys, "run", "--resume", str(tmp_path / "run"), "--quiet")
    assert status == 0 and err == ""
    resumed, whole = (json.loads((run / "metrics.json").read_text()) for run in (tmp_path / "run", uninterrupted))
    resumed.pop("train_seconds"), whole.pop("train_seconds")
    assert resumed == whole
    assert (tmp_path / "run" / "history.csv").read_text() == (uninterrupted / "history.csv").read_text()


def test_sigterm_then_resume_gives_the_uninterrupted_run(tmp_path, capsys, uninterrupted):
    """SIGTERM stops at a step, keeps the last epoch's checkpoint, says how to resume in one line and
    exits 143; minibatch order, random draws, Adam moments, the cosine schedule and early stopping's
    best state then continue where they stopped: every metric equals an uninterrupted run's."""
    import signal

    status, err = signalled_run(tmp_path, RESUMABLE, signal.SIGTERM)
    epoch = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["metadata"]["epoch"]
    assert status == 143 and err.startswith("bayesprune: interrupted:") and err.count("\n") == 1, err
    assert f"epoch {epoch} is in" in err and f"bayesprune run --resume {tmp_path / 'run'}" in err and 1 <= epoch < 15
    assert not (tmp_path / "run" / "metrics.json").exists()
    resumed_equals_uninterrupted(tmp_path, capsys, uninterrupted)


def test_a_run_killed_by_sigkill_resumes_from_its_staging_directory(tmp_path, capsys, uninterrupted):
    import signal

    signalled_run(tmp_path, RESUMABLE, signal.SIGKILL)
    [staging] = tmp_path.glob(".run.*.partial")
    assert not (tmp_path / "run").exists() and (staging / "checkpoint.pt").is_file()
    resumed_equals_uninterrupted(tmp_path, capsys, uninterrupted)
    assert not staging.exists()


@pytest.mark.parametrize(
    "case, named",
    [
        ("complete", "is complete"),
        ("no checkpoint", "no checkpoint.pt"),
        ("no loop state", "checkpoint.pt: holds no training-loop state"),
        ("with --set", "drop --set"),
        ("missing", "no config.toml"),
    ],
)
def test_resume_refuses_what_it_cannot_continue(default_run, tmp_path, capsys, case, named):
    run_dir = tmp_path / "copy"
    shutil.copytree(default_run[0], run_dir)
    extra = []
    if case != "complete":
        (run_dir / "metrics.json").unlink()
    if case == "no checkpoint":
        (run_dir / "checkpoint.pt").unlink()
    if case == "no loop state":  # a complete run's final checkpoint holds the fit alone
        assert "loop" not in torch.load(run_dir / "checkpoint.pt", weights_only=True)
    if case == "not resumable":
        text = (run_dir / "config.toml").read_text().replace('method = "sbnn"', 'method = "unit-gates"')
        (run_dir / "config.toml").write_text(text.split("[sbnn]")[0])
    if case == "with --set":
        extra = ["--set", "train.epochs=3"]
    if case == "missing":
        run_dir = tmp_path / "nothing"
    before = sorted(path.name for path in tmp_path.rglob("*"))
    status, _, err = run_cli(capsys, "run", "--resume", str(run_dir), *extra)
    assert status == 2 and err.count("\n") == 1 and named in err, err
    assert sorted(path.name for path in tmp_path.rglob("*")) == before


def test_sigint_stops_the_run_at_a_step_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    """SIGINT, raised in this process as the second epoch begins (a signal sent from another process: the
    SIGTERM test above), stops the run at a step: exit 130, one line, the first epoch's checkpoint kept."""
    import signal

    from bayesprune.core import loop

    out = tmp_path / "run"
    monkeypatch.setattr(loop, "tqdm", signal_after_one_epoch(signal.SIGINT))
    returncode, _, err = run_cli(
        capsys, "run", "--out", str(out), "--quiet", "--set", "train.epochs=3", "--set", "baseline.enabled=false"
    )
    assert returncode == 130, err
    assert err.startswith("bayesprune: interrupted:") and err.count("\n") == 1 and "Traceback" not in err
    epoch = torch.load(out / "checkpoint.pt", weights_only=True)["metadata"]["epoch"]
    assert epoch == 1 and f"epoch {epoch} is in" in err
    assert not (out / "metrics.json").exists()


def test_importance_selects_by_the_empirical_null_on_request(two_chain_run, capsys):
    import numpy as np
    import xarray as xr

    from bayesprune.analysis.selection import benjamini_hochberg, empirical_null_p_values

    status, out, _ = run_cli(capsys, "importance", str(two_chain_run), "--selection", "empirical-null", "--force")
    assert status == 0 and "(empirical-null)" in out
    with open(two_chain_run / "importance.csv") as handle:
        rows = list(csv.DictReader(handle))
    selection = json.loads((two_chain_run / "selection.json").read_text())
    assert selection["rule"] == "empirical-null" and selection["restarts"] == 2
    assert selection["selected"] == [row["feature"] for row in rows if row["selected"] == "True"]
    # log psi of the 2 restarts pooled (the mean of posterior.nc's variational psi), each group's the mean of
    # its inputs', through Benjamini-Hochberg; none when more than half of them tie (no spread to learn the null from)
    psi = xr.open_dataset(two_chain_run / "posterior.nc", group="variational")["psi"].mean("chain").values
    index = {row["feature"]: j for j, row in enumerate(rows)}
    groups = selection["groups"]
    group_psi = np.array([psi[[index[name] for name in inputs]].mean() for inputs in groups.values()])
    assert np.allclose([selection["psi"][group] for group in groups], group_psi)
    statistic = np.log(group_psi)
    chosen = [False] * len(groups)
    if np.median(np.abs(statistic - np.median(statistic))) > 0:
        chosen = benjamini_hochberg(empirical_null_p_values(torch.tensor(statistic)), 0.1).tolist()
    expected = {name for inputs, keep in zip(groups.values(), chosen) if keep for name in inputs}
    assert {row["feature"] for row in rows if row["selected"] == "True"} == expected


def test_the_result_line_of_a_fine_tuned_run_gives_the_fine_tuned_networks_metric(tmp_path, capsys):
    """The reported case: with prune.finetune_epochs the line printed the metric before fine-tuning (40.31 where
    the fine-tuned network, the one export writes, had 36.25). The oracle is the run's own metrics.json: the line
    gives its test_error_finetuned as the result, test_error as the figure before, and counts "1 epoch"; the
    export's summary of the same run says "1 epoch" too."""
    out = tmp_path / "run"
    quick = [*QUICK, "--set", "baseline.enabled=false", "--set", "prune.finetune_epochs=1"]
    status, stdout, _ = run_cli(capsys, "run", "--out", str(out), *quick)
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    after, before = metrics["test_error_finetuned"], metrics["test_error"]
    assert after != before  # the case tells the two apart
    line = stdout.strip()
    assert line.startswith(
        f"digits: test_error {after:.4g} after fine-tuning 1 epoch (prune.finetune_epochs; {before:.4g} before)"
    )
    status, stdout, _ = run_cli(capsys, "export", str(out), "--out", str(tmp_path / "net.pt2"), "--repeats", "1")
    assert status == 0 and "fine-tuned for 1 epoch (prune.finetune_epochs)" in stdout and "1 epochs" not in stdout
