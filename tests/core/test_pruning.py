"""Tests of bayesprune.core.pruning against a numpy oracle (sort of the concatenated scores), brute force and exact counts."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from bayesprune.core.pruning import Budget, apply_masks, prune, sparsity
from bayesprune.models import mlp

SHAPES = [
    {"a": (3, 4), "b": (5,), "c": (2, 2, 2)},
    {"only": (7, 5)},
    {"w": (1,), "x": (10, 1), "y": (4, 3)},
]
TARGETS = [0.0, 0.1, 0.25, 0.5, 0.9, 0.99]


def random_scores(shapes, generator):
    """Distinct random scores (continuous draws) keyed by site name."""
    return {name: torch.rand(shape, generator=generator, dtype=torch.float64) for name, shape in shapes.items()}


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("target", TARGETS)
def test_sparsity_budget_drop_the_lowest_scores(shapes, target):
    """Exactly floor(d n) entries are dropped, and they are the floor(d n) smallest of the concatenated scores."""
    scores = random_scores(shapes, torch.Generator().manual_seed(len(shapes)))
    masks = prune(scores, Budget(sparsity=target))
    assert list(masks) == list(scores)
    flat = np.concatenate([s.numpy().ravel() for s in scores.values()])
    n = flat.size
    num_drop = math.floor(Fraction(str(target)) * n)
    expected_dropped = set(np.argsort(flat, kind="stable")[:num_drop].tolist())
    kept = np.concatenate([masks[name].numpy().ravel() for name in scores])
    assert set(np.flatnonzero(~kept).tolist()) == expected_dropped
    for name, score in scores.items():
        assert masks[name].shape == score.shape and masks[name].dtype == torch.bool
    assert sparsity(masks) == pytest.approx(num_drop / n, abs=1e-15)


@pytest.mark.parametrize("target", [0.2, 0.5, 0.8])
def test_sparsity_budget_break_ties_and_keep_exact_count(target):
    """With all scores tied the mask still removes exactly floor(d n) entries."""
    scores = {"a": torch.ones(6, 5), "b": torch.ones(10)}
    masks = prune(scores, Budget(sparsity=target))
    dropped = sum(int((~m).sum()) for m in masks.values())
    assert dropped == math.floor(Fraction(str(target)) * 40)


def test_sparsity_budget_are_global_not_per_tensor():
    """A tensor of uniformly low scores is pruned entirely before any entry of a high-scoring tensor."""
    scores = {"low": torch.linspace(0.0, 0.1, 12).view(3, 4), "high": torch.linspace(0.5, 1.0, 12).view(4, 3)}
    masks = prune(scores, Budget(sparsity=0.5))
    assert not masks["low"].any() and masks["high"].all()


def test_sparsity_budget_ignore_gradients_and_keep_devices():
    """Scores that require grad are accepted; masks are plain boolean tensors on the scores' device."""
    score = torch.tensor([0.3, 0.1, 0.2], requires_grad=True)
    masks = prune({"w": score}, Budget(sparsity=0.5))
    assert masks["w"].tolist() == [True, False, True]
    assert not masks["w"].requires_grad and masks["w"].device == score.device


@pytest.mark.parametrize("target", [-0.1, 1.0, 1.5, float("nan")])
def test_sparsity_budget_reject_sparsity_outside_unit_interval(target):
    """A sparsity must lie in [0, 1); anything else raises ValueError."""
    with pytest.raises(ValueError):
        prune({"w": torch.rand(5)}, Budget(sparsity=target))


@pytest.mark.parametrize(
    "target, n",
    [
        (0.1, 35),
        (0.5, 9),
        (0.29, 100),
        (0.57, 100),
    ],
)
def test_sparsity_budget_count_uses_exact_decimal_sparsity(target, n):
    """A sparsity given in decimal removes floor(d n) entries computed exactly (29 of 100 for d = 0.29)."""
    masks = prune({"w": torch.rand(n)}, Budget(sparsity=target))
    assert int((~masks["w"]).sum()) == math.floor(Fraction(str(target)) * n)


@pytest.mark.parametrize("n", [37, 100, 1000, 2662])
def test_sparsity_budget_count_for_every_two_decimal_sparsity(n):
    """For every sparsity 0.00, 0.01, ..., 0.99 the count dropped is floor(d n) in exact rational arithmetic."""
    scores = {"w": torch.rand(n, generator=torch.Generator().manual_seed(n))}
    for hundredths in range(100):
        target = float(f"0.{hundredths:02d}")
        dropped = int((~prune(scores, Budget(sparsity=target))["w"]).sum())
        assert dropped == math.floor(Fraction(hundredths, 100) * n), target


@pytest.mark.parametrize("shapes", SHAPES)
def test_apply_masks_zeroes_exactly_the_masked_entries(shapes):
    """Masked entries become 0, kept entries are unchanged, tensors without a mask pass through untouched."""
    generator = torch.Generator().manual_seed(1)
    params = {name: torch.randn(shape, generator=generator) + 3.0 for name, shape in shapes.items()}
    params["unmasked"] = torch.randn(4, generator=generator)
    masked_names = list(shapes)[:-1] or list(shapes)
    masks = {name: torch.rand(shapes[name], generator=generator) > 0.4 for name in masked_names}
    pruned = apply_masks(params, masks)
    assert list(pruned) == list(params)
    for name, value in params.items():
        out = pruned[name].numpy()
        if name in masks:
            mask = masks[name].numpy()
            assert np.all(out[~mask] == 0.0)
            assert np.array_equal(out[mask], value.numpy()[mask])
        else:
            assert torch.equal(pruned[name], value)


def test_sparsity_counts_removed_fraction():
    """sparsity() == 1 - kept / total over all masks (numpy count)."""
    masks = {"a": torch.tensor([[True, False], [False, False]]), "b": torch.tensor([True, True, False])}
    kept = np.sum([m.numpy().sum() for m in masks.values()])
    assert sparsity(masks) == pytest.approx(1 - kept / 7)
    assert sparsity({"a": torch.ones(3, dtype=torch.bool)}) == 0.0
    assert sparsity({"a": torch.zeros(3, dtype=torch.bool)}) == 1.0


def test_zero_sparsity_keeps_everything():
    """Sparsity 0 keeps every entry, so apply_masks is the identity."""
    scores = {"a": torch.rand(3, 3), "b": torch.rand(2)}
    masks = prune(scores, Budget(sparsity=0.0))
    assert all(m.all() for m in masks.values()) and sparsity(masks) == 0.0
    params = {"a": torch.randn(3, 3), "b": torch.randn(2)}
    for name, value in apply_masks(params, masks).items():
        assert torch.equal(value, params[name])


def brute_force_keep(scores: dict, count: int, floor: int) -> set:
    """Oracle: the kept (site, index) pairs, by enumerating entries in removal order by hand.

    Each site first keeps its ``floor`` best entries; the rest of ``count`` goes to the best of the
    others; on equal scores the later entry (later site, later index) ranks higher.
    """
    entries = [
        (float(value), site_rank, index, name)
        for site_rank, (name, score) in enumerate(scores.items())
        for index, value in enumerate(score.flatten().tolist())
    ]
    best_first = sorted(entries, key=lambda e: (e[0], e[1], e[2]), reverse=True)
    kept = set()
    for name in scores:
        kept |= {(e[3], e[2]) for e in [e for e in best_first if e[3] == name][:floor]}
    for entry in best_first:
        if len(kept) >= max(count, 0):
            break
        kept.add((entry[3], entry[2]))
    return kept


def kept_pairs(masks):
    return {(name, index) for name, mask in masks.items() for index in mask.flatten().nonzero().flatten().tolist()}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("floor", [0, 1, 3])
def test_keep_count_and_floors_against_brute_force(seed, floor):
    """Scores drawn from 4 values (many ties): the kept set equals the hand enumeration, globally and per site."""
    generator = torch.Generator().manual_seed(seed)
    scores = {
        name: torch.randint(0, 4, shape, generator=generator).double() for name, shape in SHAPES[seed % 3].items()
    }
    n = sum(s.numel() for s in scores.values())
    for count in (0, 1, n // 3, n - 1, n):
        masks = prune(scores, Budget(keep=count, min_keep=floor))
        assert kept_pairs(masks) == brute_force_keep(scores, count, floor)
        per_site = prune(scores, Budget(keep=count, scope="layer", min_keep=floor))
        expected = set().union(*(brute_force_keep({name: s}, count, floor) for name, s in scores.items()))
        assert kept_pairs(per_site) == expected


def test_ties_remove_earlier_sites_and_entries_first():
    scores = {"a": torch.tensor([0.5, 0.5, 0.1]), "b": torch.tensor([0.5, 0.9])}
    masks = prune(scores, Budget(sparsity=0.4))  # removes 2 of 5: the 0.1, then the first 0.5
    assert masks["a"].tolist() == [False, True, False] and masks["b"].tolist() == [True, True]


def test_threshold_keeps_scores_at_or_above_it_and_floors_still_hold():
    scores = {"a": torch.tensor([0.2, 0.6, 0.4]), "b": torch.tensor([0.1, 0.3])}
    masks = prune(scores, Budget(threshold=0.4))
    assert masks["a"].tolist() == [False, True, True] and masks["b"].tolist() == [False, False]
    masks = prune(scores, Budget(threshold=0.4, min_keep=1))
    assert masks["b"].tolist() == [False, True]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"sparsity": 0.1, "keep": 3},
        {"keep": -1},
        {"threshold": float("inf")},
        {"keep": 1, "scope": "row"},
        {"keep": 1, "level": "neuron"},
        {"keep": 1, "min_keep": 1.5},
    ],
)
def test_invalid_budgets_name_the_field(fields):
    with pytest.raises(ValueError, match="^budget"):
        Budget(**fields)


@pytest.mark.parametrize("shapes", SHAPES)
def test_sparsity_budget_against_a_stable_numpy_argsort(shapes):
    """A global sparsity d drops the floor(d n) first entries of a stable numpy argsort."""
    scores = random_scores(shapes, torch.Generator().manual_seed(7))
    flat = np.concatenate([s.numpy().ravel() for s in scores.values()])
    for target in TARGETS:
        masks = prune(scores, Budget(sparsity=target))
        kept = np.concatenate([masks[name].numpy().ravel() for name in scores])
        dropped = np.argsort(flat, kind="stable")[: math.floor(Fraction(str(target)) * flat.size)]
        assert set(np.flatnonzero(~kept).tolist()) == set(dropped.tolist())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("floor", [0, 2])
def test_sparsity_and_threshold_per_layer_against_brute_force(seed, floor):
    generator = torch.Generator().manual_seed(seed)
    scores = {
        name: torch.randint(0, 5, shape, generator=generator).double() / 4 for name, shape in SHAPES[seed % 3].items()
    }
    for target in (0.0, 0.3, 0.75):
        masks = prune(scores, Budget(sparsity=target, scope="layer", min_keep=floor))
        expected = set().union(
            *(
                brute_force_keep({name: s}, s.numel() - math.floor(Fraction(str(target)) * s.numel()), floor)
                for name, s in scores.items()
            )
        )
        assert kept_pairs(masks) == expected
    for threshold in (0.0, 0.5, 1.0, 2.0):
        above = {(name, i) for name, s in scores.items() for i, v in enumerate(s.flatten().tolist()) if v >= threshold}
        floors = set().union(*(brute_force_keep({name: s}, 0, floor) for name, s in scores.items()))
        for scope in ("global", "layer"):
            assert kept_pairs(prune(scores, Budget(threshold=threshold, scope=scope, min_keep=floor))) == above | floors


@pytest.mark.parametrize("floor", [0, 2])
def test_unit_budgets_count_units_across_layers_against_brute_force(floor):
    """Unit level, global: the kept units are the brute-force choice over the per-unit scores (ties included);
    the output layer gets no mask."""
    net = mlp((5,), 3, hidden=[6, 4])
    generator = torch.Generator().manual_seed(3)
    gates = {
        "1.gate": torch.randint(0, 3, (6,), generator=generator).double(),
        "3.gate": torch.randint(0, 3, (4,), generator=generator).double(),
    }
    for keep in (0, 3, 7, 10):
        masks = prune(gates, Budget(keep=keep, level="unit", min_keep=floor), net=net)
        assert list(masks) == ["1.gate", "3.gate"]
        assert kept_pairs(masks) == brute_force_keep(gates, keep, floor)


def test_near_saturated_float64_scores_rank_as_given():
    """Probabilities that round to 1 in float32 still rank by their float64 values."""
    scores = {"w": torch.tensor([1 - 1e-12, 1 - 3e-12, 1 - 2e-12, 1.0], dtype=torch.float64)}
    assert prune(scores, Budget(keep=2))["w"].tolist() == [True, False, False, True]


def test_nan_scores_and_empty_scores_are_rejected():
    with pytest.raises(ValueError, match="site 'b' contain NaN"):
        prune({"a": torch.rand(3), "b": torch.tensor([0.1, float("nan")])}, Budget(keep=1))
    with pytest.raises(ValueError, match="no scores"):
        prune({}, Budget(keep=1))
