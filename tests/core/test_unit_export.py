"""Units beyond plain channels: attention heads, MLP hidden units of transformer blocks, grouped
convolutions and parameters of a module's own (layer scale). Each removal is checked against an
oracle built by hand: the network with the removed units' input columns zeroed in their consumers."""

import copy

import pytest
import torch
import torchvision
from torch import nn

from bayesprune.core.export import count_macs, dead_units, export, resize
from bayesprune.core.pruning import unit_scores
from bayesprune.core.sites import site_names
from bayesprune.core.structure import HeadsRemovedAttention, remove_units, shrunk, unit_groups


class SeparateQKV(nn.Module):
    """Multi-head self-attention with query, key and value ``Linear`` s of their own."""

    def __init__(self, dim=16, num_heads=2, used_heads=None):
        super().__init__()
        self.num_heads, self.used_heads = num_heads, used_heads
        self.q, self.k, self.v, self.proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        batch, length, _ = x.shape
        heads = self.used_heads or self.num_heads
        q, k, v = (layer(x).view(batch, length, heads, -1).transpose(1, 2) for layer in (self.q, self.k, self.v))
        attention = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
        return self.proj((attention @ v).transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    """A residual block around :class:`SeparateQKV` and an MLP, without layer norms."""

    def __init__(self, **attention):
        super().__init__()
        self.embed, self.attention = nn.Linear(8, 16), SeparateQKV(**attention)
        self.fc1, self.fc2, self.head = nn.Linear(16, 24), nn.Linear(24, 16), nn.Linear(16, 3)

    def forward(self, x):
        x = self.embed(x)
        x = x + self.attention(x)
        return self.head((x + self.fc2(torch.relu(self.fc1(x)))).mean(1))


def tiny_vit(heads=2):
    net = torchvision.models.VisionTransformer(
        image_size=16, patch_size=8, num_layers=1, num_heads=heads, hidden_dim=16, mlp_dim=24, num_classes=3
    )
    nn.init.normal_(net.heads.head.weight)  # torchvision starts it at zero
    return net.eval()


def encoder_layer():
    layer = nn.TransformerEncoderLayer(16, 2, 24, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.Linear(8, 16), layer, nn.Flatten(), nn.Linear(16 * 5, 3)).eval()


def zero_columns(net, columns):
    """``net`` with the input columns ``columns`` (module path → indices) zeroed: a unit nobody reads."""
    net = copy.deepcopy(net)
    with torch.no_grad():
        for name, index in columns.items():
            net.get_submodule(name).weight[:, index] = 0
    return net


def close(a, b, shape):
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return (a(x) - b(x)).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "build, shape, site, out_proj, head_dim",
    [
        (tiny_vit, (3, 16, 16), "encoder.layers.encoder_layer_0.self_attention.gate", None, 8),
        (encoder_layer, (5, 8), "1.self_attn.gate", None, 8),
        (Block, (5, 8), "attention.q.gate", "attention.proj", 8),
    ],
)
def test_removing_a_head_is_zeroing_its_columns_of_the_output_projection(build, shape, site, out_proj, head_dim):
    torch.manual_seed(0)
    net = build().eval()
    out_proj = out_proj or site.removesuffix(".gate") + ".out_proj"
    smaller = remove_units(copy.deepcopy(net), {site: torch.tensor([False, True])}, input_shape=shape)
    assert close(smaller, zero_columns(net, {out_proj: slice(0, head_dim)}), shape)
    assert smaller.get_submodule(out_proj).in_features == head_dim
    assert not close(smaller, net, shape)  # the head mattered


def test_the_units_of_transformer_blocks_are_heads_and_mlp_hidden_units():
    described = [(g.name, g.units, g.block, g.heads_of) for g in unit_groups(tiny_vit(), (3, 16, 16))]
    layer = "encoder.layers.encoder_layer_0"
    # The residual stream (class token, position embedding, layer norms) is normalised across: no unit.
    assert described == [(f"{layer}.self_attention", 2, 8, f"{layer}.self_attention"), (f"{layer}.mlp.0", 24, 1, None)]
    described = [(g.name, g.units, g.block, g.heads_of, g.consumers) for g in unit_groups(Block(), (5, 8))]
    assert described == [
        ("embed", 16, 1, None, ("attention.q", "attention.k", "attention.v", "fc1", "head")),
        ("attention.q", 2, 8, "attention", ("attention.proj",)),
        ("fc1", 24, 1, None, ("fc2",)),
    ]


def test_heads_removed_from_a_shrunk_network_again_and_the_cuts_follow_parameter_names():
    torch.manual_seed(0)
    net, shape = tiny_vit(heads=4), (3, 16, 16)
    site = "encoder.layers.encoder_layer_0.self_attention.gate"
    once, cuts = shrunk(net, {site: torch.tensor([True, False, True, True])}, input_shape=shape)
    attention = once.encoder.layers[0].self_attention
    assert isinstance(attention, HeadsRemovedAttention) and attention.num_heads == 3
    kept = torch.cat([torch.arange(0, 4), torch.arange(8, 16)])  # heads 0, 2, 3 of width 4
    rows = torch.cat([kept + 16 * k for k in range(3)])
    assert torch.equal(attention.in_proj_weight, net.encoder.layers[0].self_attention.in_proj_weight[rows])
    assert cuts[site.removesuffix("gate") + "out_proj.weight"][1] == (16, 12)
    twice = export(once, {site: torch.tensor([True, True, False])}, input_shape=shape)
    oracle = zero_columns(
        net, {site.removesuffix("gate") + "out_proj": torch.cat([torch.arange(4, 8), torch.arange(12, 16)])}
    )
    assert close(twice, oracle, shape)


def test_an_attention_that_lost_heads_keeps_its_sites():
    net = encoder_layer()
    smaller = export(net, {"1.self_attn.gate": torch.tensor([False, True])}, input_shape=(5, 8))
    assert site_names(smaller) == site_names(net)
    assert "1.self_attn.in_proj_weight" in site_names(net)


def test_a_head_scores_its_query_key_and_value_rows():
    net = encoder_layer()
    weight = net[1].self_attn.in_proj_weight.detach()
    scores = {"1.self_attn.in_proj_weight": weight.abs(), "1.linear1.weight": net[1].linear1.weight.abs()}
    got = unit_scores(scores, net, input_shape=(5, 8))["1.self_attn.gate"]
    expected = [
        weight.abs()[[*range(h * 8, h * 8 + 8), *range(16 + h * 8, 24 + h * 8), *range(32 + h * 8, 40 + h * 8)]].mean()
        for h in range(2)
    ]
    assert torch.allclose(got, torch.stack(expected).double())
    with pytest.raises(
        ValueError, match=r"^no score for layer '1.self_attn': expected .* or '1.self_attn.in_proj_weight'$"
    ):
        unit_scores({"1.linear1.weight": scores["1.linear1.weight"]}, net, input_shape=(5, 8))


class LayerScale(nn.Module):
    """A ConvNeXt-style residual branch scaled by a parameter of the block's own, without a norm."""

    def __init__(self):
        super().__init__()
        self.stem, self.branch = nn.Conv2d(3, 6, 3), nn.Conv2d(6, 6, 1)
        self.layer_scale = nn.Parameter(torch.rand(6, 1, 1) + 0.5)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.layer_scale * self.branch(torch.relu(x))
        return self.head(x.mean((2, 3)))


def test_a_layer_scale_shrinks_with_its_channels():
    torch.manual_seed(0)
    net, shape = LayerScale().eval(), (3, 6, 6)
    (group,) = unit_groups(net, shape)
    keep = torch.tensor([True, False, True, True, False, True])
    smaller = export(net, {group.gate_site: keep}, input_shape=shape)
    assert smaller.layer_scale.shape == (4, 1, 1)
    assert close(smaller, zero_columns(net, {"branch": ~keep, "head": ~keep}), shape)


def test_a_grouped_convolution_keeps_the_same_width_in_every_group():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, groups=2),
        nn.Flatten(),
        nn.Linear(8 * 16, 2),
    )
    net[1].running_mean.uniform_(-1, 1)  # batch norm of a removed channel is not zero: only its readers see it
    net.eval()
    group = unit_groups(net, (3, 6, 6))[0]
    assert (group.name, group.units, group.repeats) == ("0", 4, 2)
    assert group.channel_indices()[1].tolist() == [1, 5]
    smaller = export(net, {"0.gate": torch.tensor([True, False, True, True])}, input_shape=(3, 6, 6))
    assert smaller[3].weight.shape == (8, 3, 3, 3) and smaller[3].groups == 2
    assert close(smaller, zero_columns(net, {"3": 1}), (3, 6, 6))  # column 1 of each group's kernels


def test_torchvision_convnext_block_exports_its_mlp_hidden_units():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(0)
    net = ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=3).eval()
    groups = unit_groups(net, (3, 16, 16))
    assert [(g.name, g.units) for g in groups] == [("features.1.0.block.3", 32), ("features.3.0.block.3", 64)]
    masks = {g.gate_site: torch.arange(g.units) % 2 == 0 for g in groups}
    smaller = export(net, masks, input_shape=(3, 16, 16))  # checked against the masked network inside
    assert smaller.features[3][0].block[5].in_features == 32


@pytest.mark.parametrize(
    "net, masks, match",
    [
        (
            Block(used_heads=2, num_heads=3),
            None,
            r"^module 'attention' has num_heads=3, which does not divide the 16 output features of 'attention.q'$",
        ),
        (Block(), {"attention.q.gate": torch.ones(16, dtype=torch.bool)}, r"has shape \(16,\), the layer 2 heads of 8"),
    ],
)
def test_a_head_count_that_does_not_divide_is_named(net, masks, match):
    with pytest.raises(ValueError, match=match):
        export(net, masks or {"attention.q.gate": torch.tensor([True, False])}, input_shape=(5, 8))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(
    "masks",
    [
        {},
        {"key_padding_mask": torch.tensor([[False, True, False, False, True]] * 3)},
        {"attn_mask": torch.ones(5, 5, dtype=torch.bool).triu(1), "is_causal": True},
        {"attn_mask": torch.randn(12, 5, 5, generator=torch.Generator().manual_seed(0))},
    ],
)
def test_all_heads_kept_compute_what_multihead_attention_computes(batch_first, masks):
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    kept = HeadsRemovedAttention.keeping(attention, torch.arange(4))
    x = torch.randn(3, 5, 16) if batch_first else torch.randn(5, 3, 16)
    with torch.no_grad():
        for need_weights in (True, False):
            expected, weights = attention(x, x, x, need_weights=need_weights, **masks)
            got, got_weights = kept(x, x, x, need_weights=need_weights, **masks)
            assert (got - expected).abs().max() < 1e-5
            assert (got_weights is None) == (weights is None)
            assert weights is None or (got_weights - weights).abs().max() < 1e-5


def test_an_encoder_layer_is_counted_as_torch_pruning_counts_it_by_hand():
    """Torch-Pruning's conventions: a ``Linear``'s products and one bias addition per output feature, a
    layer norm two operations per element, ``nn.MultiheadAttention`` its projections, scaling, scores,
    softmax and weighted sums; the encoder layer's functional ReLU nothing."""
    net = encoder_layer()
    length, width, hidden, heads = 5, 16, 24, 2
    embed = length * 8 * width + width
    attention = (
        length * width  # the queries scaled
        + 3 * length * width * width  # query, key and value projections
        + 3 * length * width  # their biases
        + heads * (2 * length * length * (width // heads) + length * length)  # scores, softmax, weighted sums
        + length * width * (width + 1)  # the output projection
    )
    norms = 2 * (2 * length * width)
    mlp = length * width * hidden + hidden + length * hidden * width + width
    classifier = length * width * 3 + 3
    assert count_macs(net, (length, 8)) == embed + attention + norms + mlp + classifier


def test_channel_shuffle_is_refused_naming_the_module_and_shufflenet_at_unit_level_only():
    class ChannelShuffle(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(3, 4, 1), nn.Conv2d(4, 2, 1)

        def forward(self, x):
            x = self.conv1(x)
            batch, channels, height, width = x.shape
            x = x.view(batch, 2, channels // 2, height, width).transpose(1, 2).reshape(batch, channels, height, width)
            return self.conv2(x).mean((2, 3))

    with pytest.raises(ValueError, match=r"^module 'conv1': removing its units does not compute the masked network"):
        export(ChannelShuffle().eval(), {"conv1.gate": torch.tensor([True, False, True, True])}, input_shape=(3, 4, 4))
    net = torchvision.models.shufflenet_v2_x0_5(num_classes=3).eval()  # Torch-Pruning cannot trace it at any size
    with pytest.raises(
        ValueError,
        match=r"^module 'stage2' \(Sequential\) cannot be traced by Torch-Pruning on inputs of shape \(3, 32, 32\): integer",
    ):
        unit_groups(net, (3, 32, 32))
    assert dead_units(net, input_shape=(3, 32, 32)) == {}
    masks = {"fc.weight": torch.rand(3, 1024) > 0.5}
    assert torch.equal(export(net, masks).fc.weight, net.fc.weight * masks["fc.weight"])


@pytest.mark.parametrize("build, shape", [(lambda: tiny_vit(heads=4), (3, 16, 16)), (Block, (5, 8))])
def test_a_network_that_lost_heads_is_rebuilt_from_its_shapes(build, shape):
    torch.manual_seed(0)
    net = build().eval()
    masks = {group.gate_site: torch.arange(group.units) % 2 == 0 for group in unit_groups(net, shape)}
    smaller = export(net, masks, input_shape=shape)
    rebuilt = resize(
        build().eval(), {name: param.shape for name, param in smaller.named_parameters()}, input_shape=shape
    )
    rebuilt.load_state_dict(smaller.state_dict())
    assert close(rebuilt, smaller, shape)
