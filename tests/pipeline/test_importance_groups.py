"""``bayesprune importance`` of a run on a table with near-duplicate inputs (issue 49, items 2-4): the
duplicates are one group without being named (the user's ``importance.groups`` in their place when
given), every file says the group, the restarts and their halves' Spearman, and the plain network's
importance stands beside ψ."""

import csv
import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from bayesprune.cli import main


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(0)
    a = rng.normal(size=160)
    x = np.column_stack([a, a + 0.05 * rng.normal(size=160), rng.normal(size=(160, 3))])
    y = 2 * a + x[:, 2] + 0.3 * rng.normal(size=160)
    path = tmp_path_factory.mktemp("table") / "table.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "a_copy", "b", "noise1", "noise2", "y"])
        writer.writerows([[*row, target] for row, target in zip(x.round(5), y.round(5))])
    return path


def run(table, out, *extra):
    settings = ["method='sbnn'", "data.dataset='csv'", f"data.path='{table}'", "data.target='y'"]
    settings += ["data.task='regression'", "model.hidden=[8]", "train.epochs=20", "chains=4", "device='cpu'"]
    settings += ["prune.sparsities=[0.0]", "baseline.epochs=3", "sbnn.predictive_samples=2", *extra]
    assert main(["run", "--out", str(out), "--quiet", *(arg for s in settings for arg in ("--set", s))]) == 0
    return out


def read(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_correlated_inputs_are_one_group_in_every_file(table, tmp_path, capsys):
    out = run(table, tmp_path / "run")
    assert main(["importance", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "groups of correlated inputs (absolute correlation above 0.9 on the training rows): a + a_copy" in printed
    inputs, groups = read(out / "importance.csv"), read(out / "group_importance.csv")
    assert [row["group"] for row in inputs] == ["a + a_copy", "a + a_copy", "b", "noise1", "noise2"]
    assert [row["group"] for row in groups] == ["a + a_copy", "b", "noise1", "noise2"]
    # a group's ψ is the mean of its inputs' (all its paths); both inputs share the group's selection
    assert float(groups[0]["psi"]) == pytest.approx((float(inputs[0]["psi"]) + float(inputs[1]["psi"])) / 2)
    assert inputs[0]["selected"] == inputs[1]["selected"] == groups[0]["selected"]
    record = json.loads((out / "selection.json").read_text())
    assert record["rule"] == "stability" and record["restarts"] == 4
    assert record["groups"]["a + a_copy"] == ["a", "a_copy"]
    import arviz as az
    import torch

    from bayesprune.analysis.selection import select_by_empirical_null

    at_p = az.from_netcdf(str(out / "posterior.nc"))["variational"]["psi"].transpose("chain", "feature").values
    grouped = np.column_stack([at_p[:, :2].mean(axis=1), at_p[:, 2:]])
    # the default: each restart's empirical null on its groups' log ψ(p_c), kept by at least 3 of the 4
    own = np.array([select_by_empirical_null(torch.log(torch.tensor(psi)), 0.1).numpy() for psi in grouped])
    np.testing.assert_allclose([float(row["selection_frequency"]) for row in groups], own.mean(axis=0))
    assert [row["selected"] == "True" for row in groups] == list(own.sum(axis=0) >= 3)
    # the halves' Spearman: restarts 0-1 against 2-3 of posterior.nc's ψ(p_c), read by scipy
    expected = spearmanr(grouped[:2].mean(axis=0), grouped[2:].mean(axis=0))[0]
    assert record["half_spearman"] == pytest.approx(expected)
    assert float(groups[0]["half_spearman"]) == pytest.approx(expected) and groups[0]["restarts"] == "4"
    # the plain network's importance beside ψ (Captum), per input and per group
    if "plain_permutation" in groups[0]:
        assert all(float(row["plain_permutation"]) == float(row["plain_permutation"]) for row in inputs + groups)
        assert "spearman_with_psi" in record["peers"]
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Ranking stability: 4 restarts pooled" in report
    assert "a + a\\_copy" in report or "a + a_copy" in report


def test_the_users_groups_replace_the_correlations(table, tmp_path, capsys):
    out = run(table, tmp_path / "run", "importance.groups=[['b', 'noise1']]", "chains=2")
    assert main(["importance", str(out)]) == 0
    groups = read(out / "group_importance.csv")
    assert [row["group"] for row in groups] == ["a", "a_copy", "b + noise1", "noise2"]
    assert "importance.groups" in json.loads((out / "selection.json").read_text())["grouping"]


def test_an_npz_table_is_grouped_and_selected_as_a_csv_is(tmp_path, capsys):
    """The same near-duplicate pair in an .npz archive without feature names: the inputs named by their
    position as posterior.nc names them, and the pair one group (issue 49, item 5: CSV and npz tables)."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=200)
    x = np.column_stack([a, a + 0.05 * rng.normal(size=200), rng.normal(size=(200, 2))]).astype(np.float32)
    y = (a + x[:, 2] > 0).astype(np.int64)
    np.savez(tmp_path / "t.npz", x_train=x[:150], y_train=y[:150], x_test=x[150:], y_test=y[150:])
    settings = ["method='sbnn'", "data.dataset='npz'", f"data.path='{tmp_path / 't.npz'}'", "model.hidden=[8]"]
    settings += ["train.epochs=10", "chains=2", "device='cpu'", "prune.sparsities=[0.0]", "baseline.epochs=2"]
    settings += ["sbnn.predictive_samples=2"]
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--quiet", *(arg for s in settings for arg in ("--set", s))]) == 0
    assert main(["importance", str(out)]) == 0
    capsys.readouterr()
    assert [row["group"] for row in read(out / "group_importance.csv")] == ["0 + 1", "2", "3"]
    record = json.loads((out / "selection.json").read_text())
    assert record["restarts"] == 2 and sorted(record["selected"] + record["not_selected"]) == ["0", "1", "2", "3"]
