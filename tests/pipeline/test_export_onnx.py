"""``bayesprune export --format onnx``: an ONNX file beside the ``.pt2``, with the data's preprocessing inside,
whose outputs under ONNX Runtime are the masked network's. Oracle: the method's own masked network
(``Fitted.masked_network``, batch-norm statistics estimated again as the export does) fed the raw inputs
standardised by hand, its outputs put back in the target's units by hand."""

import json

import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from bayesprune.api import fit_method  # noqa: E402
from bayesprune.cli import main  # noqa: E402
from bayesprune.core.errors import BayesPruneError  # noqa: E402
from bayesprune.core.onnx_file import run_onnx  # noqa: E402
from bayesprune.core.pruning import Budget, expand_unit_masks, prune  # noqa: E402
from bayesprune.data.registry import Dataset  # noqa: E402
from bayesprune.pipeline import export as pipeline_export  # noqa: E402


def standardised(x_raw, y, task, *, num_classes=None):
    """A :class:`Dataset` of ``x_raw`` standardised (and a regression ``y``), keeping what was done."""
    mean, std = x_raw[:40].mean(0), x_raw[:40].std(0) + 0.1
    fields = dict(input_mean=mean, input_std=std, input_shape=tuple(x_raw.shape[1:]), num_classes=num_classes)
    if task == "regression":
        fields.update(target_mean=float(y[:40].mean()), target_std=float(y[:40].std()))
        y = (y - fields["target_mean"]) / fields["target_std"]
    x = (x_raw - mean) / std
    return Dataset(name="toy", task=task, x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:], **fields)


def masked_on_raw_inputs(fitted, dataset, budget, x_raw):
    """The oracle: the masked network of the budget's unit masks, on hand-standardised raw inputs."""
    masks = {}
    if budget is not None:
        units = prune(fitted.scores(), budget, net=fitted.network(), input_shape=dataset.input_shape)
        masks = expand_unit_masks(fitted.network(), units, input_shape=dataset.input_shape)
    with torch.no_grad():
        out = fitted.masked_network(masks).eval()((x_raw - dataset.input_mean) / dataset.input_std)
    return out * dataset.target_std + dataset.target_mean if dataset.task == "regression" else out


@pytest.mark.parametrize("kind", ["mlp", "batchnorm-cnn"])
def test_onnx_file_computes_the_masked_network_on_raw_inputs(kind, tmp_path):
    generator = torch.Generator().manual_seed(0)
    if kind == "mlp":  # regression: inputs and targets standardised, the file takes and gives raw ones
        x_raw = 3.0 + 2.0 * torch.randn(60, 5, generator=generator)
        y = x_raw[:, 0] * 4.0 + 10.0
        dataset, budget = standardised(x_raw, y, "regression"), None
        net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
    else:  # a BatchNorm CNN with a unit budget: the exported file is smaller
        x_raw = torch.rand(60, 1, 8, 8, generator=generator)
        y = (x_raw[:, 0, :4].mean((1, 2)) > x_raw[:, 0, 4:].mean((1, 2))).long()
        dataset, budget = standardised(x_raw, y, "classification", num_classes=2), Budget(level="unit", sparsity=0.5)
        net = nn.Sequential(
            nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 12), nn.ReLU()
        )
        net.append(nn.Linear(12, 2))
    fitted = fit_method(
        "sparse-vd", net, (dataset.x_train, dataset.y_train), epochs=2, batch_size=20, device="cpu", seed=0
    )
    out = tmp_path / "net.pt2"
    exported = pipeline_export.export_fitted(
        fitted, dataset, out=out, budget=budget, repeats=1, formats=("pt2", "onnx")
    )
    report = exported.report
    onnx_file = tmp_path / "net.onnx"
    assert report["onnx_file"] == str(onnx_file) and onnx_file.is_file()
    expected = masked_on_raw_inputs(fitted, dataset, budget, x_raw[40:])
    got = run_onnx(onnx_file, torch.split(x_raw[40:], 7))
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4 * max(1.0, expected.abs().max().item())
    if budget is not None:  # units were removed: the ONNX file holds the smaller network
        assert report["exported"]["parameters"]["total"] < report["dense"]["parameters"]["total"]
    name = "test_rmse" if kind == "mlp" else "test_error"
    assert report[f"onnx_{name}"] == pytest.approx(report[name], abs=1e-3)
    assert report["onnx_max_abs_difference_to_file"] <= 1e-4 * max(1.0, expected.abs().max().item())
    assert any(line.startswith(f"wrote {onnx_file}: ONNX Runtime runs it") for line in exported.summary())


def test_format_onnx_without_its_packages_is_refused_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("bayesprune.core.onnx_file.missing_onnx_packages", lambda: ["onnxruntime"])
    with pytest.raises(BayesPruneError, match=r"^--format onnx: needs the packages onnxruntime: .*bayesprune\[onnx\]"):
        pipeline_export.check_export_arguments(tmp_path / "net.pt2", formats=("onnx",))
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "net.pt2"), "--format", "onnx"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "pip install 'bayesprune[onnx]'" in error[0]
    assert not list(tmp_path.iterdir())


def test_an_existing_onnx_file_is_not_overwritten_without_force(tmp_path):
    (tmp_path / "net.onnx").write_text("mine")
    with pytest.raises(BayesPruneError, match=r"net\.onnx exists; pass --force"):
        pipeline_export.check_export_arguments(tmp_path / "net.pt2", formats=("pt2", "onnx"))
    pipeline_export.check_export_arguments(tmp_path / "net.pt2", formats=("pt2",))  # not asked for: not looked at
    assert json.dumps((tmp_path / "net.onnx").read_text()) == '"mine"'


def test_out_named_onnx_writes_the_onnx_file_there_and_the_pt2_beside_it(tmp_path, capsys, complete_run):
    """The reported case: ``--out net.onnx --format onnx`` wrote the .pt2 to net.onnx, the ONNX file then
    replaced it, and the summary said torch.export loads net.onnx."""
    status = main(
        ["export", str(complete_run), "--out", str(tmp_path / "net.onnx"), "--format", "onnx", "--repeats", "2"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["net.onnx", "net.pt2", "net.trainable.pt"]
    assert torch.export.load(str(tmp_path / "net.pt2")).module() is not None
    assert run_onnx(tmp_path / "net.onnx", [torch.zeros(2, 1, 8, 8)]).shape == (2, 10)
    assert f"wrote {tmp_path / 'net.pt2'}: torch.export" in out and f"wrote {tmp_path / 'net.onnx'}: ONNX" in out


def test_force_with_a_folder_where_the_onnx_file_goes_changes_nothing(tmp_path, capsys, complete_run):
    """The reported case: ``export --force`` with net.onnx a folder replaced net.pt2, then died with
    IsADirectoryError leaving .partial files. Refused in one line before anything is written."""
    (tmp_path / "net.pt2").write_text("mine")
    (tmp_path / "net.onnx").mkdir()
    status = main(["export", str(complete_run), "--out", str(tmp_path / "net.pt2"), "--format", "onnx", "--force"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "net.onnx" in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["net.onnx", "net.pt2"]
    assert (tmp_path / "net.pt2").read_text() == "mine"


def test_an_onnx_export_writes_nothing_into_the_users_cache_folder(tmp_path, complete_run):
    """The reported case: every ONNX export made ONNX Runtime write into $XDG_CACHE_HOME/Microsoft/DeveloperTools
    (its device id and database, on import). In a fresh process, nothing of it is there."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir()
    script = os.path.join(os.path.dirname(sys.executable), "bayesprune")
    command = [script, "export", str(complete_run), "--out", str(tmp_path / "net.pt2"), "--format", "onnx"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*command, "--repeats", "1"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "net.onnx").is_file() and not (cache / "Microsoft").exists(), list(cache.rglob("*"))
