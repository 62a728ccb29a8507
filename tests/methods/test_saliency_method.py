"""The ``saliency`` method end to end on scikit-learn's digits (paper 001): the grid of criteria × stages ×
penalties, ΔL, the error gaps, Spearman's ρ, the saved sparse network and its options."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import resolve_device
from bayesprune.core.pruning import Budget, prune
from bayesprune.methods import FitContext, get_method
from bayesprune.methods.saliency import spearman_or_none
from bayesprune.methods.saliency.stages import loss_change, multi_stage_masks
from bayesprune.models import new_net
from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import RunConfig
from bayesprune.pipeline.runner import load_run, run

CRITERIA = ["magnitude", "obd", "lm", "qm"]
OPTIONS = {
    "criteria": CRITERIA,
    "sparsity": 0.9,
    "stages": [1, 3],
    "penalties": [0.0, 1.0],
    "examples_per_stage": 100,
    "finetune_epochs": 1,
    "finetune": "all",
}


def config(**options) -> RunConfig:
    return RunConfig.from_dict(
        {
            "method": "saliency",
            "data": {"dataset": "digits", "batch_size": 64},
            "model": {"architecture": "mlp", "hidden": [32]},
            "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
            "baseline": {"enabled": False},
            "device": "cpu",
            "prune": {"sparsities": [0.0, 0.9], "include_biases": False},
            "train": {"epochs": 5},
            "saliency": {**OPTIONS, **options},
        }
    )


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("saliency") / "run"
    return out, run(config(), out)


@pytest.fixture(scope="module")
def fitted():
    """A fit of the same grid called directly (the run's Fitted keeps the dense network and every grid
    point's mask in memory), fine-tuning only the best λ per criterion and π."""
    cfg = config(finetune="best")
    dataset = load_datasets(cfg)[0]
    net = new_net(cfg, dataset.input_shape, dataset.output_dim, seed=cfg.seed)
    ctx = FitContext.from_config(cfg, dataset, device=resolve_device("cpu"))
    fit = get_method("saliency").fit(net, dataset, cfg.method_options, ctx)
    return cfg, dataset, fit


def rows_of(metrics, criterion, key):
    return [value for (c, _, _), value in zip(metrics["grid"], metrics[key]) if c == criterion]


def test_the_grid_covers_every_criterion_stage_count_and_penalty(saved_run):
    out, metrics = saved_run
    expected = [[c, s, p] for c in CRITERIA for s in (1, 3) for p in (0.0, 1.0)]
    assert metrics["grid"] == expected
    for key in (
        "delta_loss",
        "gap_before_finetune",
        "gap_after_finetune",
        "error_after_pruning",
        "error_after_finetune",
    ):
        assert len(metrics[key]) == len(expected)
    assert all(g is not None for g in metrics["gap_after_finetune"]) and metrics["finetuned_points"] == 16
    for before, after, gap_before, gap_after in zip(
        metrics["error_after_pruning"],
        metrics["error_after_finetune"],
        metrics["gap_before_finetune"],
        metrics["gap_after_finetune"],
    ):
        assert gap_before == pytest.approx(before - metrics["error_before_pruning"])
        assert gap_after == pytest.approx(after - metrics["error_before_pruning"])
    assert set(metrics["best"]) == set(CRITERIA)
    for criterion, best in metrics["best"].items():
        assert set(best) >= {"penalty", "stages", "delta_loss", "gap_before_finetune", "gap_after_finetune", "rho"}
        assert best["stages"] == 3  # the largest π
        assert best["delta_loss"] == min(
            d for (c, s, _), d in zip(metrics["grid"], metrics["delta_loss"]) if c == criterion and s == 3
        )
    report = (out / "report.md").read_text()
    assert "## Pruning criteria (paper 001)" in report and "delta_loss.png" in report
    assert (out / "delta_loss.png").is_file() and (out / "gap_vs_delta_loss.png").is_file()


def test_saved_network_has_exactly_its_sparsity_and_a_budget_over_its_scores_keeps_its_mask(saved_run):
    """The run's network (magnitude's best point, fine-tuned) has exactly ⌊0.9·D⌋ of its D weights at
    zero, and a budget at 0.9 over its scores removes exactly those."""
    out, metrics = saved_run
    _, _, fit = load_run(out)
    weights = {name: p.detach() for name, p in fit.net.named_parameters() if name.endswith("weight")}
    total = sum(p.numel() for p in weights.values())
    assert sum(int((p == 0).sum()) for p in weights.values()) == math.floor(0.9 * total)
    assert set(fit.scores()) == set(weights)
    masks = prune(fit.scores(), Budget(sparsity=0.9))
    for name, param in weights.items():
        assert torch.equal(masks[name], param != 0)
    point = next(row for row in metrics["pruning_curve"] if row["droprate"] == 0.9)
    assert point["test_error"] == pytest.approx(metrics["test_error"])
    assert metrics["test_error"] == pytest.approx(
        metrics["error_after_finetune"][metrics["grid"].index(["magnitude", 3, 0.0])]
    )


def test_recorded_loss_change_and_masks_match_the_saliency_module(fitted):
    """For every grid point, ΔL recomputed by loss_change on the whole training set (ΔL's subset is all
    of digits' 1437 rows) from the point's mask equals the recorded one, and the mask is the one
    bayesprune.methods.saliency.stages.multi_stage_masks gives from the same seed; the error right after pruning is
    the masked dense network's."""
    cfg, dataset, fit = fitted
    assert len(fit.loss_rows) == dataset.num_train
    for index, point in enumerate(fit.points):
        assert fit.report["delta_loss"][index] == point.delta_loss
        assert loss_change(fit.dense, point.masks, dataset.x_train, dataset.y_train) == pytest.approx(
            point.delta_loss, rel=1e-5, abs=1e-7
        )
        if point.stages == 3 and point.criterion in ("lm", "qm"):
            generator = torch.Generator().manual_seed(cfg.seed + 1)
            reference = multi_stage_masks(
                fit.dense,
                point.criterion,
                0.9,
                x=dataset.x_train,
                y=dataset.y_train,
                stages=3,
                penalty=point.penalty,
                examples_per_stage=100,
                generator=generator,
            )
            assert all(torch.equal(reference[site], point.masks[site]) for site in reference)
    point = fit.points[5]
    with torch.no_grad():
        params = {name: p * point.masks[name] if name in point.masks else p for name, p in fit.dense.named_parameters()}
        logits = torch.func.functional_call(fit.dense, params, (dataset.x_test,))
    error = 100 * float((logits.argmax(1) != dataset.y_test).float().mean())
    assert fit.report["error_after_pruning"][5] == pytest.approx(error, abs=1e-4)


def test_magnitude_pruning_is_invariant_to_the_penalty_and_the_stages(fitted, saved_run):
    """Paper 001, section 5: MP does not depend on λ or π, so every magnitude row has the same mask and ΔL."""
    _, _, fit = fitted
    magnitude = [p for p in fit.points if p.criterion == "magnitude"]
    assert len({p.delta_loss for p in magnitude}) == 1
    assert all(torch.equal(p.masks[site], magnitude[0].masks[site]) for p in magnitude for site in p.masks)
    _, metrics = saved_run
    assert len(set(rows_of(metrics, "magnitude", "delta_loss"))) == 1
    assert len(set(rows_of(metrics, "magnitude", "gap_after_finetune"))) == 1  # one fine-tuning for the shared mask


def test_best_mode_fine_tunes_the_lowest_loss_change_penalty_per_criterion_and_stage_count(fitted):
    cfg, _, fit = fitted
    tuned = [(p.criterion, p.stages, p.penalty) for p in fit.points if p.error_after_finetune is not None]
    expected = []
    for criterion in CRITERIA:
        for stages in (1, 3):
            candidates = [p for p in fit.points if p.criterion == criterion and p.stages == stages]
            best = min(candidates, key=lambda p: p.delta_loss)
            expected.append((criterion, stages, best.penalty))
    assert tuned == expected
    assert all(best["rho"] is None for best in fit.report["best"].values())  # two fine-tuned points per criterion


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_spearman_rho_matches_scipy(saved_run):
    _, metrics = saved_run
    for criterion in CRITERIA:
        expected = spearmanr(
            rows_of(metrics, criterion, "delta_loss"), rows_of(metrics, criterion, "gap_after_finetune")
        ).statistic
        rho = metrics["best"][criterion]["rho"]
        if np.isnan(expected):
            assert rho is None  # magnitude: a constant ΔL has no ranking
        else:
            assert rho == pytest.approx(expected)
    assert metrics["spearman_rho"] == pytest.approx(
        spearmanr(metrics["delta_loss"], metrics["gap_after_finetune"]).statistic
    )
    generator = np.random.default_rng(0)
    for _ in range(5):
        a, b = generator.integers(0, 4, 12), generator.normal(size=12).round(1)  # many ties
        assert spearman_or_none(a, b) == pytest.approx(spearmanr(a, b).statistic)
    assert spearman_or_none([1, 2], [2, 1]) is None and spearman_or_none([1, 1, 1], [1, 2, 3]) is None


@pytest.mark.parametrize(
    "key, value",
    [
        ("criteria", ["magnitude", "nonsense"]),
        ("criteria", []),
        ("criteria", ["lm", "lm"]),
        ("sparsity", 1.0),
        ("stages", [0]),
        ("stages", [1, 1]),
        ("penalties", [-1.0]),
        ("schedule", "cubic"),
        ("examples_per_stage", 0),
        ("loss_examples", 0),
        ("finetune_epochs", -1),
        ("finetune", "some"),
        ("stages", 3),
    ],
)
def test_bad_options_are_refused_naming_the_field(key, value):
    with pytest.raises(ConfigError, match=rf"^saliency\.{key} must"):
        config(**{key: value})
