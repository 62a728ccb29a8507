"""Reliability of the commands against an edited run directory, a second run, signals and bad inputs
(issue 28): nothing is written through a link or outside the folder a command may write, a complete run
is never replaced without ``--force``, SIGTERM is honoured everywhere, every bad input is one line."""

import hashlib
import json
import shutil
import signal

import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.loop import STOP

QUICK = ["--quiet", "--set", "train.epochs=1", "--set", "baseline.enabled=false", "--set", "sbnn.predictive_samples=1"]


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def copy_of(complete_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(complete_run, run_dir)
    return run_dir


@pytest.fixture(autouse=True)
def no_stop_request():
    yield
    STOP.signal = None


# 1. Writes never go through a symbolic link -------------------------------------------------------


@pytest.mark.parametrize(
    "name, argv",
    [
        ("report.md", ["report"]),
        ("loss.png", ["report"]),
        ("importance.csv", ["importance", "--force"]),
        ("importance.png", ["importance", "--force"]),
    ],
)
def test_a_link_in_a_run_directory_is_replaced_never_written_through(copy_of, tmp_path, capsys, name, argv):
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's own file\n")
    before = digest(outside)
    (copy_of / name).unlink(missing_ok=True)
    (copy_of / name).symlink_to(outside)
    assert main([argv[0], str(copy_of), *argv[1:]]) == 0, capsys.readouterr().err
    assert digest(outside) == before
    assert not (copy_of / name).is_symlink() and (copy_of / name).stat().st_size > 0


def test_a_lock_file_made_a_link_is_refused_and_its_target_untouched(tmp_path, capsys):
    outside = tmp_path / "precious.txt"
    outside.write_text("the user's own file\n")
    before = digest(outside)
    (tmp_path / ".out.lock").symlink_to(outside)
    status = main(["run", "--out", str(tmp_path / "out"), *QUICK])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "symbolic link" in err and "Traceback" not in err, err
    assert digest(outside) == before and not (tmp_path / "out").exists()


def test_the_report_escapes_the_text_it_copies_from_metrics_json(copy_of, capsys):
    metrics = json.loads((copy_of / "metrics.json").read_text())
    metrics["dataset"] = "digits\ntouch /tmp/owned\n# heading <script>x</script> ![i](http://x/y.png)"
    metrics["method"] = "sbnn"
    metrics["evil\nkey"] = "a | b\n## c"
    (copy_of / "metrics.json").write_text(json.dumps(metrics))
    assert main(["report", str(copy_of)]) == 0, capsys.readouterr().err
    lines = (copy_of / "report.md").read_text().splitlines()
    assert not any(line.startswith(("touch", "## c", "# heading")) for line in lines)
    assert not any("<script>" in line or "![i]" in line for line in lines)
    assert sum(line.startswith("# ") for line in lines) == 1


# 2. A complete run is never replaced without --force ----------------------------------------------


@pytest.mark.parametrize("force", [False, True])
def test_a_run_completed_while_another_loaded_its_data_is_never_replaced_without_force(
    tmp_path, capsys, monkeypatch, force
):
    """Run B checks ``out`` (empty), then loads its data slowly; meanwhile run A completes into ``out``.
    B is refused in one line and A is intact; under ``--force`` B replaces it as asked."""
    from bayesprune.pipeline import checks

    out = tmp_path / "out"
    load = checks.load_datasets
    first = {}

    def slow_load(config):
        if not first:  # B is loading: A runs to completion meanwhile
            first["metrics"] = None
            first["metrics"] = main(["run", "--out", str(out), *QUICK, "--set", "seed=1"])
        return load(config)

    monkeypatch.setattr(checks, "load_datasets", slow_load)
    status = main(["run", "--out", str(out), *QUICK, *(["--force"] if force else [])])
    err = capsys.readouterr().err
    assert first["metrics"] == 0
    seed = json.loads((out / "metrics.json").read_text())["seed"]
    if force:
        assert status == 0 and seed == 0
    else:
        assert status == 2 and err.count("\n") == 1 and "--force" in err and "Traceback" not in err, err
        assert seed == 1 and (out / "checkpoint.pt").is_file() and (out / "report.md").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


# 3. Signals are honoured outside the training loops --------------------------------------------------


def short_argv(short_config, method, out):
    """``bayesprune run`` of the method's short digits config (:func:`conftest.short_config_of`), saved as a file."""
    path = out.parent / f"{method}.toml"
    path.write_text(short_config(method, "train.epochs=1", "baseline.enabled=false").to_toml())
    return ["run", str(path), "--out", str(out), "--quiet"]


def stop_on_call(module, name, call=1, twice=False):
    """Wrap ``module.name`` so that its ``call``-th call first delivers SIGTERM (through the command
    line's handler; ``twice``: after the call, two of them, the second before the first was honoured)."""
    original, calls = getattr(module, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call and not twice:
            STOP.request(signal.SIGTERM)
        result = original(*args, **kwargs)
        if len(calls) == call and twice:
            STOP.request(signal.SIGTERM)
            STOP.request(signal.SIGTERM)
        return result

    return wrapped


def interrupted_then_resumed(argv, out, capsys, *, resume=True):
    try:
        status = main(argv)
    except KeyboardInterrupt:  # what a second signal raised before
        pytest.fail("a KeyboardInterrupt escaped the command line")
    err = capsys.readouterr().err
    assert status == 143 and err.startswith("bayesprune: interrupted:") and err.count("\n") == 1, err
    assert "Traceback" not in err and not (out / "metrics.json").exists()
    assert (out / "checkpoint.pt").is_file() and f"bayesprune run --resume {out}" in err, err
    if resume:
        STOP.signal = None
        assert main(["run", "--resume", str(out), "--quiet"]) == 0, capsys.readouterr().err
        assert (out / "metrics.json").is_file()


def test_sigterm_while_pbp_computes_its_certificate_stops_and_resumes(tmp_path, capsys, monkeypatch, short_config):
    from bayesprune.methods.pbp import method as pbp_method

    out = tmp_path / "out"
    # the certificate's draws
    monkeypatch.setattr(pbp_method, "gibbs_errors", stop_on_call(pbp_method, "gibbs_errors", call=2))
    interrupted_then_resumed(short_argv(short_config, "pbp", out), out, capsys)


def test_sigterm_while_pft_perturbs_its_networks_stops(tmp_path, capsys, monkeypatch, short_config):
    from bayesprune.methods.pft import method as pft_method

    out = tmp_path / "out"
    # just before the perturbations
    monkeypatch.setattr(pft_method, "weight_rms", stop_on_call(pft_method, "weight_rms"))
    interrupted_then_resumed(short_argv(short_config, "pft", out), out, capsys, resume=False)


def test_sigterm_during_the_plain_baseline_keeps_the_finished_fit_and_resumes(tmp_path, capsys, monkeypatch):
    from bayesprune.pipeline import runner

    out = tmp_path / "out"
    monkeypatch.setattr(runner, "train_plain", stop_on_call(runner, "train_plain"))
    interrupted_then_resumed(
        ["run", "--out", str(out), *QUICK, "--set", "baseline.enabled=true", "--set", "baseline.epochs=1"], out, capsys
    )
    assert "baseline_test_error" in json.loads((out / "metrics.json").read_text())


def test_a_second_sigterm_stops_at_once_with_the_same_one_line(tmp_path, capsys, monkeypatch):
    from bayesprune.methods import context

    out = tmp_path / "out"
    monkeypatch.setattr(context, "write_checkpoint", stop_on_call(context, "write_checkpoint", twice=True))
    interrupted_then_resumed(["run", "--out", str(out), *QUICK, "--set", "train.epochs=2"], out, capsys, resume=False)


# 4-6. Run directories: tampered checkpoints, edited configs ---------------------------------------


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run stopped by SIGTERM after its first epoch's checkpoint (three epochs asked)."""
    from bayesprune.methods import context

    out = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(context, "write_checkpoint", stop_on_call(context, "write_checkpoint"))
        assert main(["run", "--out", str(out), *QUICK, "--set", "train.epochs=3"]) == 143
    STOP.signal = None
    return out


@pytest.mark.parametrize("field, value", [("epoch", 10**6), ("epoch", -3), ("epoch", "two"), ("index", 99)])
def test_resume_from_a_checkpoint_with_an_impossible_epoch_is_one_line(stopped_run, tmp_path, capsys, field, value):
    run_dir = tmp_path / "run"
    shutil.copytree(stopped_run, run_dir)
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    if field == "epoch":
        saved["loop"]["current"]["loop"]["epoch"] = value
    else:  # a current stage that does not follow the finished ones
        saved["loop"]["current"]["index"] = value
    torch.save(saved, run_dir / "checkpoint.pt")
    capsys.readouterr()
    status = main(["run", "--resume", str(run_dir), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "checkpoint" in err and "Traceback" not in err, err
    assert not (run_dir / "metrics.json").exists() and (run_dir / "checkpoint.pt").is_file()


def test_certify_takes_pbp_s_split_from_the_checkpoint_not_the_editable_config(tmp_path, capsys, short_config):
    out = tmp_path / "out"
    assert main(short_argv(short_config, "pbp", out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    config = (out / "config.toml").read_text()
    assert "alpha = 0.5" in config
    (out / "config.toml").write_text(config.replace("alpha = 0.5", "alpha = 0.9"))
    capsys.readouterr()
    assert main(["certify", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n_bound"] == metrics["n_bound"] and result["alpha"] == 0.5


# Round 2: signals while the run writes its files and inside a saliency stage; files checked against the run


@pytest.mark.parametrize("where", ["write_posterior", "write_report"])
def test_sigterm_while_the_run_writes_its_posterior_or_report_stops_and_resumes(tmp_path, capsys, monkeypatch, where):
    """The run stops as in training: exit 143, no report of a run that did not finish, its training-loop
    checkpoint kept (resumable), and the same command line completes it."""
    from bayesprune.pipeline import runner

    out = tmp_path / "out"
    monkeypatch.setattr(runner, where, stop_on_call(runner, where))
    interrupted_then_resumed(["run", "--out", str(out), *QUICK], out, capsys, resume=False)
    assert not (out / "report.md").exists() and "loop" in torch.load(out / "checkpoint.pt", weights_only=True)
    STOP.signal = None
    assert main(["run", "--resume", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert (out / "metrics.json").is_file() and (out / "report.md").is_file()
    assert "loop" not in torch.load(out / "checkpoint.pt", weights_only=True)


def test_sigterm_inside_a_saliency_stage_stops_before_its_next_chunk_of_examples(
    tmp_path, capsys, monkeypatch, short_config
):
    """A stage's generalised Gauss-Newton runs over chunks of examples (1000 examples: 4 chunks); a stop
    requested in the first is honoured before the second, not after the stage and every grid point."""
    from bayesprune.core import criteria

    out = tmp_path / "out"
    calls = []
    monkeypatch.setattr(criteria, "_hessian_factor", _counting(stop_on_call(criteria, "_hessian_factor"), calls))
    path = out.parent / "saliency.toml"
    path.write_text(
        short_config(
            "saliency",
            "train.epochs=1",
            "baseline.enabled=false",
            "saliency.criteria=['obd']",
            "saliency.examples_per_stage=1000",
        ).to_toml()
    )
    status = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 143 and err.count("\n") == 1 and "Traceback" not in err, err
    assert len(calls) == 1 and (out / "checkpoint.pt").is_file() and not (out / "metrics.json").exists()


def _counting(function, calls):
    def counted(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    return counted


def test_a_report_refused_after_its_plots_leaves_the_run_directory_as_it_was(copy_of, tmp_path, capsys, monkeypatch):
    """Whatever fails once the report has begun to write (a method's own section reading a tampered
    file), every file is put back as it was and no new one is left, links included."""
    from bayesprune.pipeline import report

    outside = tmp_path / "precious.txt"
    outside.write_text("the user's own file\n")
    (copy_of / "loss.png").unlink()
    (copy_of / "loss.png").symlink_to(outside)
    before = {path.name: (path.is_symlink(), path.read_bytes()) for path in copy_of.iterdir()}

    def broken(run_dir, metrics):
        raise KeyError("a key the method's section needs")

    monkeypatch.setattr(report, "_method_sections", broken)
    status = main(["report", str(copy_of)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "metrics.json" in err, err
    assert {path.name: (path.is_symlink(), path.read_bytes()) for path in copy_of.iterdir()} == before
    assert (copy_of / "loss.png").is_symlink() and outside.read_text() == "the user's own file\n"


def test_export_refuses_a_budget_level_the_method_does_not_score(complete_run, tmp_path, capsys, monkeypatch):
    """Unit gates score units only: a weight-level budget of their scores exported a wrong network.
    Every method's ``prune_levels`` is asked (sBNN's narrowed here to stand for them)."""
    from bayesprune.methods import get_method

    monkeypatch.setattr(type(get_method("sbnn")), "prune_levels", ("unit",))
    status = main(
        [
            "export",
            str(complete_run),
            "--out",
            str(tmp_path / "net.pt2"),
            "--budget",
            "level=weight",
            "--budget",
            "sparsity=0.5",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "level=weight" in err and "sbnn" in err, err
    assert sorted(tmp_path.iterdir()) == []
    assert get_method("unit-gates").prune_levels == ("unit",)


def test_sigterm_during_bayesprune_report_stops_at_the_next_plot_and_leaves_the_run_as_it_was(
    copy_of, capsys, monkeypatch
):
    from bayesprune.analysis import plots  # the report imports its plots when it draws them

    before = {path.name: path.read_bytes() for path in copy_of.iterdir()}
    monkeypatch.setattr(plots, "plot_loss", stop_on_call(plots, "plot_loss"))
    status = main(["report", str(copy_of)])
    err = capsys.readouterr().err
    assert status == 143 and err.startswith("bayesprune: interrupted:") and err.count("\n") == 1, err
    assert {path.name: path.read_bytes() for path in copy_of.iterdir()} == before
