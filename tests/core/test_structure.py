"""Tests of bayesprune.core.chain (the layer chain against hand-written descriptions of small networks) and of
bayesprune.core.structure."""

import pytest
import torch
from torch import nn

from bayesprune.core.chain import layer_chain
from bayesprune.models import lenet_5_caffe, mlp
from helpers import ClassicLeNet5


def describe(layers):
    return [
        (
            layer.name,
            layer.kind,
            layer.units,
            layer.weight_site,
            layer.bias_site,
            layer.gate_site,
            layer.consumer,
            layer.inputs_per_unit,
        )
        for layer in layers
    ]


def test_an_mlp_chain_by_hand():
    layers = layer_chain(mlp((5,), 2, hidden=[4, 3]))
    assert describe(layers) == [
        ("1", "linear", 4, "1.weight", "1.bias", "1.gate", "3", 1),
        ("3", "linear", 3, "3.weight", "3.bias", "3.gate", "5", 1),
        ("5", "linear", 2, "5.weight", "5.bias", "5.gate", None, None),
    ]


def test_nested_sequential_conv_flatten_linear_owns_h_times_w_columns_per_channel():
    net = nn.Sequential(
        nn.Sequential(
            nn.Conv2d(1, 20, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(20, 50, 5, bias=False),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ),
        nn.Sequential(nn.Flatten(), nn.Linear(50 * 4 * 4, 500), nn.ReLU(), nn.Linear(500, 10)),
    )
    layers = layer_chain(net, (1, 28, 28))  # 28 → conv 24 → pool 12 → conv 8 → pool 4: 4·4 columns per channel
    assert describe(layers) == [
        ("0.0", "conv2d", 20, "0.0.weight", "0.0.bias", "0.0.gate", "0.3", 1),
        ("0.3", "conv2d", 50, "0.3.weight", None, "0.3.gate", "1.1", 16),
        ("1.1", "linear", 500, "1.1.weight", "1.1.bias", "1.1.gate", "1.3", 1),
        ("1.3", "linear", 10, "1.3.weight", "1.3.bias", "1.3.gate", None, None),
    ]
    assert [layer.inputs_per_unit for layer in layer_chain(lenet_5_caffe((1, 28, 28), 10), (1, 28, 28))] == [
        1,
        16,
        1,
        None,
    ]


def test_a_custom_forward_that_is_a_plain_chain_is_accepted():
    layers = layer_chain(ClassicLeNet5(), (1, 28, 28))
    assert [(layer.name, layer.units, layer.consumer, layer.inputs_per_unit) for layer in layers] == [
        ("conv1", 6, "conv2", 1),
        ("conv2", 16, "fc1", 16),
        ("fc1", 120, "fc2", 1),
        ("fc2", 84, "fc3", 1),
        ("fc3", 10, None, None),
    ]


class Residual(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.fc1, self.fc2, self.out = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, 2)

    def forward(self, x):
        h = self.fc1(x)
        return self.out(h + self.fc2(torch.relu(h)))


class InputSkip(Residual):
    def forward(self, x):
        return self.out(self.fc2(torch.relu(self.fc1(x)))) + x[:, :2]


class CalledTwice(Residual):
    def forward(self, x):
        return self.out(self.fc2(self.fc2(self.fc1(x))))


class OutOfOrder(Residual):
    def forward(self, x):
        return self.out(self.fc1(self.fc2(x)))


class MixesChannels(Residual):
    def forward(self, x):
        return self.out(self.fc2(torch.softmax(self.fc1(x), dim=1)))


@pytest.mark.parametrize(
    "net, match",
    [
        (nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2)), r"^module '1' \(BatchNorm1d\)"),
        (
            nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(16, 2)),
            r"^module '0' \(Conv2d with groups=2\)",
        ),
        (
            nn.Sequential(nn.Conv2d(4, 4, 3, groups=4), nn.Flatten(), nn.Linear(16, 2)),
            r"^module '0' \(Conv2d with groups=4\)",
        ),
        (nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2)), r"^module '1' \(LayerNorm\)"),
        (nn.Sequential(nn.Linear(4, 3), nn.Linear(5, 2)), r"^module '1' takes 5 inputs"),
        (
            nn.Sequential(nn.Sequential(Residual())),
            r"^module '0.0' \(Residual\) is not a plain chain: the output of '0.0.fc1' reaches ",
        ),
        (InputSkip(), r"^the network \(InputSkip\) is not a plain chain: the input reaches"),
        (CalledTwice(), r"^module 'fc2' \(Linear\) is not called once in registration order"),
        (OutOfOrder(), r"^module 'fc2' \(Linear\) is not called once in registration order"),
        (
            MixesChannels(),
            r"^the network \(MixesChannels\) is not a plain chain: unit 0 of 'fc1' changes inputs of 'fc2'",
        ),
    ],
)
def test_what_is_not_a_plain_chain_is_named(net, match):
    with pytest.raises(ValueError, match=match):
        layer_chain(
            net, (4, 4, 4) if isinstance(net[0] if isinstance(net, nn.Sequential) else None, nn.Conv2d) else None
        )


def test_the_flattened_width_is_checked_against_the_input_shape():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 5 * 5, 3))
    assert layer_chain(net)[0].inputs_per_unit == 25
    with pytest.raises(ValueError, match=r"does not run on inputs of shape \(1, 8, 8\)"):
        layer_chain(net, (1, 8, 8))


def test_the_probe_leaves_the_network_as_it_was():
    net = ClassicLeNet5().train()
    before = {name: p.clone() for name, p in net.state_dict().items()}
    layer_chain(net, (1, 28, 28))
    assert net.training and all(m.training for m in net.modules())
    assert all(torch.equal(before[name], p) for name, p in net.state_dict().items())
    assert not any(m._forward_hooks for m in net.modules())


def test_unit_groups_of_plain_chains_are_their_hidden_layers():
    from bayesprune.core.structure import unit_groups
    from bayesprune.models import lenet_5_caffe as caffe

    for net, shape in (
        (mlp((5,), 2, hidden=[4, 3]), None),
        (caffe((1, 28, 28), 10), (1, 28, 28)),
        (ClassicLeNet5(), (1, 28, 28)),
    ):
        hidden = layer_chain(net, shape)[:-1]
        groups = unit_groups(net, shape)
        assert [(g.name, g.units, g.producers, g.consumers) for g in groups] == [
            (layer.name, layer.units, (layer.name,), (layer.consumer,)) for layer in hidden
        ]
        assert [g.gate_site for g in groups] == [layer.gate_site for layer in hidden]


class TwoHeads(nn.Module):
    """One hidden layer read by two consumers whose outputs are concatenated: a shared consumer group."""

    def __init__(self):
        super().__init__()
        self.fc1, self.a, self.b, self.out = nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(6, 2), nn.Linear(5, 2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.out(torch.cat([self.a(h), self.b(h)], dim=1))


def test_unit_groups_of_shared_consumers_and_concatenations_by_hand():
    from bayesprune.core.export import export
    from bayesprune.core.pruning import apply_masks, expand_unit_masks
    from bayesprune.core.structure import unit_groups

    net = TwoHeads().eval()
    groups = {g.gate_site: (g.units, g.producers, g.consumers) for g in unit_groups(net)}
    assert groups == {
        "fc1.gate": (6, ("fc1",), ("a", "b")),
        "a.gate": (3, ("a",), ("out",)),
        "b.gate": (2, ("b",), ("out",)),
    }
    masks = {"fc1.gate": torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool), "b.gate": torch.tensor([False, True])}
    small = export(net, masks)
    assert (small.a.in_features, small.b.in_features, small.b.out_features, small.out.in_features) == (4, 4, 1, 4)
    x = torch.randn(5, 4)
    params = apply_masks(dict(net.named_parameters()), expand_unit_masks(net, masks))
    with torch.no_grad():
        assert torch.allclose(small(x), torch.func.functional_call(net, params, (x,)), atol=1e-6)
