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

pytestmark = pytest.mark.usefixtures("single_thread")


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


def test_the_exported_network_is_the_fine_tuned_point_of_the_curve(tmp_path):
    x, y = separable(240)
    dataset = Dataset(
        name="toy", task="classification", x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:],
        input_shape=(4,), num_classes=2,
    )  # fmt: skip
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 2))
    fitted = fit_method("sparse-vd", net, (dataset.x_train, dataset.y_train), epochs=2, batch_size=40, device="cpu")
    tuning = FineTuning(epochs=4, lr=0.05, batch_size=40, seed=0)
    curve = pruning_curve(
        fitted,
        dataset,
        droprates=[0.0, 0.5],
        budget=lambda droprate: Budget(fraction=droprate, level="unit"),
        finetuned=lambda masks: tuning.test_metric(fitted.network(), dataset, masks, calibration=fitted.calibration),
    )
    exported = export_fitted(
        fitted,
        dataset,
        out=tmp_path / "net.pt2",
        budget=Budget(level="unit", fraction=0.5),
        repeats=1,
        finetuning=tuning,
    )
    report = exported.report
    assert report["exported"]["parameters"]["total"] < report["dense"]["parameters"]["total"]  # units removed
    assert report["finetune_epochs"] == 4
    assert report["test_error_before_finetuning"] == pytest.approx(curve[1]["test_error"], abs=1e-6)
    assert report["test_error"] == pytest.approx(curve[1]["test_error_finetuned"], abs=1e-6)
    assert report["test_error"] < report["test_error_before_finetuning"] - 10  # separable: fine-tuning recovers
    trainable = load_trainable(report["trainable_file"])  # the fine-tuned network, trainable
    with torch.no_grad():
        file_outputs = torch.export.load(str(tmp_path / "net.pt2")).module()(dataset.x_test)
        assert torch.allclose(trainable(dataset.x_test), file_outputs, atol=1e-5)
    assert any("fine-tuned for 4 epochs" in line for line in exported.summary())


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_finetune_epochs_must_be_a_count(value):
    with pytest.raises(ConfigError, match=r"^prune\.finetune_epochs must be a non-negative integer"):
        load_config("sparse-vd-digits", [f"prune.finetune_epochs={value!r}".replace("True", "true")])


def test_finetuning_of_a_run_follows_its_config():
    config = load_config("sparse-vd-digits", ["prune.finetune_epochs=3", "optim.lr=0.02", "data.batch_size=64"])
    assert FineTuning.of(config, 1000) == FineTuning(epochs=3, lr=0.02, batch_size=64, seed=config.seed)
    assert FineTuning.of(load_config("sparse-vd-digits"), 1000) is None  # default 0: not fine-tuned
