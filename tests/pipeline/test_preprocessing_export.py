"""Exports of runs on the user's own CSV tables take the table's raw rows: the file standardises the
inputs and puts regression outputs back in the target's units, so that fed the raw test rows it gives
the error ``bayesprune export`` prints. Oracles: the exported file loaded with ``torch.export.load``,
fed the CSV's rows as numpy reads them, scored by hand with numpy."""

import json

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer, load_diabetes

from bayesprune.cli import main
from bayesprune.core.export import load_trainable
from bayesprune.data import load_dataset


def write_split(folder, x, y, *, test_rows: int, seed: int = 0):
    """A train and a test CSV (features ``f0..``, the target ``target`` last) of a random split."""
    order = np.random.default_rng(seed).permutation(len(y))
    header = ",".join([*(f"f{j}" for j in range(x.shape[1])), "target"])
    paths = []
    for name, rows in (("train", order[test_rows:]), ("test", order[:test_rows])):
        path = folder / f"{name}.csv"
        np.savetxt(path, np.column_stack([x[rows], y[rows]]), delimiter=",", header=header, comments="", fmt="%.10g")
        paths.append(path)
    return paths


def run_and_export(tmp_path, capsys, train, test, task, epochs):
    out, target = tmp_path / "run", tmp_path / "net.pt2"
    settings = [
        "data.dataset='csv'",
        f"data.train='{train}'",
        f"data.test='{test}'",
        "data.target='target'",
        f"data.task='{task}'",
        f"train.epochs={epochs}",
        "baseline.enabled=false",
        "device='cpu'",
        "model.hidden=[16]",
        "sparse-vd.kl_anneal_start=0",
        "sparse-vd.kl_anneal_end=1",
        "data.batch_size=512",
        "optim.lr=0.03",
    ]
    assert (
        main(
            [
                "run",
                "sparse-vd-digits",
                "--out",
                str(out),
                "--quiet",
                *(word for setting in settings for word in ("--set", setting)),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["export", str(out), "--out", str(target), "--json", "--repeats", "1"]) == 0
    return out, target, json.loads(capsys.readouterr().out)


def file_outputs(exported, rows_csv) -> np.ndarray:
    """The exported file's outputs on a CSV's rows (header first, the target last) as numpy reads
    them. ``torch.export.load`` runs no code of bayesprune's: the file holds a graph of torch
    operations (test_export.py checks that it loads in a process with torch alone)."""
    rows = np.loadtxt(rows_csv, delimiter=",", skiprows=1)[:, :-1]
    with torch.no_grad():
        return torch.export.load(str(exported)).module()(torch.tensor(rows, dtype=torch.float32)).numpy()


def test_a_csv_classification_export_fed_raw_rows_errs_as_printed(tmp_path, capsys):
    x, y = load_breast_cancer(return_X_y=True)  # features from 0.001 to 4,254: raw rows far from standardised
    train, test = write_split(tmp_path, x, y, test_rows=120)
    _, exported, report = run_and_export(tmp_path, capsys, train, test, "classification", epochs=6)
    labels = np.loadtxt(test, delimiter=",", skiprows=1)[:, -1]
    error = 100 * np.mean(file_outputs(exported, test).argmax(1) != labels)  # percent, as printed
    assert report["test_error"] < 20  # the network learned something, so a wrong scaling shows
    assert error == pytest.approx(report["test_error"], abs=100 / len(labels) + 1e-6), report


def test_a_csv_regression_export_fed_raw_rows_gives_the_printed_rmse_in_target_units(tmp_path, capsys):
    x, y = load_diabetes(return_X_y=True, scaled=False)  # targets 25..346, mean 152, std 77
    train, test = write_split(tmp_path, x, y, test_rows=90)
    out, exported, report = run_and_export(tmp_path, capsys, train, test, "regression", epochs=20)
    targets = np.loadtxt(test, delimiter=",", skiprows=1)[:, -1]
    rmse = np.sqrt(np.mean((file_outputs(exported, test)[:, 0] - targets) ** 2))
    # standardised outputs read as units would err by about sqrt(152^2 + 77^2) = 170
    assert rmse < 1.2 * targets.std()
    assert rmse == pytest.approx(report["test_rmse"], rel=1e-4), report
    rows = torch.tensor(np.loadtxt(test, delimiter=",", skiprows=1)[:, :-1], dtype=torch.float32)
    with torch.no_grad():  # the trainable file computes on standardised data; wrapped, as the file above
        assert np.allclose(
            load_trainable(report["trainable_file"], raw_inputs=True)(rows).numpy(),
            file_outputs(exported, test),
            rtol=1e-5,
            atol=1e-3,
        )

    # a run written before preprocessing was stored: recomputed from the data config, the same file
    checkpoint = out / "checkpoint.pt"
    saved = torch.load(checkpoint, weights_only=True)
    stored = saved.pop("preprocessing")
    torch.save(saved, checkpoint)
    assert main(["export", str(out), "--out", str(tmp_path / "again.pt2"), "--json", "--repeats", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["test_rmse"] == pytest.approx(report["test_rmse"], rel=1e-6)

    # stored statistics of another shape, or data files changed since the fit: one line, exit 2
    for preprocessing, field in (
        ({**stored, "input_std": stored["input_std"][:3]}, "input_std"),
        ({**stored, "target_mean": stored["target_mean"] + 1.0}, "target_mean"),
    ):
        torch.save({**saved, "preprocessing": preprocessing}, checkpoint)
        assert main(["export", str(out), "--out", str(tmp_path / f"{field}.pt2")]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "checkpoint.pt" in error and field in error, error
        assert not (tmp_path / f"{field}.pt2").exists()


def test_the_wrapper_standardises_inputs_and_restores_target_units_by_hand(tmp_path):
    from bayesprune.core.preprocessing import preprocessing_of, with_preprocessing

    rows = np.array([[1.0, 200.0, 3.0], [4.0, 100.0, 9.0], [7.0, 600.0, 3.0], [2.0, 300.0, 5.0]])
    path = tmp_path / "t.csv"
    np.savetxt(path, rows, delimiter=",", header="a,b,y", comments="")
    data = load_dataset("csv", path=str(path), target="y", task="regression", test_fraction=0.25, seed=0)
    prep = preprocessing_of(data)
    features = torch.tensor(rows[:, :2], dtype=torch.float32)
    net = torch.nn.Linear(2, 1)
    with torch.no_grad():
        raw = with_preprocessing(net, prep).eval()(features)[:, 0].numpy()
    train = data.x_train * prep.input_std + prep.input_mean  # the training rows as the file gives them
    mean, std = train.double().mean(0).numpy(), train.double().std(0, unbiased=False).numpy()
    y_train = data.y_train.double().numpy() * data.target_std + data.target_mean
    expected = net.weight.detach().double().numpy() @ ((rows[:, :2] - mean) / std).T + net.bias.item()
    expected = expected[0] * y_train.std() + y_train.mean()
    assert np.allclose(raw, expected, rtol=1e-5)


def test_a_classification_wrapper_leaves_the_outputs_as_the_network_gives_them():
    from bayesprune.core.preprocessing import Preprocessing, with_preprocessing

    prep = Preprocessing(input_mean=torch.tensor([1.0, -2.0]), input_std=torch.tensor([2.0, 0.5]))
    net = torch.nn.Linear(2, 3)
    x = torch.randn(5, 2)
    with torch.no_grad():
        assert torch.allclose(with_preprocessing(net, prep)(x), net((x - prep.input_mean) / prep.input_std))
        assert torch.equal(with_preprocessing(net, Preprocessing())(x), net(x))
