"""Unit gates on any network Torch-Pruning traces (paper 004's gates, one per group of coupled channels):
a gate at 0 is the unit removed from every coupled layer, which :func:`bayesprune.core.structure.shrunk`
computes independently (the oracle), and a network nothing can gate is refused in one line."""

import pytest
import torch
import torchvision
from torch import nn

from bayesprune.cli import main
from bayesprune.core.gates import UnitGates, separable_heads
from bayesprune.core.pruning import unit_scores
from bayesprune.core.structure import shrunk, unit_groups
from bayesprune.methods.unit_gates import GateTraining, UnitGatesOptions, split_groups


def with_statistics(net):
    """``net`` in eval mode with random batch-norm statistics and affine parameters, so that its
    outputs are of order one (torchvision's initialisation leaves MobileNet's near 1e-12)."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, nn.BatchNorm2d):
                for tensor in (module.weight, module.bias, module.running_mean):
                    tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.5)
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
    return net.eval()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_closed_gates_compute_the_network_with_their_coupled_channels_removed(name):
    """Every unit group of torchvision's ResNet-18 (residual stages: stem, blocks' second convolutions
    and projection skip share channels) and MobileNetV2 (depthwise convolutions, inverted residuals)
    has a gate; with random gates at 0 or 1 the gated network's output is the smaller network's."""
    torch.manual_seed(0)
    net = with_statistics(torchvision.models.get_model(name, weights=None, num_classes=10))
    gates = UnitGates(net, input_shape=(3, 32, 32))
    assert gates.ungated == {} and len(gates.groups) == {"resnet18": 12, "mobilenet_v2": 25}[name]
    generator = torch.Generator().manual_seed(1)
    keep = [torch.rand(units, generator=generator) < 0.5 for units in gates.units]
    for k in keep:
        k[0] = True
    x = torch.randn(4, 3, 32, 32, generator=generator)
    smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=(3, 32, 32))
    with torch.no_grad():
        with gates.applied(net, [k.float() for k in keep]):
            gated = net(x)
        expected, dense = smaller.eval()(x), net(x)
    assert sum(p.numel() for p in smaller.parameters()) < 0.6 * sum(p.numel() for p in net.parameters())
    assert expected.abs().max() > 0.1 and not torch.allclose(expected, dense, atol=1e-2)
    torch.testing.assert_close(gated, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


def test_a_network_whose_units_a_layer_norm_mixes_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """A LayerNorm normalises across its units, so closing one at its readers is not removing it: that
    group is no unit group (:func:`~bayesprune.core.structure.unit_groups`), the others have gates, and a
    network with no other group is refused in one line naming the key (nothing written)."""
    net = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    assert UnitGates(net).sites == ["3.gate"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "normed.py").write_text(
        "import math\n\nfrom torch import nn\n\n\ndef net(input_shape, output_dim):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 5), nn.LayerNorm(5), nn.ReLU(),\n"
        "                         nn.Linear(5, output_dim))\n"
    )
    (tmp_path / "run.toml").write_text(
        'method = "unit-gates"\ndevice = "cpu"\n[data]\ndataset = "digits"\n[model]\nfactory = "normed:net"\n'
        '[prune]\nlevel = "unit"\n'
    )
    assert main(["run", "run.toml", "--out", "out", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "prune.level" in err and "no hidden units to remove" in err
    assert not (tmp_path / "out").exists()


def small_vit():
    """A two-layer torchvision VisionTransformer of two heads, its classifier random (torchvision starts it at 0)."""
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    net = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    nn.init.normal_(net.heads.head.weight)
    return net.eval()


def test_a_vision_transformers_heads_and_mlp_units_are_gates_that_close_as_removed():
    """The heads of nn.MultiheadAttention (held as a HeadsRemovedAttention of all its heads: the same
    outputs) and the MLP hidden units are gated; closed gates compute the smaller network; the residual
    stream, which LayerNorms normalise across, has no gate."""
    net, x = small_vit(), torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        dense = net(x)
        separable_heads(net, (3, 32, 32))
        torch.testing.assert_close(net(x), dense, rtol=1e-5, atol=1e-5)
    gates = UnitGates(net, input_shape=(3, 32, 32))
    assert gates.units == [2, 64, 2, 64] and gates.sites[0] == "encoder.layers.encoder_layer_0.self_attention.gate"
    keep = [torch.tensor([True, False]), torch.arange(64) % 3 == 0, torch.tensor([False, True]), torch.arange(64) < 5]
    smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=(3, 32, 32))
    with torch.no_grad():
        with gates.applied(net, [k.float() for k in keep]):
            gated = net(x)
        expected = smaller.eval()(x)
    assert smaller.encoder.layers[0].self_attention.num_heads == 1 and not torch.allclose(expected, dense, atol=1e-2)
    torch.testing.assert_close(gated, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


def test_a_head_leaves_the_vision_transformer_at_the_step_its_gate_meets_the_pruning_condition():
    """Algorithm 1, step 4 on a transformer: a head whose θ is below θ_tol is removed at that step; the
    smaller network is the updated one with that head's gate at 0."""
    net = separable_heads(small_vit().train(), (3, 32, 32))
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 3, 32, 32, generator=generator), torch.arange(8) % 10
    training = GateTraining(net, UnitGatesOptions(), num_train=8, lr=1e-6, input_shape=(3, 32, 32))
    with torch.no_grad():
        training.gates.theta[2][0] = 1e-4  # head 0 of the second layer; a step of lr 1e-6 cannot lift it past 1e-3
    training.step(x, y, 0, 10)
    assert training.kept_units[2].tolist() == [1] and training.gates.units == [2, 64, 1, 64]
    assert training.net.encoder.layers[1].self_attention.num_heads == 1
    values = [torch.ones(2), torch.ones(64), torch.tensor([0.0, 1.0]), torch.ones(64)]
    net.eval()
    training.net.eval()
    with torch.no_grad(), UnitGates(net, input_shape=(3, 32, 32)).applied(net, values):
        expected = net(x)
    with torch.no_grad():
        torch.testing.assert_close(training.net(x), expected, rtol=1e-4, atol=1e-5)


def test_remove_at_epoch_holds_a_switched_off_units_gate_at_0_and_removes_it_at_the_epochs_end():
    """``remove_at = "epoch"``: a unit meeting the pruning condition stays in the network with θ = 0 (its
    gate always 0) until the epoch ends, when one rebuild removes it; the smaller network computes the
    network with that gate closed."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.Tanh(), nn.Linear(6, 3))
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 5, generator=generator), torch.randint(0, 3, (32,), generator=generator)
    training = GateTraining(net, UnitGatesOptions(remove_at="epoch"), num_train=100, lr=1e-6)
    with torch.no_grad():
        training.gates.theta[0][[2, 5]] = 1e-4
    training.step(x, y, 0, 2)
    assert training.gates.units == [7, 6] and training.gates.theta[0][[2, 5]].tolist() == [0.0, 0.0]
    assert training.estimator.values(training.gates)[0][[2, 5]].tolist() == [0.0, 0.0]
    training.step(x, y, 1, 2)  # the second step: θ stays 0, every other θ is finite
    assert training.gates.theta[0][[2, 5]].tolist() == [0.0, 0.0] and bool(training.gates.raw.isfinite().all())
    values = [torch.tensor([1.0, 1, 0, 1, 1, 0, 1]), torch.ones(6)]
    with torch.no_grad(), UnitGates(net).applied(net, values):
        expected = net(x)
    training.on_epoch(0, None)
    assert training.kept_units[0].tolist() == [0, 1, 3, 4, 6] and training.gates.units == [5, 6]
    with torch.no_grad():
        torch.testing.assert_close(training.net(x), expected)


def test_the_gates_of_a_smaller_mobilenet_close_as_removed_where_a_depthwise_convolution_is_left_one_channel():
    """After a removal the gates keep their groups, each row and column at its index in the smaller
    network: also where Torch-Pruning, tracing the smaller network again, would split a group (a
    depthwise convolution of one channel is an ordinary one to it). Closed gates of the smaller network
    still compute its smaller network."""
    torch.manual_seed(0)
    net = with_statistics(torchvision.models.get_model("mobilenet_v2", weights=None, num_classes=10))
    gates = UnitGates(net, input_shape=(3, 32, 32))
    generator = torch.Generator().manual_seed(4)
    keep = [torch.rand(units, generator=generator) < 0.7 for units in gates.units]
    for k, site in zip(keep, gates.sites):
        k[0] = True
        if site == "features.16.conv.0.0.gate":
            k[1:] = False  # its depthwise convolution is left one channel
    smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=(3, 32, 32))
    restricted = gates.restricted(smaller, keep)
    assert restricted.sites == gates.sites and restricted.units == [int(k.sum()) for k in keep]
    theta = dict(zip(restricted.sites, restricted.theta))
    scores = split_groups(smaller, restricted, theta, (3, 32, 32))  # what a fit scores: every group of its network
    assert set(scores) - set(theta) == {"features.16.conv.1.0.gate"}
    assert scores["features.16.conv.1.0.gate"] == theta["features.16.conv.0.0.gate"]
    assert set(unit_scores(scores, smaller, input_shape=(3, 32, 32))) == {
        group.gate_site for group in unit_groups(smaller, (3, 32, 32))
    }
    again = [torch.rand(units, generator=generator) < 0.7 for units in restricted.units]
    for k in again:
        k[0] = True
    smallest, _ = shrunk(smaller, dict(zip(restricted.sites, again)), input_shape=(3, 32, 32))
    x = torch.randn(4, 3, 32, 32, generator=generator)
    with torch.no_grad():
        with restricted.applied(smaller.eval(), [k.float() for k in again]):
            gated = smaller(x)
        expected = smallest.eval()(x)
    torch.testing.assert_close(gated, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))
