"""MAC budgets (bayesprune.core.macs): the resolved budget against a brute-force search over every count of
units kept, its MACs against the count of the physically smaller exported network, and the floors' refusal."""

import pytest
import torch
from torch import nn

from bayesprune.core.export import count_macs, export
from bayesprune.core.macs import MacsBelowFloors, macs_kept, resolve_macs
from bayesprune.core.pruning import Budget, expand_unit_masks, prune, unit_scores
from bayesprune.core.structure import unit_groups


class Residual(nn.Module):
    """conv → (conv-bn-relu → conv-bn) + skip → pool → linear: a residual group and two plain ones."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.a = nn.Sequential(nn.Conv2d(6, 5, 3, padding=1), nn.BatchNorm2d(5), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(5, 6, 3, padding=1), nn.BatchNorm2d(6))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(6 * 4 * 4, 7), nn.ReLU(), nn.Linear(7, 3))

    def forward(self, x):
        x = self.stem(x)
        return self.head(nn.functional.adaptive_avg_pool2d(torch.relu(x + self.b(self.a(x))), 4))


def _mlp(first=12, second=9):
    return nn.Sequential(nn.Linear(10, first), nn.ReLU(), nn.Linear(first, second), nn.ReLU(), nn.Linear(second, 4))


NETWORKS = {
    "mlp": (_mlp, (10,)),
    "residual": (Residual, (3, 8, 8)),
}


def _scored(name, seed=0):
    torch.manual_seed(seed)
    build, shape = NETWORKS[name]
    net = build().eval()
    scores = {n: torch.randn_like(p) for n, p in net.named_parameters() if p.dim() > 1}
    return net, shape, scores


@pytest.mark.parametrize("name", sorted(NETWORKS))
@pytest.mark.parametrize("target", [0.9, 0.6, 0.35])
def test_resolved_budget_is_the_brute_force_one(name, target):
    """The count kept is the largest whose network costs at most the target, found by trying every count;
    the next unit would cross it; the MACs are those of the exported network."""
    net, shape, scores = _scored(name)
    units = unit_scores(scores, net, input_shape=shape)
    dense = count_macs(net, shape)
    budget, macs = resolve_macs(scores, Budget(macs=target, level="unit"), net, input_shape=shape)
    total = sum(score.numel() for score in units.values())
    costs = {
        k: macs_kept(net, prune(units, Budget(keep=k, level="unit"), net=net, input_shape=shape), input_shape=shape)
        for k in range(1, total + 1)
    }
    best = max(k for k, cost in costs.items() if cost <= target * dense)
    kept = sum(int(mask.sum()) for mask in prune(units, Budget(keep=best, level="unit"), net=net).values())
    assert sum(int(m.sum()) for m in prune(units, budget, net=net, input_shape=shape).values()) == kept
    assert macs == costs[best] <= target * dense
    if best < total:
        assert costs[best + 1] > target * dense
    masks = prune(units, budget, net=net, input_shape=shape)
    smaller = export(net, {**expand_unit_masks(net, masks, input_shape=shape), **masks}, input_shape=shape)
    assert count_macs(smaller, shape) == macs
    assert sum(p.numel() for p in smaller.parameters()) < sum(p.numel() for p in net.parameters())


def test_within_one_unit_of_the_target():
    """Over many targets, the MACs left are under the target by less than the largest one unit costs."""
    net, shape, scores = _scored("residual", seed=3)
    dense = count_macs(net, shape)
    groups = unit_groups(net, shape)
    largest = 0
    for group in groups:  # one unit's cost: the dense count less the count without unit 0 of that group
        mask = torch.ones(group.units, dtype=torch.bool)
        mask[0] = False
        largest = max(largest, dense - macs_kept(net, {group.gate_site: mask}, input_shape=shape))
    for target in (0.95, 0.8, 0.7, 0.5, 0.4):
        _, macs = resolve_macs(scores, Budget(macs=target, level="unit"), net, input_shape=shape)
        assert target * dense - largest < macs <= target * dense


def test_dense_macs_of_the_starting_network():
    """``dense_macs`` makes the target a fraction of another count (the network before a fit shrank it)."""
    net, shape, scores = _scored("mlp")
    dense = count_macs(net, shape)
    _, macs = resolve_macs(scores, Budget(macs=0.5, dense_macs=2 * dense, level="unit"), net, input_shape=shape)
    assert macs == dense  # half of twice its MACs: every unit stays


def test_below_the_floors_is_refused():
    net, shape, scores = _scored("mlp")
    with pytest.raises(MacsBelowFloors, match="below what the floors allow"):
        resolve_macs(scores, Budget(macs=0.05, level="unit"), net, input_shape=shape)
    dense = count_macs(net, shape)
    least = count_macs(_mlp(2, 1), shape)  # the default floors keep 2 of 12 and 1 of 9 units
    with pytest.raises(MacsBelowFloors, match=f"at least {least / dense:.4g} \\({least:,} of {dense:,}"):
        resolve_macs(scores, Budget(macs=least / dense - 0.01, level="unit"), net, input_shape=shape)
    one = count_macs(_mlp(1, 1), shape)
    _, macs = resolve_macs(scores, Budget(macs=one / dense, level="unit", min_keep=1), net, input_shape=shape)
    assert macs == one
    with pytest.raises(ValueError, match="budget.min_keep"):
        Budget(macs=0.5, level="unit", min_keep=0)


def test_mac_budget_needs_units_and_the_network():
    with pytest.raises(ValueError, match="budget.macs"):
        Budget(macs=0.5)
    net, shape, scores = _scored("mlp")
    with pytest.raises(ValueError, match="resolve_macs"):
        prune(scores, Budget(macs=0.5, level="unit"), net=net)


@pytest.mark.parametrize("importance, scope", [("magnitude", "layer"), ("taylor", "global")])
def test_torch_pruning_to_macs(importance, scope):
    """Torch-Pruning's network at a MAC target: at most the target (its own count), and Taylor importance
    reads the gradients given (each candidate gets a copy)."""
    from bayesprune.core.channels import pruned_to_macs

    net, shape, _ = _scored("residual")
    net(torch.randn(4, *shape)).square().mean().backward()
    dense = count_macs(net, shape)
    pruned, macs, ratio = pruned_to_macs(net, shape, 0.6 * dense, importance=importance, scope=scope)
    assert macs == count_macs(pruned, shape) <= 0.6 * dense and 0 < ratio < 0.95
    assert all(param.grad is not None for param in net.parameters())  # the network given keeps its gradients


def test_torch_pruning_cuts_a_vit_without_warning_and_keeps_its_embedding():
    """torchvision's ViT: the class token and position embedding are parameters of no layer. Torch-Pruning
    is told how to cut them, as bayesprune's dependency graph is, so it warns nothing (one warning a
    candidate of the MAC bisection flooded a comparison's log), and the residual stream keeps its width:
    the MLPs lose units and the attention one of its two heads, the embedding nothing."""
    import warnings

    from torchvision.models import VisionTransformer

    from bayesprune.core.channels import prune_channels
    from bayesprune.core.heads import HeadsRemovedAttention

    torch.manual_seed(0)
    net = VisionTransformer(image_size=8, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prune_channels(net, (3, 8, 8), ratio=0.5)
    assert net.class_token.shape[-1] == net.encoder.pos_embedding.shape[-1] == 8
    assert net.encoder.layers[0].mlp[0].out_features == 8
    attention = net.encoder.layers[0].self_attention
    assert isinstance(attention, HeadsRemovedAttention) and attention.num_heads == 1 and attention.embed_dim == 8
    assert net(torch.randn(2, 3, 8, 8)).shape == (2, 1000)


@pytest.mark.parametrize("importance, scope", [("magnitude", "layer"), ("taylor", "global")])
def test_torch_pruning_reaches_half_the_macs_of_a_vit(importance, scope):
    """torchvision's ViT at a target of half its MACs: Torch-Pruning's network costs at most that and
    within 5 % of it, its heads' MACs gone with its MLP units' (it stalled at 62 % keeping every head)."""
    from torchvision.models import VisionTransformer

    from bayesprune.core.channels import pruned_to_macs

    torch.manual_seed(0)
    shape = (3, 16, 16)
    net = VisionTransformer(
        image_size=16, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    nn.init.normal_(net.heads.head.weight, std=0.1)  # torchvision zeroes it: no gradient would reach the rest
    net(torch.randn(4, *shape)).square().mean().backward()
    dense = count_macs(net, shape)
    pruned, macs, _ = pruned_to_macs(net, shape, 0.5 * dense, importance=importance, scope=scope)
    assert 0.45 * dense <= macs == count_macs(pruned, shape) <= 0.5 * dense
