"""``bayesprune importance`` on a run of every method on a CSV table (issue 38, item 3): the table's
feature names, a selection list, and each method's own numbers per input against the saved fit."""

import csv
import json

import numpy as np
import pytest
import torch

from bayesprune.cli import main
from bayesprune.methods import available_methods

FEATURES = ["signal", "noise1", "noise2", "noise3"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, len(FEATURES)))
    label = (x[:, 0] > 0).astype(int)
    path = tmp_path_factory.mktemp("table") / "table.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*FEATURES, "label"])
        writer.writerows([[*row, y] for row, y in zip(x.round(4), label)])
    return path


def run_and_importance(method, table, out, capsys, *extra):
    settings = [
        "train.epochs=2",
        "device='cpu'",
        "baseline.enabled=false",
        "chains=1",
        *available_methods()[method].quick,
        *extra,
        "data.dataset='csv'",
        f"data.path='{table}'",
        "data.target='label'",
        "model.hidden=[6]",
        "prune.sparsities=[0.0]",
    ]
    config = "sbnn-digits" if method == "sbnn" else f"{method}-digits"
    assert main(["run", config, "--out", str(out), "--quiet", *(arg for s in settings for arg in ("--set", s))]) == 0
    assert main(["importance", str(out)]) == 0
    printed = capsys.readouterr().out
    with open(out / "importance.csv") as handle:
        rows = list(csv.DictReader(handle))
    return rows, json.loads((out / "selection.json").read_text()), printed


@pytest.fixture(scope="module")
def runs(table, tmp_path_factory):
    """:func:`run_and_importance` of a method with no extra settings, once for the module: the tests that
    read one method's run share it (``bayesprune report`` rewrites only its report)."""
    done = {}

    def get(method, capsys):
        if method not in done:
            out = tmp_path_factory.mktemp(method) / "run"
            done[method] = (*run_and_importance(method, table, out, capsys), out)
        return done[method]

    return get


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_importance_of_every_method_names_the_table_features_and_selects(method, runs, capsys):
    rows, selection, printed, out = runs(method, capsys)
    assert [row["feature"] for row in rows] == FEATURES
    assert sorted(int(row["rank"]) for row in rows) == [1, 2, 3, 4]
    assert selection["selected"] == [row["feature"] for row in rows if row["selected"] == "True"]
    assert sorted(selection["selected"] + selection["not_selected"]) == sorted(FEATURES)
    assert f"selected {len(selection['selected'])} of 4 inputs" in printed
    assert (out / "importance.png").stat().st_size > 0
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    line = next(
        line
        for line in report.splitlines()
        if line.startswith(f"**Selected inputs ({len(selection['selected'])} of 4):**")
    )
    listed = line.split(":** ")[1].split(".")[0].split(";")[0]
    assert sorted(listed.split(", ")) == sorted(selection["selected"] or ["none"])


def test_sparse_vd_importance_counts_the_input_weights_it_keeps(runs, capsys):
    from bayesprune.pipeline.runner import load_run

    rows, selection, _, out = runs("sparse-vd", capsys)
    _, _, fitted = load_run(out)
    log_alpha = fitted.log_alpha()["1.weight"]  # (hidden, inputs), by hand
    kept = (log_alpha <= fitted.threshold).sum(dim=0)
    assert [int(row["weights_kept"]) for row in rows] == kept.tolist()
    np.testing.assert_allclose(
        [float(row["first_layer_score"]) for row in rows], (-log_alpha).sum(dim=0).double(), rtol=1e-6
    )
    removed = [name for name, count in zip(FEATURES, kept.tolist()) if count == 0]
    assert all(name in selection["not_selected"] for name in removed)  # an input without a kept weight is dropped


def test_saliency_importance_sums_the_pruning_order_of_each_input(runs, capsys):
    rows, _, _, out = runs("saliency", capsys)
    with np.load(out / "scores.npz") as scores:
        ranks = torch.as_tensor(scores["1.weight"]).double()
    np.testing.assert_allclose([float(row["first_layer_score"]) for row in rows], ranks.sum(dim=0), rtol=1e-9)


def test_the_refit_on_all_inputs_is_the_runs_plain_network(table, tmp_path, capsys):
    """selection.json's refit trains the plain network as the run does: on all inputs it gives the run's
    baseline error exactly; the report puts the refit beside it."""
    rows, selection, printed = run_and_importance(
        "sparse-vd", table, tmp_path / "run", capsys, "baseline.enabled=true", "baseline.epochs=2"
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    refit = selection["refit"]
    assert refit["metric"] == "test_error"
    assert refit["all_inputs"] == pytest.approx(metrics["baseline_test_error"], rel=1e-9)
    if selection["not_selected"] == []:
        assert refit["selected_inputs"] == pytest.approx(refit["all_inputs"], rel=1e-9)
    assert f"plain network refit on the selected inputs: test_error {refit['selected_inputs']:.4g}" in printed
    assert main(["report", str(tmp_path / "run")]) == 0
    assert f"against {refit['all_inputs']:.4g} on all inputs" in (tmp_path / "run" / "report.md").read_text()
