"""The heads of the attention blocks practitioners take from libraries are units: timm's fused ``qkv``
layer, Hugging Face ``transformers``' separate query/key/value projections and PyTorch's
``nn.TransformerEncoderLayer``, each built from a config with random weights. Oracles: the network with
the removed heads' input columns of the output projection zeroed (a head nobody reads), and
Torch-Pruning's own parameter and MAC count of the smaller network."""

import copy
import inspect

import pytest
import torch
import torch_pruning as tp
from torch import nn

from bayesprune.core.export import count_macs, count_parameters, export
from bayesprune.core.gates import UnitGates, separable_heads
from bayesprune.core.heads import HeadsRemovedAttention
from bayesprune.core.structure import unit_groups

SHAPE = (3, 8, 8)  # four patches of 4x4 and a class token: five tokens
EMBED, HEADS, HEAD_DIM = 32, 4, 8


def timm_vit(fused_attn=True, **attention):
    timm = pytest.importorskip("timm")
    from timm.models.vision_transformer import VisionTransformer

    net = VisionTransformer(
        img_size=8, patch_size=4, embed_dim=EMBED, depth=1, num_heads=HEADS, num_classes=3, **attention
    )
    net.blocks[0].attn.fused_attn = fused_attn  # scaled_dot_product_attention, or timm's own products
    assert timm is not None
    return net.eval()


class HuggingFaceViT(nn.Module):
    """``transformers``' ViT for image classification, its logits as the output."""

    def __init__(self):
        super().__init__()
        transformers = pytest.importorskip("transformers")
        config = transformers.ViTConfig(
            hidden_size=EMBED,
            num_hidden_layers=1,
            num_attention_heads=HEADS,
            intermediate_size=37,
            image_size=8,
            patch_size=4,
            num_labels=3,
        )
        self.vit = transformers.ViTForImageClassification(config)

    def forward(self, x):
        return self.vit(pixel_values=x).logits


class PatchEncoder(nn.Module):
    """Patches of 4x4 embedded by a ``Linear``, one ``nn.TransformerEncoderLayer``, a linear classifier."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(48, EMBED)
        self.encoder = nn.TransformerEncoderLayer(EMBED, HEADS, 37, dropout=0.0, batch_first=True)
        self.head = nn.Linear(EMBED, 3)

    def forward(self, x):
        patches = x.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)
        return self.head(self.encoder(self.embed(patches)).mean(1))


def hugging_face_vit():
    return HuggingFaceViT().eval()


def attention_of(net):
    """``(attention module, its output projection's path)`` of each network's one block."""
    if isinstance(
        net, HuggingFaceViT
    ):  # transformers 5: ViTAttention's o_proj; 4: ViTSelfAttention, output.dense beside
        name, attention = next((n, m) for n, m in net.named_modules() if hasattr(m, "num_attention_heads"))
        parent = name.rpartition(".")[0]
        return attention, f"{name}.o_proj" if hasattr(attention, "o_proj") else f"{parent}.output.dense"
    if isinstance(net, PatchEncoder):
        return net.encoder.self_attn, "encoder.self_attn.out_proj"
    return net.blocks[0].attn, "blocks.0.attn.proj"


#: Each layout: a builder, the head count's attribute, and the head group's site.
LAYOUTS = {
    "timm fused qkv": (timm_vit, "num_heads", "blocks.0.attn.qkv.gate"),
    "timm qkv, products": (lambda: timm_vit(fused_attn=False), "num_heads", "blocks.0.attn.qkv.gate"),
    "transformers ViT": (hugging_face_vit, "num_attention_heads", None),
    "nn.TransformerEncoderLayer": (lambda: PatchEncoder().eval(), "num_heads", "encoder.self_attn.gate"),
}


def head_group(net):
    groups = [group for group in unit_groups(net, SHAPE) if group.heads_of is not None]
    assert len(groups) == 1
    return groups[0]


def zero_heads(net, heads):
    """``net`` with the output projection's columns of ``heads`` zeroed: those heads read by nobody."""
    net = copy.deepcopy(net)
    _, out_proj = attention_of(net)
    with torch.no_grad():
        for head in heads:
            net.get_submodule(out_proj).weight[:, head * HEAD_DIM : (head + 1) * HEAD_DIM] = 0
    return net


def inputs():
    return torch.randn(4, *SHAPE, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_heads_of_each_attention_layout_are_one_unit_group(layout):
    build, _, site = LAYOUTS[layout]
    group = head_group(build())
    assert (group.units, group.block) == (HEADS, HEAD_DIM)
    assert site is None or group.gate_site == site
    assert group.gate_site.endswith(("qkv.gate", "q_proj.gate", "query.gate", "self_attn.gate"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_removed_heads_compute_the_masked_network_and_count_as_torch_pruning_counts(layout):
    build, attribute, _ = LAYOUTS[layout]
    torch.manual_seed(0)
    net = build()
    keep = torch.tensor([True, False, True, False])
    smaller = export(net, {head_group(net).gate_site: keep}, input_shape=SHAPE).eval()
    x = inputs()
    with torch.no_grad():
        expected, got = zero_heads(net, [1, 3])(x), smaller(x)
    assert (got - expected).abs().max().item() < 1e-5
    with torch.no_grad():
        assert (net(x) - expected).abs().max().item() > 1e-3  # the heads mattered
    attention, out_proj = attention_of(smaller)
    assert getattr(attention, attribute) == 2 and smaller.get_submodule(out_proj).in_features == 2 * HEAD_DIM
    # two heads' query, key and value rows with their biases, and their columns of the output projection
    removed = 2 * HEAD_DIM * 3 * (EMBED + 1) + 2 * HEAD_DIM * EMBED
    assert count_parameters(smaller)["total"] == count_parameters(net)["total"] - removed
    tp_macs, tp_params = tp.utils.count_ops_and_params(smaller, x[:1])
    assert count_parameters(smaller)["total"] == tp_params
    if not isinstance(attention, HeadsRemovedAttention):  # a module Torch-Pruning knows (or whose parts it knows)
        assert count_macs(smaller, SHAPE) == tp_macs
    assert count_macs(smaller, SHAPE) < count_macs(net, SHAPE)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_closed_head_gates_compute_the_network_without_those_heads(layout):
    build, _, _ = LAYOUTS[layout]
    torch.manual_seed(0)
    net = separable_heads(build(), SHAPE)
    gates = UnitGates(net, input_shape=SHAPE)
    gates.check_removal(net)
    values = [
        torch.tensor([1.0, 0.0, 1.0, 0.0]) if group.heads_of is not None else torch.ones(group.units)
        for group in gates.groups
    ]
    x = inputs()
    with torch.no_grad(), gates.applied(net, values):
        gated = net(x)
    with torch.no_grad():
        expected = zero_heads(net, [1, 3])(x)
    assert (gated - expected).abs().max().item() < 1e-5


def test_a_block_whose_heads_a_layer_norm_mixes_is_no_unit_group_and_a_mask_for_it_is_refused_in_one_line():
    """timm's ``scale_attn_norm`` normalises the heads' outputs together: a removed head would change the others."""
    timm = pytest.importorskip("timm")
    if "scale_attn_norm" not in inspect.signature(timm.models.vision_transformer.VisionTransformer).parameters:
        pytest.skip("this timm has no scale_attn_norm")
    net = timm_vit(scale_attn_norm=True)
    assert all(group.heads_of is None for group in unit_groups(net, SHAPE))
    with pytest.raises(
        ValueError, match=r"^unit masks for no unit group of the network .*'blocks\.0\.attn\.qkv\.gate'"
    ):
        export(net, {"blocks.0.attn.qkv.gate": torch.tensor([True, False, True, True])}, input_shape=SHAPE)


def test_heads_removed_count_as_multihead_attention_of_their_width():
    """All heads kept: Torch-Pruning's count of the ``nn.MultiheadAttention`` they came from; one of two
    kept: the same formula by hand at width W = 8 (five tokens, embedding 16)."""
    attention = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    whole = HeadsRemovedAttention.keeping(attention, torch.arange(2))

    class SelfAttention(nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.attention = attention

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)[0]

    tp_macs, _ = tp.utils.count_ops_and_params(SelfAttention(attention), torch.zeros(1, 5, 16))
    assert count_macs(SelfAttention(whole), (5, 16)) == tp_macs
    one = HeadsRemovedAttention.keeping(attention, torch.tensor([1]))
    length, embed, width = 5, 16, 8
    by_hand = (
        length * width  # the queries scaled
        + 3 * length * embed * width  # query, key and value projections
        + 3 * length * width  # their biases
        + (2 * length * length * width + length * length)  # scores, softmax and weighted sum of the one head
        + length * (width * embed + embed)  # the output projection and its bias
    )
    assert count_macs(SelfAttention(one), (5, 16)) == by_hand


FACTORY = """
from torch import nn


class Inferred(nn.Module):
    '''Self-attention that keeps no head count: its forward reshapes by head width.'''

    def __init__(self):
        super().__init__()
        self.head_dim = 8
        self.q, self.k, self.v, self.proj = (nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = (f(x).view(batch, length, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        mixed = ((q @ k.transpose(-2, -1)) / self.head_dim**0.5).softmax(-1) @ v
        return self.proj(mixed.transpose(1, 2).reshape(batch, length, -1))


class Net(nn.Module):
    def __init__(self, output_dim):
        super().__init__()
        self.embed, self.attention, self.head = nn.Linear(8, 16), Inferred(), nn.Linear(16, output_dim)

    def forward(self, x):
        x = self.embed(x)
        return self.head((x + self.attention(x)).mean(1))


def net(input_shape, output_dim):
    return Net(output_dim)
"""


@pytest.fixture
def factory(tmp_path, monkeypatch):
    (tmp_path / "inferred_heads.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))

    def build(heads=None):
        from bayesprune.models import new_net
        from bayesprune.pipeline.config import RunConfig

        model = {"factory": "inferred_heads:net", **({} if heads is None else {"heads": heads})}
        return new_net(RunConfig.from_dict({"model": model}), (5, 8), 3, seed=0).eval()

    return build


def test_a_head_count_given_in_model_heads_makes_a_modules_heads_units(factory):
    shape = (5, 8)
    assert [group.heads_of for group in unit_groups(factory(), shape)] == [None, None]  # q, k, v: 16 channels
    net = factory({"attention": 2})
    (group,) = [group for group in unit_groups(net, shape) if group.heads_of is not None]
    assert (group.name, group.units, group.block) == ("attention.q", 2, 8)
    smaller = export(net, {"attention.q.gate": torch.tensor([True, False])}, input_shape=shape)
    oracle = copy.deepcopy(net)
    with torch.no_grad():
        oracle.attention.proj.weight[:, 8:] = 0
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (smaller(x) - oracle(x)).abs().max().item() < 1e-5
    assert smaller.attention.num_heads == 1 and smaller.attention.proj.in_features == 8


@pytest.mark.parametrize(
    "heads, message",
    [
        ({"nothing": 2}, r"^model\.heads: 'nothing' names no module of the network$"),
        ({"attention": 0}, r"^model\.heads must be a table of module names"),
    ],
)
def test_a_wrong_model_heads_is_refused_in_one_line(factory, heads, message):
    from bayesprune.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        factory(heads)


def test_a_head_count_that_contradicts_the_modules_own_is_refused():
    from bayesprune.core.heads import declare_heads

    with pytest.raises(ValueError, match=r"^module 'encoder.self_attn' has num_heads=4, not the 2 heads given for"):
        declare_heads(PatchEncoder(), {"MultiheadAttention": 2})


@pytest.mark.parametrize("layout", ["timm fused qkv", "transformers ViT"])
def test_torch_prunings_baseline_removes_whole_heads_and_computes_the_network_without_them(layout):
    """Torch-Pruning's pruner at ratio 0.5 with its head options (the MLP left whole here): two of four
    heads leave, the module's count follows, and the smaller network computes the original with the
    removed heads' output-projection columns zeroed (the heads found by matching the kept columns)."""
    from bayesprune.core.channels import prune_channels

    torch.manual_seed(0)
    net = LAYOUTS[layout][0]()
    original = copy.deepcopy(net)
    prune_channels(net, SHAPE, ratio=0.5, ignored=no_mlp(net))
    attention, out_proj = attention_of(net)
    assert getattr(attention, LAYOUTS[layout][1]) == 2 and net.get_submodule(out_proj).in_features == 2 * HEAD_DIM
    kept = kept_heads(original.get_submodule(out_proj).weight.detach(), net.get_submodule(out_proj).weight)
    assert len(kept) == 2
    x = inputs()
    with torch.no_grad():
        expected = zero_heads(original, [h for h in range(HEADS) if h not in kept])(x)
        assert (net(x) - expected).abs().max().item() < 1e-5


def torchvision_vit(layers=1):
    """torchvision's ViT (``nn.MultiheadAttention``, a packed in-projection) at this file's sizes, its
    classifier drawn at random (torchvision zeroes it: no gradient would reach the rest)."""
    models = pytest.importorskip("torchvision.models")
    net = models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=layers, num_heads=HEADS, hidden_dim=EMBED, mlp_dim=37, num_classes=3
    )
    nn.init.normal_(net.heads.head.weight, std=0.5)
    return net.eval()


def packed_attentions(net):
    """``[(path, module)]`` of the ``nn.MultiheadAttention`` s and their smaller replacements."""
    return [(n, m) for n, m in net.named_modules() if isinstance(m, (nn.MultiheadAttention, HeadsRemovedAttention))]


def head_parts(attention, head):
    """``[(weight, gradient)]`` of ``head``: its query, key and value rows and its output-projection columns."""
    rows = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
    return [
        (param.view(3, EMBED, -1)[:, rows], param.grad.view(3, EMBED, -1)[:, rows])
        if param is attention.in_proj_weight
        else (param[:, rows], param.grad[:, rows])
        for param in (attention.in_proj_weight, attention.out_proj.weight)
    ]


def kept_heads(original, weight):
    """The heads of an output projection's weight ``original`` whose columns ``weight`` still holds."""
    kept = weight.detach().split(HEAD_DIM, 1)
    return [h for h, block in enumerate(original.split(HEAD_DIM, 1)) if any(torch.equal(block, k) for k in kept)]


def no_mlp(net):
    """Torch-Pruning's default ignored layers and the MLPs (timm's and torchvision's ``mlp``, ``transformers``'
    ``intermediate``, ``nn.TransformerEncoderLayer``'s ``linear1``): only heads leave."""
    from bayesprune.core.channels import ignored_layers

    mlp = [
        n
        for n, m in net.named_modules()
        if isinstance(m, nn.Linear) and any(part in n for part in ("mlp", "intermediate", "linear"))
    ]
    return ignored_layers(net, SHAPE) + mlp


@pytest.mark.parametrize("importance", ["magnitude", "taylor"])
@pytest.mark.parametrize("layout", ["nn.TransformerEncoderLayer", "torchvision ViT"])
def test_torch_prunings_baseline_removes_the_lowest_scored_heads_of_a_packed_attention(layout, importance):
    """Brute force: at ratio 0.5 per layer, the two heads of least L2 norm (magnitude) or Σ|w·∂L/∂w|
    (Taylor) over their query/key/value rows and output-projection columns, computed here, leave; the
    smaller network computes the original with those rows (and biases) and columns zeroed."""
    from bayesprune.core.channels import prune_channels

    torch.manual_seed(0)
    net = torchvision_vit() if layout == "torchvision ViT" else PatchEncoder().eval()
    ((name, attention),) = packed_attentions(net)
    with torch.no_grad():  # heads of clearly different sizes
        scale = torch.tensor([1.3, 0.5, 1.0, 0.7]).repeat_interleave(HEAD_DIM)
        attention.in_proj_weight.view(3, EMBED, EMBED).mul_(scale.view(1, -1, 1))
        attention.out_proj.weight.mul_(scale)
    net(inputs()).square().mean().backward()
    original = copy.deepcopy(net)
    scores = [
        sum(w.square().sum() for w, _ in head_parts(attention, h)).sqrt()
        if importance == "magnitude"
        else sum((w * g).abs().sum() for w, g in head_parts(attention, h))
        for h in range(HEADS)
    ]
    removed = sorted(torch.stack(scores).argsort()[:2].tolist())
    prune_channels(net, SHAPE, ratio=0.5, importance=importance, ignored=no_mlp(net))
    smaller = net.get_submodule(name)
    assert isinstance(smaller, HeadsRemovedAttention) and smaller.num_heads == 2
    assert kept_heads(attention.out_proj.weight.detach(), smaller.out_proj.weight) == sorted(
        set(range(HEADS)) - set(removed)
    )
    with torch.no_grad():
        zeroed = original.get_submodule(name)
        for head in removed:
            rows = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
            zeroed.in_proj_weight.view(3, EMBED, EMBED)[:, rows] = 0
            zeroed.in_proj_bias.view(3, EMBED)[:, rows] = 0
            zeroed.out_proj.weight[:, rows] = 0
        x = inputs()
        assert (net(x) - original(x)).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "importance, scope, ratio", [("magnitude", "global", 0.5), ("taylor", "global", 0.3), ("taylor", "layer", 0.3)]
)
def test_packed_attentions_lose_the_heads_torch_pruning_takes_from_a_timm_vit_of_the_same_weights(
    importance, scope, ratio
):
    """Torch-Pruning removes whole heads of timm's fused ``qkv`` itself (``prune_num_heads``): a torchvision
    ViT whose attentions hold the same weights and gradients loses the same heads of each block, per layer
    and ranked across blocks."""
    from bayesprune.core.channels import prune_channels

    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ours = torchvision_vit(layers=2)
    theirs = timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=4, embed_dim=EMBED, depth=2, num_heads=HEADS, num_classes=3
    ).eval()
    for net in (ours, theirs):
        net(inputs()).square().mean().backward()
    with torch.no_grad():
        for block, (_, attention) in zip(theirs.blocks, packed_attentions(ours), strict=True):
            attention.in_proj_weight.mul_(torch.rand(3 * EMBED, 1) * 2)  # heads of different sizes
            for mine, given in [
                (block.attn.qkv.weight, attention.in_proj_weight),
                (block.attn.qkv.bias, attention.in_proj_bias),
                (block.attn.proj.weight, attention.out_proj.weight),
            ]:
                mine.copy_(given)
                mine.grad.copy_(given.grad)
    originals = [attention.out_proj.weight.detach().clone() for _, attention in packed_attentions(ours)]
    for net in (ours, theirs):
        prune_channels(net, SHAPE, ratio=ratio, importance=importance, scope=scope, ignored=no_mlp(net))
    kept = [kept_heads(o, a.out_proj.weight) for o, (_, a) in zip(originals, packed_attentions(ours), strict=True)]
    assert kept == [kept_heads(o, b.attn.proj.weight) for o, b in zip(originals, theirs.blocks, strict=True)]
    lost = 2 * int(HEADS * ratio) if scope == "layer" else int(2 * HEADS * ratio)
    assert sum(map(len, kept)) == 2 * HEADS - lost  # ⌊ratio · heads⌋ of each block, or of all blocks' heads


@pytest.mark.parametrize("layout", ["timm fused qkv", "transformers ViT"])
def test_a_heads_score_is_the_mean_of_its_query_key_and_value_rows(layout):
    """Any method's weight scores become head scores for a unit budget: the mean over the head's rows of
    the query, key and value projections (a fused layer's rows h·d … of each third)."""
    from bayesprune.core.pruning import unit_scores

    net = LAYOUTS[layout][0]()
    group = head_group(net)
    generator = torch.Generator().manual_seed(0)
    weights = sorted(name for name, param in net.named_parameters() if name.endswith("weight") and param.dim() == 2)
    scores = {name: torch.rand(net.get_parameter(name).shape, generator=generator) for name in weights}
    got = unit_scores(scores, net, input_shape=SHAPE)[group.gate_site]
    # rows of each head in each of query, key and value: (3 projections, heads, head_dim, inputs)
    by_head = torch.cat([scores[f"{name}.weight"].view(-1, HEADS, HEAD_DIM, EMBED) for name in group.producers])
    assert torch.allclose(got, by_head.transpose(0, 1).flatten(1).double().mean(1))


class AttentionOnly(nn.Module):
    """Patches embedded, one ``nn.MultiheadAttention``, a classifier: its heads are its only units."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Linear(48, EMBED), nn.Linear(EMBED, 3)
        self.attention = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    def forward(self, x):
        patches = self.embed(x.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2))
        return self.head(self.attention(patches, patches, patches, need_weights=False)[0].mean(1))


def test_the_baseline_takes_a_network_whose_only_units_are_heads_and_refuses_one_without_units():
    from bayesprune.core.channels import check_prunable, prune_channels
    from bayesprune.core.errors import BayesPruneError

    net = AttentionOnly().eval()
    check_prunable(net, SHAPE)
    prune_channels(net, SHAPE, ratio=0.5)
    assert net.attention.num_heads == 2 and net(inputs()).shape == (4, 3)
    with pytest.raises(
        BayesPruneError, match="^Torch-Pruning's baseline: the network has no hidden channels, units or"
    ):
        check_prunable(nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 3)), SHAPE)
