"""Unit-level pruning, export to smaller layers (through Torch-Pruning's dependency graph), resizing,
portable and trainable files and masks under fine-tuning, each against the masked dense network or a
hand count."""

import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import torch_pruning as tp
import torchvision
from torch import nn

from bayesprune.core.chain import layer_chain
from bayesprune.core.export import (
    count_macs,
    count_parameters,
    cut,
    dead_units,
    export,
    load_trainable,
    mask_parameters,
    measure_latency,
    resize,
    restrict,
    save_portable,
    save_trainable,
    unmask_parameters,
)
from bayesprune.core.pruning import Budget, apply_masks, expand_unit_masks, prune, sparsity, unit_scores
from bayesprune.core.structure import shrunk
from bayesprune.methods import available_methods
from bayesprune.models import lenet_5_caffe, lenet_5_classic, lenet_300_100, mlp
from helpers import ClassicLeNet5

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
    units = prune(scores, Budget(sparsity=0.5, level="unit", scope=scope, min_keep=1), net=net)
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
    assert (
        masks["3.weight"][1].sum() == 0 and masks["3.weight"][0].all() and masks["3.bias"].tolist()[:2] == [True, False]
    )
    per_channel = net[7].in_features // 50
    assert masks["7.weight"][:, per_channel : 2 * per_channel].sum() == 0 and masks["7.weight"][:, :per_channel].all()


@pytest.mark.parametrize("name", NETWORKS)
def test_weight_level_export_equals_the_masked_dense_network(name):
    build, shape = NETWORKS[name]
    net = build().eval()
    masks = prune(random_scores(net, torch.Generator().manual_seed(6)), Budget(sparsity=0.8))
    x = torch.randn(16, *shape)
    with torch.no_grad():
        assert (export(net, masks)(x) - masked_dense(net, masks)(x)).abs().max() < 1e-5


def test_weight_level_export_is_a_copy_with_zeros():
    net = mlp((5,), 2, hidden=[4])
    masks = prune(random_scores(net, torch.Generator().manual_seed(3)), Budget(sparsity=0.5))
    exported = export(net, masks)
    x = torch.randn(7, 5)
    assert torch.allclose(exported(x), masked_dense(net, masks)(x), atol=1e-6)
    kept = sum(int(mask.sum()) for mask in masks.values())
    assert count_parameters(exported) == {"total": 34, "nonzero": kept}
    assert count_parameters(net) == {"total": 34, "nonzero": 34}  # the original is untouched


class MixesChannels(nn.Module):
    """A softmax across the hidden units: zeroing a unit is not removing it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 3), nn.Linear(3, 2)

    def forward(self, x):
        return self.fc2(torch.softmax(self.fc1(x), dim=1))


def test_a_removal_torch_pruning_cannot_see_is_refused_naming_the_module():
    with pytest.raises(ValueError, match=r"^module 'fc1': removing its units does not compute the masked network"):
        export(MixesChannels(), {"fc1.gate": torch.arange(3) != 1})


def test_batch_norm_between_linear_layers_shrinks_with_its_units():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    net.train()(torch.randn(32, 4))  # running statistics away from 0 and 1
    net.eval()
    small = export(net, {"0.gate": torch.tensor([True, False, True])})
    assert small[1].num_features == 2 and small[1].running_mean.shape == (2,) and small[3].in_features == 2
    x = torch.randn(8, 4)
    masks = expand_unit_masks(net, {"0.gate": torch.tensor([True, False, True])})
    assert set(masks) == {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight"}
    with torch.no_grad():
        assert (small(x) - masked_dense(net, masks)(x)).abs().max() < 1e-6


@pytest.mark.parametrize(
    "masks, match",
    [
        ({"1.weight": torch.ones(4, dtype=torch.bool)}, r"mask of '1.weight' has shape \(4,\)"),
        ({"1.gate": torch.ones(5, dtype=torch.bool)}, r"mask '1.gate' has shape \(5,\), the layer 4 units"),
        (
            {"3.gate": torch.ones(2, dtype=torch.bool)},
            r"for no unit group of the network \(the groups: \['1.gate'\]\): \['3.gate'\]",
        ),
        ({"1.gate": torch.zeros(4, dtype=torch.bool)}, r"removes every unit of layer '1'"),
    ],
)
def test_bad_masks_are_named(masks, match):
    with pytest.raises(ValueError, match=match):
        export(mlp((5,), 2, hidden=[4]), masks)


def test_lenet_300_100_macs_by_hand_and_a_conv_net():
    """Torch-Pruning's conventions (``tp.utils.count_ops_and_params``): a layer's products and one bias
    addition per output (per position for a convolution), an activation one operation per element."""
    products = 784 * 300 + 300 * 100 + 100 * 10
    assert count_macs(lenet_300_100((784,), 10), (784,)) == products + (300 + 100 + 10) + (300 + 100)
    conv = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 5))
    assert count_macs(conv, (2, 6, 6)) == 4 * 4 * 3 * 2 * 3 * 3 + 48 + 48 + 48 * 5 + 5


def test_a_shrunk_network_saved_and_restored_predicts_identically(tmp_path):
    net = lenet_5_caffe((1, 28, 28), 10).eval()
    units = prune(random_scores(net, torch.Generator().manual_seed(4)), Budget(keep=40, level="unit"), net=net)
    small = export(net, units)
    torch.save(
        {"structure": {name: list(p.shape) for name, p in small.named_parameters()}, "state": small.state_dict()},
        tmp_path / "small.pt",
    )
    saved = torch.load(tmp_path / "small.pt", weights_only=True)
    rebuilt = resize(lenet_5_caffe((1, 28, 28), 10), saved["structure"]).eval()
    rebuilt.load_state_dict(saved["state"])
    x = torch.randn(5, 1, 28, 28)
    assert torch.equal(rebuilt(x), small(x))


def test_the_portable_file_runs_without_bayesprune_or_pyro(tmp_path):
    net = export(
        lenet_300_100((784,), 10).eval(), {"1.gate": torch.arange(300) < 120, "3.gate": torch.arange(100) < 30}
    )
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
    given = prune(random_scores(net, torch.Generator().manual_seed(5)), Budget(sparsity=0.5, level=level), net=net)
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


class Block(nn.Module):
    """Two 3x3 conv + batch-norm layers with an identity skip, or a 1x1 conv + batch-norm projection."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.skip = (
            nn.Identity()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + self.skip(x))


class ResNet(nn.Module):
    """A stem, an identity block, a projection block, global average pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.block1, self.block2 = Block(8, 8), Block(8, 12, stride=2)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.block2(self.block1(self.stem(x))), 1).flatten(1))


#: The residual network's unit groups by hand: gate site → (conv, batch norm) pairs producing its channels.
RESNET_GROUPS = {
    "stem.0.gate": [("stem.0", "stem.1"), ("block1.conv2", "block1.bn2")],  # tied by the identity skip
    "block1.conv1.gate": [("block1.conv1", "block1.bn1")],
    "block2.conv1.gate": [("block2.conv1", "block2.bn1")],
    "block2.conv2.gate": [("block2.conv2", "block2.bn2"), ("block2.skip.0", "block2.skip.1")],  # tied by the projection
}


def trained_resnet():
    torch.manual_seed(0)
    net = ResNet()
    with torch.no_grad():  # batch norms with statistics and affine parameters away from their defaults
        for module in net.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
        net.train()(torch.randn(16, 3, 12, 12))
    return net.eval()


def test_residual_units_removed_through_the_dependency_graph_compute_the_masked_network():
    net = trained_resnet()
    shape = (3, 12, 12)
    units = prune(
        random_scores(net, torch.Generator().manual_seed(7)),
        Budget(sparsity=0.5, level="unit", min_keep=1),
        net=net,
        input_shape=shape,
    )
    assert list(units) == list(RESNET_GROUPS)
    small = export(net, units, input_shape=shape).eval()
    # oracle: every removed channel's conv filter and batch-norm weight and bias zeroed by hand
    oracle = copy.deepcopy(net)
    with torch.no_grad():
        for site, pairs in RESNET_GROUPS.items():
            removed = ~units[site]
            for conv, norm in pairs:
                oracle.get_submodule(conv).weight[removed] = 0
                oracle.get_submodule(norm).weight[removed] = 0
                oracle.get_submodule(norm).bias[removed] = 0
    x = torch.randn(6, *shape)
    with torch.no_grad():
        assert (small(x) - oracle(x)).abs().max() < 1e-5
        assert (small(x) - masked_dense(net, expand_unit_masks(net, units, input_shape=shape))(x)).abs().max() < 1e-5
    kept = {site: int(mask.sum()) for site, mask in units.items()}
    assert (
        small.stem[0].out_channels
        == small.stem[1].num_features
        == small.block1.conv2.out_channels
        == kept["stem.0.gate"]
    )
    assert small.block1.conv1.in_channels == small.block2.skip[0].in_channels == kept["stem.0.gate"]
    assert small.block2.skip[0].out_channels == small.head.in_features == kept["block2.conv2.gate"]
    assert small.head.out_features == 5
    assert count_macs(small, shape) < count_macs(net, shape)


def test_a_shrunk_residual_network_is_rebuilt_from_its_shapes_and_restricts_optimiser_moments(tmp_path):
    net = trained_resnet()
    shape = (3, 12, 12)
    units = {
        site: torch.arange(mask_len) % 3 != 1
        for site, mask_len in (
            ("stem.0.gate", 8),
            ("block1.conv1.gate", 8),
            ("block2.conv1.gate", 12),
            ("block2.conv2.gate", 12),
        )
    }
    small = export(net, units, input_shape=shape)
    rebuilt = resize(ResNet(), {name: list(p.shape) for name, p in small.named_parameters()}, input_shape=shape)
    rebuilt.load_state_dict(small.state_dict())
    x = torch.randn(3, *shape)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(x), small.eval()(x))
    moments = restrict(dict(net.named_parameters()), net, units, input_shape=shape)
    assert all(torch.equal(moments[name], p) for name, p in small.named_parameters())


def test_shrunk_gives_the_exported_network_and_the_cuts_of_its_parameters():
    """The one-removal copy unit-gate training uses equals export's network (Torch-Pruning on a copy, then
    checked against the masked network): every parameter and buffer (batch norm's running statistics) in
    value and dtype, and the cuts give the parameters."""
    net = trained_resnet()
    with torch.no_grad():  # running statistics that are not the initial zeros and ones
        net.train()(torch.randn(16, 3, 12, 12))
    net.eval()
    shape = (3, 12, 12)
    units = {
        site: torch.arange(mask_len) % 3 != 2
        for site, mask_len in (
            ("stem.0.gate", 8),
            ("block1.conv1.gate", 8),
            ("block2.conv1.gate", 12),
            ("block2.conv2.gate", 12),
        )
    }
    small, cuts = shrunk(net, units, input_shape=shape)
    oracle = export(net, units, input_shape=shape)
    for theirs, ours in (
        (dict(oracle.named_parameters()), dict(small.named_parameters())),
        (dict(oracle.named_buffers()), dict(small.named_buffers())),
    ):
        assert theirs.keys() == ours.keys()
        assert all(ours[name].dtype == theirs[name].dtype and torch.equal(ours[name], theirs[name]) for name in theirs)
    params = dict(net.named_parameters())
    cut_params = cut(params, cuts, {name: param.shape for name, param in params.items()})
    assert cut_params.keys() == dict(small.named_parameters()).keys()
    assert all(torch.equal(tensor, dict(small.named_parameters())[name]) for name, tensor in cut_params.items())
    x = torch.randn(4, *shape)
    with torch.no_grad():
        assert torch.equal(small.eval()(x), oracle.eval()(x))


def test_unit_scores_of_a_residual_group_pool_the_rows_of_every_producer():
    net = trained_resnet()
    scores = random_scores(net, torch.Generator().manual_seed(8))
    units = unit_scores(scores, net, input_shape=(3, 12, 12))
    rows = torch.cat([scores["block2.conv2.weight"].flatten(1), scores["block2.skip.0.weight"].flatten(1)], 1).double()
    assert torch.allclose(units["block2.conv2.gate"], rows.mean(1))


def test_dead_units_are_those_that_produce_nothing_or_are_read_by_nothing():
    net = mlp((5,), 2, hidden=[4, 3])
    with torch.no_grad():
        net[1].weight[1], net[1].bias[1] = 0, 0  # unit 1 of layer 1 outputs zero
        net[3].weight[:, 2] = 0  # unit 2 of layer 1 is read by nothing
        net[3].weight[0] = 0  # unit 0 of layer 3 has zero weights but a bias: alive
    assert {site: mask.tolist() for site, mask in dead_units(net).items()} == {"1.gate": [True, False, False, True]}
    small = export(net, dead_units(net))
    x = torch.randn(7, 5)
    assert torch.allclose(small(x), net(x), atol=1e-6) and small[1].out_features == 2


def test_the_trainable_file_loads_weights_only_trains_and_computes_the_export(tmp_path):
    net = trained_resnet()
    small = export(
        nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 10 * 10, 3)).eval(),
        {"0.gate": torch.tensor([True, False, True, True])},
        input_shape=(3, 12, 12),
    )
    path = tmp_path / "net.trainable.pt"
    save_trainable(small, path, input_shape=(3, 12, 12))
    saved = torch.load(path, weights_only=True)
    assert saved["input_shape"] == [3, 12, 12]
    rebuilt = load_trainable(path)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(x), small.eval()(x))
    rebuilt.train()
    loss = rebuilt(x).square().sum()
    loss.backward()
    assert rebuilt[0].weight.grad is not None and rebuilt[0].out_channels == 3
    with pytest.raises(ValueError, match=r"^the network \(ResNet\) has a forward of its own"):
        save_trainable(net, tmp_path / "resnet.pt", input_shape=(3, 12, 12))


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_the_export_of_what_the_method_learned_has_the_runs_test_error(method, short_config, tmp_path, capsys):
    """`bayesprune export RUN_DIR` without a budget: the written file, loaded back, errs as the run does."""
    import json

    from bayesprune.cli import main
    from bayesprune.pipeline.runner import run

    run(short_config(method), tmp_path / "run")
    target = tmp_path / "net.pt2"
    # the network the run reports, not fine-tuned again (a method whose config fine-tunes: prune.finetune_epochs)
    command = [
        "export",
        str(tmp_path / "run"),
        "--out",
        str(target),
        "--json",
        "--repeats",
        "1",
        "--finetune-epochs",
        "0",
    ]
    assert main(command) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget"] is None and report["input_shape"] == [1, 8, 8]
    if method == "sbnn":  # the run's figure is of the posterior mean; the export removes weights of p* < 1/2
        assert (
            report["method_test_error"] is not None and abs(report["test_error"] - report["method_test_error"]) <= 0.1
        )
    else:
        assert report["method_test_error"] is None and abs(report["test_error"] - report["run_test_error"]) <= 0.1, (
            report
        )
    assert report["max_abs_difference_to_masked"] < 1e-4
    assert report["exported"]["parameters"]["total"] <= report["dense"]["parameters"]["total"]
    trainable = load_trainable(report["trainable_file"])
    assert torch.load(report["trainable_file"], weights_only=True)["input_shape"] == [1, 8, 8]
    x = 16 * torch.rand(4, 1, 8, 8)  # the digits' values as scikit-learn holds them: the file divides them by 16
    with torch.no_grad():
        assert torch.allclose(trainable(x / 16), torch.export.load(str(target)).module()(x), atol=1e-5)
    trainable.train()
    trainable(x).sum().backward()
    print(
        method,
        report["run_test_error"],
        report["test_error"],
        report["removed_dead_units"],
        report["dense"]["parameters"],
        report["exported"]["parameters"],
        file=sys.stderr,
    )


@pytest.mark.parametrize(
    "build, shape",
    [
        (lambda: torchvision.models.resnet18(num_classes=10), (3, 32, 32)),
        (lambda: torchvision.models.mobilenet_v2(num_classes=10), (3, 32, 32)),
        (
            lambda: torchvision.models.VisionTransformer(
                image_size=8, patch_size=4, num_layers=1, num_heads=4, hidden_dim=32, mlp_dim=37, num_classes=3
            ),
            (3, 8, 8),
        ),
    ],
)
def test_macs_are_torch_prunings_count(build, shape):
    net = build().eval()
    macs, params = tp.utils.count_ops_and_params(net, torch.zeros(1, *shape))
    assert count_macs(net, shape) == macs and count_parameters(net)["total"] == params
