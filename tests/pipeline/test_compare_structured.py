"""Torch-Pruning's structured pruner as the baseline of a unit-level comparison
(bayesprune.core.channels): the network it gives is the one Torch-Pruning gives directly,
fine-tuning trains it, and the leaderboard measures the exported smaller network."""

import copy
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import torch_pruning as tp
from torch import nn

from bayesprune.core.channels import ignored_layers, pruned_and_finetuned
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.export import count_macs
from bayesprune.pipeline.compare import comparison_cells, execute, load_comparison
from bayesprune.pipeline.compare.cells import check_folder, refusal
from bayesprune.pipeline.compare.leaderboard import leaderboard_rows
from helpers import TINY


class Residual(nn.Module):
    """A stem and a block whose output is added to it (their channels coupled), pooled into a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(8, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8)
        )
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        return self.fc(x.mean((2, 3)))


def _data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 1, 6, 6, generator=generator)
    y = (x.mean((1, 2, 3)) > 0).long() + (x[:, 0, 0, 0] > 1).long()
    return SimpleNamespace(x_train=x, y_train=y, task="classification", input_shape=(1, 6, 6))


RULE = dict(epochs=1, lr=0.01, batch_size=48, seed=0)


@pytest.mark.parametrize("importance", ["magnitude", "taylor"])
def test_the_cell_prunes_as_torch_pruning_does_itself(importance):
    """Without fine-tuning, the cell's network is the one Torch-Pruning's BasePruner gives with the same
    importance and the classifier ignored (Taylor: the gradient of the mean cross-entropy): half of each
    group's channels gone, its MACs counted by hand as Torch-Pruning counts them."""
    torch.manual_seed(0)
    net, data = Residual().eval(), _data()
    assert ignored_layers(net, data.input_shape) == ["fc"]
    ours = pruned_and_finetuned(net, data, ratio=0.5, importance=importance, finetune_epochs=0, rule=RULE)

    theirs = copy.deepcopy(net)
    if importance == "taylor":
        F.cross_entropy(theirs(data.x_train), data.y_train).backward()
    criterion = (
        tp.importance.MagnitudeImportance(p=2) if importance == "magnitude" else tp.importance.TaylorImportance()
    )
    example = torch.zeros(1, 1, 6, 6)
    tp.pruner.MetaPruner(theirs, example, importance=criterion, pruning_ratio=0.5, ignored_layers=[theirs.fc]).step()
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for name, value in theirs.state_dict().items():
        assert torch.allclose(ours.state_dict()[name], value), name
    assert ours.stem[0].out_channels == 4 and ours.block[0].out_channels == 3
    convolutions = (4 * 1 + 3 * 4 + 4 * 3) * 9 * 36  # out · in channels · 3x3 kernel · 6x6 positions
    biases, norms, relus = (4 + 3 + 4) * 36, 2 * (2 * 4 * 36), (4 + 3) * 36  # the functional ReLU uncounted
    assert count_macs(ours, data.input_shape) == convolutions + biases + norms + relus + 4 * 3 + 3


def test_fine_tuning_lowers_the_training_loss():
    torch.manual_seed(0)
    net, data = Residual().eval(), _data()

    def loss(epochs):
        pruned = pruned_and_finetuned(net, data, ratio=0.5, importance="magnitude", finetune_epochs=epochs, rule=RULE)
        with torch.no_grad():
            return F.cross_entropy(pruned.eval()(data.x_train), data.y_train).item()

    assert loss(5) < loss(0)


BOTH = "compare.variants={torch-pruning={importance=['magnitude', 'taylor']}}"


def test_the_baseline_is_chosen_at_unit_level_and_refused_at_weight_level():
    unit = [*TINY, "prune.level='unit'"]
    names = lambda overrides: {cell.name for cell in comparison_cells(*load_comparison(None, overrides))}  # noqa: E731
    assert {"torch-pruning-s0.5-seed0", "torch-pruning-s0.95-seed0"} <= names(unit)
    both = names([*unit, BOTH])
    assert {"torch-pruning-magnitude-s0.5-seed0", "torch-pruning-taylor-s0.5-seed0"} <= both
    assert not any(name.startswith("torch-pruning-s") for name in both)
    grid = names(
        [*unit, "compare.variants={torch-pruning={importance=['magnitude', 'taylor'], scope=['global', 'layer']}}"]
    )
    rows = {name.removesuffix("-s0.5-seed0") for name in grid if name.endswith("-s0.5-seed0")}
    products = {f"torch-pruning-{i}-{s}" for i in ("magnitude", "taylor") for s in ("global", "layer")}
    assert {row for row in rows if row.startswith("torch-pruning")} == products  # every combination, once
    none = "compare.variants={torch-pruning={importance=[]}}"
    assert not any(name.startswith("torch-pruning") for name in names([*unit, none]))
    assert not any(name.startswith("torch-pruning") for name in names(TINY))  # its sparsities are of units
    with pytest.raises(ConfigError, match=r"compare.methods: torch-pruning prunes at prune.level = 'unit' only"):
        names([*TINY, "compare.methods=['torch-pruning']"])
    with pytest.raises(ConfigError, match="torch-pruning.importance must be one of"):
        names([*unit, "compare.variants={torch-pruning={importance=['l1']}}"])
    with pytest.raises(ConfigError, match=r"compare.variants must .* got \{'torch-pruning': \{'nope'"):
        load_comparison(None, [*unit, "compare.variants={torch-pruning={nope=[1]}}"])


def test_the_leaderboard_measures_the_smaller_network_and_a_sparsity_added_later(tmp_path):
    """digits' 64-100-10 MLP at unit level, the cell run as a worker runs it: Torch-Pruning's row at 50 % has
    50 hidden units, its params and MACs counted by hand, its error the fine-tuned network's; a sparsity
    added later is a cell of its own, its row at 80 % counted by hand too."""
    raw, options = load_comparison(None, [*TINY, "prune.level='unit'", "data.batch_size=512"])
    options = replace(options, sparsities=(0.5, 0.8))
    cells = {cell.sparsity: cell for cell in comparison_cells(raw, options) if cell.method == "torch-pruning"}
    cell = cells[0.5]
    folder = tmp_path / cell.name
    metrics = execute(cell, str(folder))
    (row,) = leaderboard_rows([cell], [folder], options)
    hidden = 50
    assert row["method"] == "torch-pruning" and row["sparsity"] == 0.5
    macs = 64 * hidden + hidden + hidden + hidden * 10 + 10  # products, bias additions, the activation
    assert row["macs"] == macs and row["params"] == 65 * hidden + (hidden + 1) * 10
    assert row["test_error"] == metrics["pruning_curve"][0]["test_error_finetuned"] != metrics["test_error"]
    assert row["train_epochs"] == 2  # the plain network's epoch and one of fine-tuning, as magnitude's
    with pytest.raises(
        BayesPruneError, match=r"holds another fit .*\(its config.toml differs at torch-pruning.importance\)"
    ):
        check_folder(replace(cell, config={**cell.config, "torch-pruning": {"importance": "taylor"}}), folder)

    more = cells[0.8]
    execute(more, str(tmp_path / more.name))
    rows = {row["sparsity"]: row for row in leaderboard_rows([cell, more], [folder, tmp_path / more.name], options)}
    assert rows[0.5]["test_error"] == row["test_error"]
    kept = 19  # Torch-Pruning keeps int(100 · (1 − 0.8)) units, 19 in floating point
    assert rows[0.8]["macs"] == 64 * kept + kept + kept + kept * 10 + 10


def test_a_failed_cell_fills_the_failed_column_of_each_of_its_rows(tmp_path):
    raw, options = load_comparison(None, [*TINY, "prune.level='unit'", "compare.sparsities=[0.5, 0.8]"])
    cells = [cell for cell in comparison_cells(raw, options) if cell.method in ("torch-pruning", "sparse-vd")]
    failed = [{"failed": "RuntimeError: broke"}] * len(cells)
    rows = leaderboard_rows(cells, [tmp_path / cell.name for cell in cells], options, failed)
    by = {(row["method"], row["sparsity"]): (row["failed"], row["seeds"]) for row in rows}
    assert by == {
        **{("torch-pruning", s): (f"torch-pruning-s{s:g}-seed0: RuntimeError: broke", 0) for s in (0.5, 0.8)},
        **{("sparse-vd", s): ("sparse-vd-seed0: RuntimeError: broke", 0) for s in (0.5, 0.8)},
    }


def test_a_network_without_hidden_units_is_refused_before_any_fit():
    raw, options = load_comparison(None, [*TINY, "prune.level='unit'", "model.hidden=[]"])
    cell = next(cell for cell in comparison_cells(raw, options) if cell.method == "torch-pruning")
    # the run's own pre-fit check (pipeline.checks.check_before_fit), before Torch-Pruning's
    assert refusal(cell, {}).startswith("prune.level = 'unit': the network has no hidden units to remove")


ATTENTION_NET = """
from torch import nn


class Tokens(nn.Module):
    def __init__(self, output_dim):
        super().__init__()
        self.embed = nn.Linear(64, 64)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, output_dim)

    def forward(self, x):
        tokens = self.embed(x.flatten(1)).view(-1, 8, 8)
        return self.head(self.attention(tokens, tokens, tokens, need_weights=False)[0].mean(1))


def net(input_shape, output_dim):
    return Tokens(output_dim)
"""


def test_a_unit_level_row_measures_the_network_without_the_removed_attention_head(tmp_path, monkeypatch):
    """A run cell at unit level whose scores remove one of two attention heads: the row's MACs are those of
    the network without it, counted by hand as Torch-Pruning counts ``nn.MultiheadAttention`` (before, the
    head was zeroed in place and counted)."""
    from bayesprune.models import new_net
    from bayesprune.pipeline import runner
    from bayesprune.pipeline.compare.leaderboard import measure
    from bayesprune.pipeline.config import RunConfig

    (tmp_path / "attention_net.py").write_text(ATTENTION_NET)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = RunConfig.from_dict({"model": {"factory": "attention_net:net"}, "prune": {"level": "unit"}})
    dataset = SimpleNamespace(input_shape=(1, 8, 8), output_dim=10)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=0).eval()
    fitted = SimpleNamespace(network=lambda: net, net=net, scores=lambda: {"attention.gate": torch.tensor([2.0, 1.0])})
    monkeypatch.setattr(runner, "load_run", lambda folder: (config, dataset, fitted))
    row = measure(SimpleNamespace(), tmp_path, 0.5, SimpleNamespace(latency_batch=2, latency_repeats=1))
    tokens, width, head = 8, 8, 4  # one head of 4 channels left
    projections = tokens * width * 3 * head + 3 * tokens * head  # query/key/value rows and biases
    out_proj = tokens * (head * width + width)
    attention = tokens * head + 2 * tokens * tokens * head + tokens * tokens  # scaling, scores, softmax, sums
    assert row["macs"] == 64 * 64 + 64 + projections + out_proj + attention + width * 10 + 10


def test_a_method_whose_pruned_networks_are_fine_tuned_reports_their_error_and_epochs(tmp_path):
    """prune.finetune_epochs = 2 in a unit-level comparison: Sparse VD's row is the fine-tuned network's error
    from its pruning curve and counts those epochs; a sparsity added later is fine-tuned too."""
    overrides = [*TINY, "prune.level='unit'", "prune.finetune_epochs=2", "data.batch_size=512"]
    raw, options = load_comparison(None, [*overrides, "compare.sparsities=[0.5]"])
    (cell,) = [cell for cell in comparison_cells(raw, options) if cell.method == "sparse-vd"]
    metrics = execute(cell, str(tmp_path / cell.name))
    (row,) = leaderboard_rows([cell], [tmp_path / cell.name], options)
    (point,) = [point for point in metrics["pruning_curve"] if point["droprate"] == 0.5]
    assert row["test_error"] == point["test_error_finetuned"] != point["test_error"]
    assert row["train_epochs"] == metrics["train_epochs"] + 2
    assert row["train_steps"] == metrics["train_steps"] + 2 * metrics["train_steps"] // metrics["train_epochs"]

    more = replace(cell, sparsities=(0.5, 0.8))
    metrics = execute(more, str(tmp_path / cell.name))
    assert all("test_error_finetuned" in point for point in metrics["pruning_curve"])
    rows = leaderboard_rows([more], [tmp_path / cell.name], options)
    assert [r["sparsity"] for r in rows] == [0.5, 0.8] and rows[0]["test_error"] == row["test_error"]


def test_rows_at_equal_macs_get_the_comparisons_fine_tuning_unless_their_fit_has_its_own():
    """hard-concrete (no fine-tuning of its own) gets ``[prune]``'s, one cell per MAC target; unit gates, whose fit
    fine-tunes (``unit-gates.finetune_epochs``), gets none on top; Torch-Pruning ``compare.finetune_epochs``."""
    overrides = [*TINY, "prune.level='unit'", "prune.macs=[0.5, 0.3]", "prune.finetune_epochs=4"]
    cells = comparison_cells(*load_comparison(None, [*overrides, "compare.methods=['hard-concrete', 'unit-gates']"]))
    epochs = {cell.name: cell.run_config().prune.finetune_epochs for cell in cells}
    assert epochs["hard-concrete-m0.5-seed0"] == epochs["hard-concrete-m0.3-seed0"] == 4
    assert epochs["unit-gates-m0.5-seed0"] == 0
    assert epochs["torch-pruning-m0.3-seed0"] == 1
    assert {cell.run_config().method_options.macs for cell in cells if cell.method == "hard-concrete"} == {0.5, 0.3}
