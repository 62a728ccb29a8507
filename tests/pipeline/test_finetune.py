"""``prune.finetune_epochs``: a pruned network trained further by maximum likelihood with what pruning removed
held at zero. Oracles: the training loss of the masked network computed by hand before and after; the
pruning curve's fine-tuned point (the masked dense network trained) against the exported network (the
physically smaller network trained), two paths that compute the same function when the removal is exact."""

import pytest
import torch
from torch import nn

from bayesprune.api import fit_method
from bayesprune.core.errors import ConfigError
from bayesprune.core.export import load_trainable
from bayesprune.core.pruning import Budget
from bayesprune.data.registry import Dataset
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.evaluation import pruning_curve
from bayesprune.pipeline.export import export_fitted
from bayesprune.pipeline.finetune import FineTuning, finetune


def separable(rows: int, *, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 4, generator=generator)
    return x, (x[:, 0] + x[:, 1] > 0).long()


def test_finetuning_lowers_the_training_loss_and_keeps_removed_units_removed():
    x, y = separable(200)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    kept = torch.arange(16) < 4  # 12 of 16 hidden units removed: their rows, biases and columns
    masks = {"0.weight": kept[:, None].expand(16, 4), "0.bias": kept, "2.weight": kept[None, :].expand(2, 16)}

    def masked_loss():
        with torch.no_grad():
            hidden = torch.relu(x @ (net[0].weight * masks["0.weight"]).T + net[0].bias * kept)
            return nn.functional.cross_entropy(hidden @ (net[2].weight * masks["2.weight"]).T + net[2].bias, y).item()

    before = masked_loss()
    finetune(net, x, y, masks, epochs=15, lr=0.02, batch_size=50)
    assert masked_loss() < before - 0.1
    assert not any(hasattr(module, "parametrizations") for module in net.modules())  # plain parameters again
    assert net[0].weight[~kept].eq(0).all() and net[0].bias[~kept].eq(0).all() and net[2].weight[:, ~kept].eq(0).all()
    assert net[0].weight[kept].ne(0).all()


@pytest.mark.parametrize("candidates", [(), (0.05, 1e-6)], ids=["one rate", "a rate chosen on held-out rows"])
def test_the_exported_network_is_the_fine_tuned_point_of_the_curve(candidates, tmp_path):
    """With ``prune.finetune_lr`` candidates the fine-tuned network is the chosen copy: export wrote the
    network as it was before fine-tuning."""
    x, y = separable(240)
    dataset = Dataset(
        name="toy", task="classification", x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:],
        input_shape=(4,), num_classes=2,
    )  # fmt: skip
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 2))
    fitted = fit_method("sparse-vd", net, (dataset.x_train, dataset.y_train), epochs=2, batch_size=40, device="cpu")
    tuning = FineTuning(epochs=4, lr=0.05, batch_size=40, seed=0, candidates=candidates)
    curve = pruning_curve(
        fitted,
        dataset,
        sparsities=[0.0, 0.5],
        budget=lambda sparsity: Budget(sparsity=sparsity, level="unit"),
        finetuned=tuning.test_metrics(fitted, dataset),
    )
    exported = export_fitted(
        fitted,
        dataset,
        out=tmp_path / "net.pt2",
        budget=Budget(level="unit", sparsity=0.5),
        repeats=1,
        finetuning=tuning,
    )
    report = exported.report
    assert report.get("finetune_choice", {}).get("finetune_lr") == (candidates[0] if candidates else None)
    assert report["exported"]["parameters"]["total"] < report["dense"]["parameters"]["total"]  # units removed
    assert report["finetune_epochs"] == 4
    assert report["test_error_before_finetuning"] == pytest.approx(curve[1]["test_error"], abs=1e-6)
    assert report["test_error"] == pytest.approx(curve[1]["test_error_finetuned"], abs=1e-6)
    assert report["test_error"] < report["test_error_before_finetuning"] - 10  # separable: fine-tuning recovers
    trainable = load_trainable(report["trainable_file"])  # the fine-tuned network, trainable
    with torch.no_grad():
        file_outputs = torch.export.load(str(tmp_path / "net.pt2")).module()(dataset.x_test)
        assert torch.allclose(trainable(dataset.x_test), file_outputs, atol=1e-5)
    chosen = " at rate 0.05 (chosen on held-out training rows)," if candidates else " (prune.finetune_epochs),"
    assert any("fine-tuned for 4 epochs" in line and chosen in line for line in exported.summary())


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_finetune_epochs_must_be_a_count(value):
    with pytest.raises(ConfigError, match=r"^prune\.finetune_epochs must be a non-negative integer"):
        load_config("sparse-vd-digits", [f"prune.finetune_epochs={value!r}".replace("True", "true")])


def test_finetuning_of_a_run_follows_its_config():
    config = load_config("sparse-vd-digits", ["prune.finetune_epochs=3", "optim.lr=0.02", "data.batch_size=64"])
    assert FineTuning.of(config, 1000) == FineTuning(epochs=3, lr=0.02, batch_size=64, seed=config.seed)
    assert FineTuning.of(load_config("sparse-vd-digits"), 1000) is None  # default 0: not fine-tuned


class Residual(nn.Module):
    """A network with a forward of its own (a skip connection around a batch-normed convolution)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 6, 3, padding=1)
        self.conv = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 6, 1))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        return self.head((x + self.conv(x)).mean((2, 3)))


def test_the_trainable_file_of_a_network_with_its_own_forward_loads_into_the_users_code(tmp_path):
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(80, 1, 6, 6, generator=generator)
    y = (x[:, 0, :3].mean((1, 2)) > x[:, 0, 3:].mean((1, 2))).long()
    dataset = Dataset(
        name="toy", task="classification", x_train=x[:60], y_train=y[:60], x_test=x[60:], y_test=y[60:],
        input_shape=(1, 6, 6), num_classes=2,
    )  # fmt: skip
    torch.manual_seed(0)
    fitted = fit_method(
        "sparse-vd", Residual(), (dataset.x_train, dataset.y_train), epochs=1, batch_size=20, device="cpu"
    )
    out = tmp_path / "net.pt2"
    report = export_fitted(fitted, dataset, out=out, budget=Budget(level="unit", sparsity=0.5), repeats=1).report
    assert report["trainable_needs_network"] is True
    with pytest.raises(ValueError, match="pass net="):
        load_trainable(report["trainable_file"])
    trainable = load_trainable(report["trainable_file"], net=Residual())  # fresh weights, the factory's shapes
    assert sum(p.numel() for p in trainable.parameters()) == report["exported"]["parameters"]["total"]
    assert report["exported"]["parameters"]["total"] < sum(p.numel() for p in Residual().parameters())
    with torch.no_grad():
        expected = torch.export.load(str(out)).module()(dataset.x_test)
        assert torch.allclose(trainable(dataset.x_test), expected, atol=1e-5)
    trainable.train()
    nn.functional.cross_entropy(trainable(dataset.x_train), dataset.y_train).backward()
    assert all(p.grad is not None for p in trainable.parameters())


def test_the_report_table_shows_the_finetuned_error_beside_the_pruned_one():
    from bayesprune.pipeline.report import _curve_with_reference

    rows = [
        {"droprate": rate, "sparsity": rate, "test_error": 10 + 30 * rate, "test_error_finetuned": 5.0}
        for rate in (0, 0.5)
    ]
    curve, columns = _curve_with_reference({"pruning_curve": rows}, "test_error")
    assert columns == ["droprate", "sparsity", "test_error", "test_error_finetuned"]
    assert [row["test_error_finetuned"] for row in curve] == [5.0, 5.0]
