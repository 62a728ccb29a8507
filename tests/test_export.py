"""Unit-level pruning, export to smaller layers, resizing, portable files and masks under fine-tuning,
each against the masked dense network or a hand count."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.export import (count_macs, count_parameters, export, mask_parameters, measure_latency, resize,
                               save_portable, unmask_parameters)
from bayesprune.models import lenet_5_caffe, lenet_5_classic, lenet_300_100, mlp
from bayesprune.pruning import Budget, apply_masks, expand_unit_masks, prune, sparsity, unit_scores
from bayesprune.structure import layer_chain


class ClassicLeNet5(nn.Module):
    """The same classic LeNet-5 as a module with a forward of its own (functional ReLU, pooling, view)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).view(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


NETWORKS = {
    "mlp": (lambda: mlp((12,), 3, hidden=[9, 7]), (12,)),
    "lenet-300-100": (lambda: lenet_300_100((784,), 10), (784,)),
    "lenet-5-caffe": (lambda: lenet_5_caffe((1, 28, 28), 10), (1, 28, 28)),
    "lenet-5-classic": (lambda: lenet_5_classic((1, 28, 28), 10), (1, 28, 28)),
    "lenet-5-classic-forward": (ClassicLeNet5, (1, 28, 28)),
}


def masked_dense(net, masks):
    params = apply_masks(dict(net.named_parameters()), masks)
    return lambda x: torch.func.functional_call(net, params, (x,))


def random_scores(net, generator):
    return {name: torch.rand(p.shape, generator=generator) for name, p in net.named_parameters()}


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_unit_export_equals_the_masked_dense_network(name, scope):
    torch.manual_seed(0)
    build, shape = NETWORKS[name]
    net = build().eval()
    scores = random_scores(net, torch.Generator().manual_seed(1))
    units = prune(scores, Budget(fraction=0.5, level="unit", scope=scope, min_keep=1), net=net)
    hidden = layer_chain(net, shape)[:-1]
    assert set(units) == {layer.gate_site for layer in hidden}
    small = export(net, units, input_shape=shape)
    x = torch.randn(16, *shape)
    with torch.no_grad():
        expected = masked_dense(net, expand_unit_masks(net, units))(x)
        assert (small(x) - expected).abs().max() < 1e-5
    kept = {layer.name: int(units[layer.gate_site].sum()) for layer in hidden}
    for layer in layer_chain(small):
        if layer.name in kept:
            assert layer.units == kept[layer.name]
    assert count_parameters(small)["total"] < count_parameters(net)["total"]


def test_unit_scores_are_row_means_of_the_weight_scores():
    net = mlp((4,), 2, hidden=[3])
    scores = random_scores(net, torch.Generator().manual_seed(2))
    units = unit_scores(scores, net)
    assert list(units) == ["1.gate"]
    by_hand = [sum(scores["1.weight"][i].tolist()) / 4 for i in range(3)]
    assert units["1.gate"].tolist() == pytest.approx(by_hand)
    gate = torch.tensor([0.3, 0.9, 0.1])
    assert prune({"1.gate": gate}, Budget(keep=1, level="unit"), net=net)["1.gate"].tolist() == [False, True, False]


def test_expand_unit_masks_zeroes_rows_biases_and_the_next_layers_channel_blocks():
    net = lenet_5_caffe((1, 16, 16), 3)  # conv 20 → pool → conv 50 → pool → flatten (50·1·1) → fc 500 → fc 3
    units = {"3.gate": torch.arange(50) % 2 == 0}
    masks = expand_unit_masks(net, units)
    assert masks["3.weight"][1].sum() == 0 and masks["3.weight"][0].all() and masks["3.bias"].tolist()[:2] == [True, False]
    per_channel = net[7].in_features // 50
    assert masks["7.weight"][:, per_channel:2 * per_channel].sum() == 0 and masks["7.weight"][:, :per_channel].all()


@pytest.mark.parametrize("name", NETWORKS)
def test_weight_level_export_equals_the_masked_dense_network(name):
    build, shape = NETWORKS[name]
    net = build().eval()
    masks = prune(random_scores(net, torch.Generator().manual_seed(6)), Budget(fraction=0.8))
    x = torch.randn(16, *shape)
    with torch.no_grad():
        assert (export(net, masks)(x) - masked_dense(net, masks)(x)).abs().max() < 1e-5


def test_weight_level_export_is_a_copy_with_zeros():
    net = mlp((5,), 2, hidden=[4])
    masks = prune(random_scores(net, torch.Generator().manual_seed(3)), Budget(fraction=0.5))
    exported = export(net, masks)
    x = torch.randn(7, 5)
    assert torch.allclose(exported(x), masked_dense(net, masks)(x), atol=1e-6)
    kept = sum(int(mask.sum()) for mask in masks.values())
    assert count_parameters(exported) == {"total": 34, "nonzero": kept}
    assert count_parameters(net) == {"total": 34, "nonzero": 34}  # the original is untouched


def test_unsupported_modules_are_named():
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"module '1' \(BatchNorm1d\)"):
        export(net, {"0.gate": torch.tensor([True, False, True])})


@pytest.mark.parametrize("masks, match", [
    ({"1.weight": torch.ones(4, dtype=torch.bool)}, r"mask of '1.weight' has shape \(4,\)"),
    ({"1.gate": torch.ones(5, dtype=torch.bool)}, r"mask '1.gate' has shape \(5,\), the layer 4 units"),
    ({"3.gate": torch.ones(2, dtype=torch.bool)}, r"not hidden layers of the chain: \['3.gate'\]"),
    ({"1.gate": torch.zeros(4, dtype=torch.bool)}, r"removes every unit of layer '1'"),
])
def test_bad_masks_are_named(masks, match):
    with pytest.raises(ValueError, match=match):
        export(mlp((5,), 2, hidden=[4]), masks)


def test_lenet_300_100_macs_by_hand_and_a_conv_net():
    assert count_macs(lenet_300_100((784,), 10), (784,)) == 784 * 300 + 300 * 100 + 100 * 10
    conv = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 5))
    assert count_macs(conv, (2, 6, 6)) == 4 * 4 * 3 * 2 * 3 * 3 + 48 * 5


def test_a_shrunk_network_saved_and_restored_predicts_identically(tmp_path):
    net = lenet_5_caffe((1, 28, 28), 10).eval()
    units = prune(random_scores(net, torch.Generator().manual_seed(4)), Budget(keep=40, level="unit"), net=net)
    small = export(net, units)
    torch.save({"structure": {name: list(p.shape) for name, p in small.named_parameters()}, "state": small.state_dict()},
               tmp_path / "small.pt")
    saved = torch.load(tmp_path / "small.pt", weights_only=True)
    rebuilt = resize(lenet_5_caffe((1, 28, 28), 10), saved["structure"]).eval()
    rebuilt.load_state_dict(saved["state"])
    x = torch.randn(5, 1, 28, 28)
    assert torch.equal(rebuilt(x), small(x))


def test_the_portable_file_runs_without_bayesprune_or_pyro(tmp_path):
    net = export(lenet_300_100((784,), 10).eval(),
                 {"1.gate": torch.arange(300) < 120, "3.gate": torch.arange(100) < 30})
    path = tmp_path / "net.pt2"
    save_portable(net, path, torch.randn(2, 784))
    x = torch.randn(64, 784)
    torch.save(x, tmp_path / "x.pt")
    torch.save(net(x).detach(), tmp_path / "y.pt")
    code = (
        "import sys; sys.modules['pyro'] = None; sys.modules['bayesprune'] = None\n"
        "import torch\n"
        f"net = torch.export.load({str(path)!r}).module()\n"
        f"x = torch.load({str(tmp_path / 'x.pt')!r}); y = torch.load({str(tmp_path / 'y.pt')!r})\n"
        "assert torch.allclose(net(x), y, atol=1e-6)\n"
        "assert all(net(torch.zeros(n, 784)).shape == (n, 10) for n in (1, 64, 1024))\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("level", ["weight", "unit"])
@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_masks_survive_fine_tuning_with_weight_decay(optimizer, level):
    torch.manual_seed(0)
    net = mlp((6,), 3, hidden=[8, 5])
    given = prune(random_scores(net, torch.Generator().manual_seed(5)), Budget(fraction=0.5, level=level), net=net)
    masks = expand_unit_masks(net, given) if level == "unit" else given
    with torch.no_grad():  # pruned weights start non-zero: only the mask keeps them at zero
        for p in net.parameters():
            p.add_(0.5)
    mask_parameters(net, given)
    opt = optimizer(net.parameters(), lr=0.05, weight_decay=1e-2)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    for _ in range(30):
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    unmask_parameters(net)
    params = dict(net.named_parameters())
    for name, mask in masks.items():
        assert torch.all(params[name][~mask] == 0) and torch.all(params[name][mask] != 0)
    total = sum(m.numel() for m in masks.values())
    assert sum(int((params[name] == 0).sum()) for name in masks) == round(sparsity(masks) * total)


def test_latency_is_measured_at_every_batch_size_and_leaves_the_network_as_it_was():
    net = mlp((5,), 2, hidden=[4]).train()
    seconds = measure_latency(net, (5,), batch_sizes=(1, 3), warmup=1, repeats=3)
    assert list(seconds) == [1, 3] and all(s > 0 for s in seconds.values())
    assert net.training
