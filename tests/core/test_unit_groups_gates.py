"""Unit gates on any network Torch-Pruning traces (paper 004's gates, one per group of coupled channels):
a gate at 0 is the unit removed from every coupled layer, which :func:`bayesprune.core.structure.shrunk`
computes independently (the oracle), and a network nothing can gate is refused in one line."""

import pytest
import torch
import torchvision
from torch import nn

from bayesprune.cli import main
from bayesprune.core.gates import UnitGates
from bayesprune.core.structure import shrunk

pytestmark = pytest.mark.usefixtures("single_thread")


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
