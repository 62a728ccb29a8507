"""Tests of bayesprune.pruning against a numpy oracle (sort of the concatenated scores) and exact counts."""
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from bayesprune.pruning import apply_masks, global_masks, sparsity

SHAPES = [
    {"a": (3, 4), "b": (5,), "c": (2, 2, 2)},
    {"only": (7, 5)},
    {"w": (1,), "x": (10, 1), "y": (4, 3)},
]
DROPRATES = [0.0, 0.1, 0.25, 0.5, 0.9, 0.99]


def random_scores(shapes, generator):
    """Distinct random scores (continuous draws) keyed by site name."""
    return {name: torch.rand(shape, generator=generator, dtype=torch.float64) for name, shape in shapes.items()}


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("droprate", DROPRATES)
def test_global_masks_drop_the_lowest_scores(shapes, droprate):
    """Exactly floor(d n) entries are dropped, and they are the floor(d n) smallest of the concatenated scores."""
    scores = random_scores(shapes, torch.Generator().manual_seed(len(shapes)))
    masks = global_masks(scores, droprate)
    assert list(masks) == list(scores)
    flat = np.concatenate([s.numpy().ravel() for s in scores.values()])
    n = flat.size
    num_drop = math.floor(Fraction(str(droprate)) * n)
    expected_dropped = set(np.argsort(flat, kind="stable")[:num_drop].tolist())
    kept = np.concatenate([masks[name].numpy().ravel() for name in scores])
    assert set(np.flatnonzero(~kept).tolist()) == expected_dropped
    for name, score in scores.items():
        assert masks[name].shape == score.shape and masks[name].dtype == torch.bool
    assert sparsity(masks) == pytest.approx(num_drop / n, abs=1e-15)


@pytest.mark.parametrize("droprate", [0.2, 0.5, 0.8])
def test_global_masks_break_ties_and_keep_exact_count(droprate):
    """With all scores tied the mask still removes exactly floor(d n) entries."""
    scores = {"a": torch.ones(6, 5), "b": torch.ones(10)}
    masks = global_masks(scores, droprate)
    dropped = sum(int((~m).sum()) for m in masks.values())
    assert dropped == math.floor(Fraction(str(droprate)) * 40)


def test_global_masks_are_global_not_per_tensor():
    """A tensor of uniformly low scores is pruned entirely before any entry of a high-scoring tensor."""
    scores = {"low": torch.linspace(0.0, 0.1, 12).view(3, 4), "high": torch.linspace(0.5, 1.0, 12).view(4, 3)}
    masks = global_masks(scores, 0.5)
    assert not masks["low"].any() and masks["high"].all()


def test_global_masks_ignore_gradients_and_keep_devices():
    """Scores that require grad are accepted; masks are plain boolean tensors on the scores' device."""
    score = torch.tensor([0.3, 0.1, 0.2], requires_grad=True)
    masks = global_masks({"w": score}, 0.5)
    assert masks["w"].tolist() == [True, False, True]
    assert not masks["w"].requires_grad and masks["w"].device == score.device


@pytest.mark.parametrize("droprate", [-0.1, 1.0, 1.5, float("nan")])
def test_global_masks_reject_droprate_outside_unit_interval(droprate):
    """droprate must lie in [0, 1); anything else raises ValueError."""
    with pytest.raises(ValueError):
        global_masks({"w": torch.rand(5)}, droprate)


@pytest.mark.parametrize(
    "droprate, n",
    [
        (0.1, 35),
        (0.5, 9),
        (0.29, 100),
        (0.57, 100),
    ],
)
def test_global_masks_count_uses_exact_decimal_droprate(droprate, n):
    """A droprate given in decimal removes floor(d n) entries computed exactly (29 of 100 for d = 0.29)."""
    masks = global_masks({"w": torch.rand(n)}, droprate)
    assert int((~masks["w"]).sum()) == math.floor(Fraction(str(droprate)) * n)


@pytest.mark.parametrize("n", [37, 100, 1000, 2662])
def test_global_masks_count_for_every_two_decimal_droprate(n):
    """For every droprate 0.00, 0.01, ..., 0.99 the count dropped is floor(d n) in exact rational arithmetic."""
    scores = {"w": torch.rand(n, generator=torch.Generator().manual_seed(n))}
    for hundredths in range(100):
        droprate = float(f"0.{hundredths:02d}")
        dropped = int((~global_masks(scores, droprate)["w"]).sum())
        assert dropped == math.floor(Fraction(hundredths, 100) * n), droprate


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


def test_zero_droprate_keeps_everything():
    """droprate 0 keeps every entry, so apply_masks is the identity."""
    scores = {"a": torch.rand(3, 3), "b": torch.rand(2)}
    masks = global_masks(scores, 0.0)
    assert all(m.all() for m in masks.values()) and sparsity(masks) == 0.0
    params = {"a": torch.randn(3, 3), "b": torch.randn(2)}
    for name, value in apply_masks(params, masks).items():
        assert torch.equal(value, params[name])
