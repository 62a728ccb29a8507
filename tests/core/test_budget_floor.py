"""The default per-layer floor of unit budgets (``Budget.min_keep`` left unset): the same in Python, in a
config and on the command line, checked against subsets enumerated by hand, and on torchvision's
resnet18, where a global budget with a floor of one unit collapses layers to a single channel."""

import itertools
import math

import pytest
import torch
import torchvision

import bayesprune as bp
from bayesprune.core.export import export
from bayesprune.core.pruning import Budget, prune
from bayesprune.models import mlp
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.export import budget_of


def best_subset(scores: dict, count: int, floors: dict) -> set:
    """Oracle: of all sets of ``max(count, sum of floors)`` (layer, unit) pairs keeping at least
    ``floors[layer]`` units of every layer, the one of highest total score (scores are distinct)."""
    pairs = [(layer, unit) for layer, score in scores.items() for unit in range(score.numel())]
    size = max(count, sum(floors.values()))
    admissible = (
        set(subset)
        for subset in itertools.combinations(pairs, size)
        if all(sum(layer == name for layer, _ in subset) >= floor for name, floor in floors.items())
    )
    return max(admissible, key=lambda subset: sum(float(scores[layer][unit]) for layer, unit in subset))


def kept(masks: dict) -> set:
    return {(layer, unit) for layer, mask in masks.items() for unit in mask.nonzero().flatten().tolist()}


@pytest.mark.parametrize("seed", range(3))
def test_unset_min_keep_keeps_a_tenth_of_every_layer_at_least_one_against_enumeration(seed):
    """A 12-unit and a 3-unit layer: the default floors are ceil(1.2) = 2 and max(1, ceil(0.3)) = 1 units;
    every global count keeps the best subset that respects them."""
    net = mlp((5,), 3, hidden=[12, 3])
    generator = torch.Generator().manual_seed(seed)
    scores = {
        "1.gate": torch.rand(12, generator=generator, dtype=torch.float64),
        "3.gate": torch.rand(3, generator=generator, dtype=torch.float64) - 0.5,
    }  # the small layer scores lower
    for count in (0, 2, 4, 7):
        masks = prune(scores, Budget(keep=count, level="unit"), net=net)
        assert kept(masks) == best_subset(scores, count, {"1.gate": 2, "3.gate": 1})
    assert kept(prune(scores, Budget(keep=0, level="unit", min_keep=0), net=net)) == set()


def test_weight_budgets_have_no_floor_unless_asked():
    scores = {"a": torch.tensor([0.1, 0.2]), "b": torch.tensor([0.9, 0.8, 0.7])}
    assert kept(prune(scores, Budget(keep=3))) == {("b", 0), ("b", 1), ("b", 2)}
    assert kept(prune(scores, Budget(keep=3, min_keep=1))) == {("a", 1), ("b", 0), ("b", 1)}


def test_the_command_line_and_a_config_default_to_the_python_budget():
    assert budget_of(["sparsity=0.5"]) == bp.Budget(sparsity=0.5, level="unit")
    assert budget_of(["sparsity=0.5", "min_keep=0"]) == bp.Budget(sparsity=0.5, level="unit", min_keep=0)
    config = load_config("default", ["prune.level='unit'"])
    assert config.prune.budget(0.5) == bp.Budget(sparsity=0.5, level="unit")
    assert "min_keep" not in config.to_dict()["prune"]


@pytest.fixture(scope="module")
def resnet18():
    """torchvision's resnet18 at random initialisation, scored by weight magnitude: He initialisation
    scales each layer by 1/sqrt(fan-in), so the wide late layers score lowest, as real scores often do."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=10).eval()
    scores = {name: p.detach().abs() for name, p in net.named_parameters() if p.dim() > 1}
    return net, scores


def test_a_global_unit_budget_on_resnet18_collapses_no_layer_by_default(resnet18):
    """Half the units removed globally: with a floor of one unit, layers keep a single channel; by
    default every layer keeps at least a tenth of its units, and the count is still half."""
    net, scores = resnet18
    by_default = prune(scores, Budget(sparsity=0.5, level="unit"), net=net, input_shape=(3, 32, 32))
    one = prune(scores, Budget(sparsity=0.5, level="unit", min_keep=1), net=net, input_shape=(3, 32, 32))
    assert min(int(mask.sum()) for mask in one.values()) == 1
    for mask in by_default.values():
        assert int(mask.sum()) >= max(1, math.ceil(0.1 * mask.numel()))
    total = sum(mask.numel() for mask in by_default.values())
    assert sum(int(mask.sum()) for mask in by_default.values()) == total - math.floor(0.5 * total)


def test_a_budget_that_empties_a_layer_names_min_keep(resnet18):
    net, scores = resnet18
    masks = prune(scores, Budget(sparsity=0.5, level="unit", min_keep=0), net=net, input_shape=(3, 32, 32))
    assert any(not mask.any() for mask in masks.values())
    with pytest.raises(ValueError, match="removes every unit of layer .*min_keep"):
        export(net, masks, input_shape=(3, 32, 32))
