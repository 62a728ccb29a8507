"""A restart that did not learn from PyTorch's start is fitted again from the fan-in start, and only that one
(issue 49, ``sbnn.refit``): a run whose restarts all collapse ends with each as its fan-in run fits it, a run
whose restarts all learn is the run without the refit, bit for bit, a stack refits only its members that did
not learn, and a run stopped inside the refit resumes to the uninterrupted one."""

import copy
import csv
import json
import math
import signal
import warnings

import arviz as az
import numpy as np
import pytest
import torch
from torch import nn

from bayesprune.analysis.diagnostics import restarts_not_learned, restarts_refitted
from bayesprune.cli import main
from bayesprune.core.errors import Interrupted
from bayesprune.core.loop import STOP
from bayesprune.data import Dataset
from bayesprune.methods import FitContext, context
from bayesprune.methods.sbnn import SBNN, SBNNOptions
from bayesprune.methods.sbnn.learned import NotLearned
from bayesprune.pipeline.config import RunConfig, apply_overrides
from bayesprune.pipeline.rundir import load_run
from bayesprune.pipeline.runner import resume_run, run
from helpers import without_timings

#: ``sbnn.refit``'s values.
REFITS = ("fan-in", "none")


def classification_table():
    """make_classification, 5 informative of 30 inputs, 250 rows (200 fitted), seed 1: a development table of
    the not-learned check (tests/methods/test_sbnn_init.py), none of the measured seeds 100-102."""
    from sklearn.datasets import make_classification

    return make_classification(250, n_features=30, n_informative=5, n_redundant=0, shuffle=False, random_state=1)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    x, y = classification_table()
    path = tmp_path_factory.mktemp("table") / "table.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*(f"x{j}" for j in range(30)), "y"])
        writer.writerows([[*row, target] for row, target in zip(x.round(5), y)])
    return path


def config(table, hidden, *extra):
    """A CSV run of 3 restarts (the second and third trained as one stack) of a user's MLP, 60 epochs."""
    settings = [
        "method='sbnn'",
        "data.dataset='csv'",
        f"data.path='{table}'",
        "data.target='y'",
        "data.task='classification'",
        f"model.hidden={hidden}",
        "train.epochs=60",
        "chains=3",
        "device='cpu'",
        "prune.sparsities=[0.0]",
        "baseline.enabled=false",
        "sbnn.predictive_samples=2",
        *extra,
    ]
    return RunConfig.from_dict(apply_overrides({}, settings))


def fitted_run(cfg, out):
    """The run's metrics (without wall-clock numbers) and the NotLearned warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = run(cfg, out)
    return without_timings(metrics), [w for w in caught if issubclass(w.category, NotLearned)]


def posterior(out):
    return az.from_netcdf(str(out / "posterior.nc"))


def psi(out) -> np.ndarray:
    """Every restart's ψ at q's inclusion probabilities, ``[chain, feature]``."""
    return posterior(out)["variational"]["psi"].transpose("chain", "feature").values


@pytest.fixture(scope="module")
def collapsing(table, tmp_path_factory):
    """Two hidden layers of 30 from PyTorch's start: every restart stays in the spike (the trivial predictor) unless
    refitted. The default run, and the run from the fan-in start (the oracle of each refitted restart)."""
    root = tmp_path_factory.mktemp("collapsing")
    return {
        name: (root / name, *fitted_run(config(table, "[30, 30]", *extra), root / name))
        for name, extra in (("default", ()), ("fan-in", ("sbnn.init='fan-in'",)))
    }


def training_errors(out) -> tuple:
    """The first restart's error on its training rows (q's means) and the error of the most frequent class."""
    _, data, fitted = load_run(out)
    error = 100.0 * (fitted.network()(data.x_train).argmax(-1) != data.y_train).double().mean().item()
    return error, 100.0 * (1 - np.bincount(data.y_train.numpy()).max() / len(data.y_train))


def test_every_restart_that_did_not_learn_is_refitted_from_the_fan_in_start(collapsing):
    out, metrics, caught = collapsing["default"]
    fan_in, _, _ = collapsing["fan-in"]
    assert restarts_not_learned(posterior(out)) == [] and caught == []
    assert restarts_refitted(posterior(out)) == [0, 1, 2]
    assert posterior(out).sample_stats.attrs["refit_start"] == "fan-in"
    # each restart (the first alone, the other two as one stack) is the restart of the run from the fan-in start
    np.testing.assert_allclose(psi(out), psi(fan_in), rtol=1e-5, atol=1e-7)
    assert metrics["test_error"] == collapsing["fan-in"][1]["test_error"]
    # metrics.json: the first restart's first fit predicted the most frequent class; its refit learned
    error, trivial = training_errors(out)
    first = metrics["refitted"]
    assert first["start"] == "fan-in" and first["seed"] == 0 and "not_learned" not in metrics
    assert first["trivial_training_error"] == pytest.approx(trivial) and first["training_error"] >= trivial
    assert error < 0.5 * trivial
    # both fits of the first restart are its training: 60 epochs each
    assert metrics["train_epochs"] == 120
    report = (out / "report.md").read_text()
    assert "refitted from the fan-in start" in report and "Restarts 0, 1, 2 of 3 did not learn" in report


def test_bayesprune_importance_names_the_refitted_restarts(collapsing, capsys):
    out = collapsing["default"][0]
    assert main(["importance", str(out)]) == 0
    assert "3 of 3 restarts did not learn from the network's start and were fitted again" in capsys.readouterr().out
    record = json.loads((out / "selection.json").read_text())
    assert record["restarts_refitted"] == [0, 1, 2] and "restarts_not_learned" not in record


def test_a_run_whose_restarts_all_learn_is_the_run_without_the_refit(table, tmp_path):
    """One hidden layer of 30 from PyTorch's start, 30 epochs: every restart learns."""
    runs = {
        refit: fitted_run(config(table, "[30]", "train.epochs=30", f"sbnn.refit='{refit}'"), tmp_path / refit)
        for refit in REFITS
    }
    (metrics, caught), (unrefitted, _) = runs["fan-in"], runs["none"]
    assert metrics == unrefitted and caught == [] and "refitted" not in metrics and metrics["train_epochs"] == 30
    assert restarts_refitted(posterior(tmp_path / "fan-in")) == restarts_not_learned(posterior(tmp_path / "none")) == []
    np.testing.assert_array_equal(psi(tmp_path / "fan-in"), psi(tmp_path / "none"))


def test_a_run_stopped_inside_the_refit_resumes_to_the_uninterrupted_run(table, collapsing, tmp_path, monkeypatch):
    """SIGTERM after the 75th checkpoint of the first restart (epoch 15 of its refit, 60 epochs each)."""
    write, count = context.write_checkpoint, []

    def stop_at_75(*args, **kwargs):
        write(*args, **kwargs)
        count.append(kwargs["metadata"]["stage"])
        if len(count) == 75:
            STOP.signal = signal.SIGTERM

    monkeypatch.setattr(context, "write_checkpoint", stop_at_75)
    out = tmp_path / "stopped"
    try:
        with pytest.raises(Interrupted):
            run(config(table, "[30, 30]"), out)
    finally:
        STOP.signal = None
    assert count[59:61] == ["svi", "svi refit"] and not (out / "metrics.json").exists()
    monkeypatch.setattr(context, "write_checkpoint", write)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotLearned)
        resumed = without_timings(resume_run(out))
    assert resumed == collapsing["default"][1]
    np.testing.assert_array_equal(psi(out), psi(collapsing["default"][0]))


def mixed_stack():
    """Two restarts of two hidden layers of 30 on the table's rows: the first from PyTorch's start (it collapses),
    the second from it times sqrt(6), He's scale (it learns)."""
    x, y = classification_table()
    x = torch.tensor((x - x.mean(axis=0)) / x.std(axis=0), dtype=torch.float32)
    data = Dataset("table", "classification", x, torch.tensor(y), x[:20], torch.tensor(y[:20]), (30,), 2)
    nets = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        nets.append(nn.Sequential(nn.Linear(30, 30), nn.ReLU(), nn.Linear(30, 30), nn.ReLU(), nn.Linear(30, 2)))
    with torch.no_grad():
        for layer in nets[1][::2]:
            layer.weight.mul_(math.sqrt(6))
    return nets, data


def stack(nets, data, options):
    contexts = [FitContext(seed=seed, epochs=60, task="classification") for seed in (0, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotLearned)
        fits = SBNN().fit_together(copy.deepcopy(nets), [data, data], options, contexts)
    return fits, contexts


def test_a_stack_refits_only_its_member_that_did_not_learn():
    nets, data = mixed_stack()
    options = {"pi": 0.5, "log_tau0": -2.0, "log_tau1": 0.0}
    fits, contexts = stack(nets, data, SBNNOptions(**options))
    kept, _ = stack(nets, data, SBNNOptions(**options, refit="none"))
    assert kept[0].not_learned is not None and kept[1].not_learned is None  # without the refit
    assert [fitted.not_learned for fitted in fits] == [None, None]
    assert fits[0].refitted == {**kept[0].not_learned, "start": "fan-in"} and fits[1].refitted is None
    assert [[stage["name"] for stage in ctx._finished] for ctx in contexts] == [["svi", "svi refit"], ["svi"]]
    # the member that learned: as the stack without the refit left it, bit for bit
    for name, value in kept[1].guide.state_dict().items():
        assert torch.equal(fits[1].guide.state_dict()[name], value), name
    # the member refitted: its fit alone from the fan-in start
    alone = SBNN().fit(
        copy.deepcopy(nets[0]), data, SBNNOptions(**options, init="fan-in"), FitContext(seed=0, epochs=60)
    )
    for name, value in alone.guide.state_dict().items():
        torch.testing.assert_close(fits[0].guide.state_dict()[name], value, rtol=1e-4, atol=1e-5)
