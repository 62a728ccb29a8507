"""``prune.macs``: every method's run cut to the same MACs of the network it started from, and the bad inputs
refused before anything is written."""

import json

import pytest
import torch

from bayesprune.api import fit_method
from bayesprune.cli import main
from bayesprune.core.export import count_macs
from bayesprune.data import load_dataset
from bayesprune.data.registry import Dataset
from bayesprune.models import new_net
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.evaluation import macs_curve

QUICK = ["train.epochs=1", "baseline.enabled=false", "prune.sparsities=[0.5]", "device='cpu'", "prune.level='unit'"]
SAME_NETWORK = ["model.hidden=[100, 100]", "model.activation='relu'", "model.init='default'"]


def _run(tmp_path, name, config, *sets):
    argv = ["run", config, "--out", str(tmp_path / name), "--quiet"]
    for item in [*QUICK, *SAME_NETWORK, *sets]:
        argv += ["--set", item]
    assert main(argv) == 0
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_rows_at_equal_macs(tmp_path):
    """Two methods' runs on one network at prune.macs = [0.5, 0.3]: the same dense count (the network's,
    counted here), and each point at most the target and within one hidden unit's MACs of it."""
    data = load_dataset("digits")
    net = new_net(load_config(None, ["model.hidden=[100, 100]"]), data.input_shape, data.output_dim, seed=0)
    dense = count_macs(net, data.input_shape)
    widest_unit = max(64 + 100, 100 + 10)  # a unit of the first (second) layer: its row and its column
    for config in ("default", "unit-gates-digits"):
        metrics = _run(tmp_path, config, config, "prune.macs=[0.5, 0.3]")
        assert metrics["macs_dense"] == dense
        for row, target in zip(metrics["macs_curve"], (0.5, 0.3), strict=True):
            assert row["macs_target"] == target
            assert target * dense - 2 * widest_unit < row["macs"] <= target * dense
            assert row["macs_fraction"] == pytest.approx(row["macs"] / dense, abs=1e-6)
            assert 0 <= row["test_error"] <= 100


@pytest.mark.parametrize(
    "sets, named",
    [
        (["prune.level='weight'", "prune.macs=0.5"], "prune.macs must come with prune.level = 'unit'"),
        (["prune.macs=0.01"], "prune.macs: 0.01 of the dense MACs is below what the floors allow"),
        (["prune.macs=1.5"], "prune.macs must be a fraction in (0, 1]"),
        (["prune.macs=0.5", "prune.scope='layer'"], "prune.macs must come with prune.scope = 'global'"),
    ],
)
def test_bad_mac_budgets(tmp_path, capsys, sets, named):
    """A MAC target below the floors, beside a weight level, out of range or per layer: one line naming
    prune.macs, exit status 2, nothing written."""
    out = tmp_path / "out"
    argv = ["run", "--out", str(out), "--quiet", "--set", "prune.level='unit'", "--set", "device='cpu'"]
    for item in sets:
        argv += ["--set", item]
    capsys.readouterr()
    assert main(argv) == 2 and not out.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "Traceback" not in err, err


def test_export_finetune_epochs_and_mac_budget(tmp_path, capsys):
    """``export --finetune-epochs 2`` of a run fitted without fine-tuning gives the network (and test error) that
    exporting a run fitted with ``prune.finetune_epochs = 2`` gives; ``--budget macs=0.5`` exports a network of
    at most half the fitted one's MACs (its own count); a negative count is refused in one line, exit 2."""
    sets = ["train.epochs=2", "baseline.enabled=false", "device='cpu'", "prune.sparsities=[0.0]"]

    def run(name, *more):
        argv = ["run", "unit-gates-digits", "--out", str(tmp_path / name), "--quiet"]
        for item in [*sets, *more]:
            argv += ["--set", item]
        assert main(argv) == 0

    def export(name, *flags):
        out = tmp_path / f"{name}-{'-'.join(flags).replace('=', '')}.pt2"
        capsys.readouterr()
        assert main(["export", str(tmp_path / name), "--out", str(out), "--repeats", "1", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    run("plain")
    run("tuned", "prune.finetune_epochs=2")
    flagged = export("plain", "--finetune-epochs", "2")
    configured = export("tuned")
    assert flagged["finetune_epochs"] == configured["finetune_epochs"] == 2
    assert flagged["test_error"] == configured["test_error"]
    assert flagged["test_error_before_finetuning"] == configured["test_error_before_finetuning"]
    assert export("tuned", "--finetune-epochs", "0")["finetune_epochs"] == 0
    halved = export("plain", "--budget", "macs=0.5")
    assert halved["exported"]["macs"] <= 0.5 * halved["dense"]["macs"]
    out = tmp_path / "bad.pt2"
    assert main(["export", str(tmp_path / "plain"), "--out", str(out), "--finetune-epochs", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert not out.exists() and len(err.splitlines()) == 1 and "--finetune-epochs" in err


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_torch_pruning_row_at_the_macs(tmp_path, scope):
    """``torch-pruning.macs``: Torch-Pruning's ratio found so that its network costs at most the target of the
    plain network's MACs (counted here on the run's network as rebuilt from its export), so the row of a
    comparison at ``prune.macs`` removes no further unit."""
    torch.manual_seed(0)
    sets = ["torch-pruning.macs=0.5", f"torch-pruning.scope='{scope}'", "train.epochs=2", "prune.macs=0.5"]
    argv = ["run", "torch-pruning-digits", "--out", str(tmp_path / "tp"), "--quiet", "--set", "device='cpu'"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    metrics = json.loads((tmp_path / "tp" / "metrics.json").read_text())
    data = load_dataset("digits")
    dense = count_macs(new_net(load_config("torch-pruning-digits"), data.input_shape, 10, seed=0), data.input_shape)
    assert metrics["macs_dense"] == metrics["plain_macs"] == dense
    (row,) = metrics["macs_curve"]
    assert row["macs"] == metrics["macs"] <= 0.5 * dense and row["units_removed"] == 0
    assert metrics["macs"] > 0.4 * dense  # the ratio's bisection gets close to the target


def test_mac_curve_counts_at_the_datas_input_shape():
    """A CNN that also runs at 28x28 (its probe size) on 3x32x32 data: the curve's MACs are those of the cut
    network at 32x32, the data's shape, as the dense count is (counted at 28x28 the fraction read 0.77 of the
    truth: resnet18 on Fashion-MNIST at 3x32x32 reported 44.8 % of the MACs for a network at 50.0 %)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 2),
    )
    x, y = torch.randn(40, 3, 32, 32), torch.randint(0, 2, (40,))
    fitted = fit_method("magnitude", net, (x, y), epochs=1, device="cpu")
    shape = (3, 32, 32)
    data = Dataset("images", "classification", x, y, x, y, shape, 2)
    dense = count_macs(fitted.net, shape)
    (row,) = macs_curve(fitted, data, targets=[0.5], dense_macs=dense)
    kept = round(8 * (1 - row["units_removed"]))
    smaller = torch.nn.Sequential(
        torch.nn.Conv2d(3, kept, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(kept, 2),
    )
    assert row["macs"] == count_macs(smaller, shape) <= 0.5 * dense
    assert row["macs_fraction"] == pytest.approx(row["macs"] / dense, abs=1e-6)
