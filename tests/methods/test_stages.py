"""What a fit hands over and how it is timed (issue 48, item 2): every registered method builds its
:class:`~bayesprune.methods.Fitted` with everything it holds (the context's calibration and recorder of
the unpruned draws, its history), nothing is set on it afterwards, and the fit is timed in one place, the
context's stages."""

import copy
import time

import pytest
import torch

from bayesprune.core.normalization import Calibration
from bayesprune.core.predict import DrawOutputs
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, available_methods, get_method
from bayesprune.methods.stages import stages_of
from bayesprune.models.architectures import new_net

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _fit(method, short_config, data, **services):
    config = short_config(method, "train.epochs=1")
    ctx = FitContext.from_config(config, data, device=CPU, **services)
    net = new_net(config, data.input_shape, data.output_dim, seed=config.seed)
    start = time.perf_counter()
    fitted = get_method(method).fit(net, data, config.method_options, ctx)
    return config, ctx, fitted, time.perf_counter() - start


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_a_fit_and_a_restore_are_built_with_the_contexts_calibration_and_draws_and_timed_by_their_stages(
    method, short_config, digits
):
    calibration, draws = Calibration(digits.x_train[:64], batches=2, batch_size=32), DrawOutputs(rows=10)
    config, ctx, fitted, wall = _fit(method, short_config, digits, calibration=calibration, unpruned_draws=draws)
    assert fitted.calibration is calibration and fitted.unpruned_draws is draws
    assert fitted.history is not None and len(fitted.history.epoch_losses) >= 1
    stages = [stage["seconds"] for stage in ctx._finished]
    cost = ctx.training_cost()
    assert stages and all(seconds > 0 for seconds in stages)
    assert cost["train_seconds"] == pytest.approx(sum(stages), abs=1e-3) and 0 < cost["train_seconds"] <= wall
    assert not hasattr(fitted, "seconds")  # the fit's time is its context's, counted once

    restoring = FitContext.from_config(config, digits, device=CPU, calibration=calibration)
    net = copy.deepcopy(fitted.net)  # the fit's structure (smaller than built where it removed units)
    restored = get_method(method).restore(net, digits, config.method_options, restoring, fitted.state_dict())
    assert restored.calibration is calibration and restored.unpruned_draws is None


def _declared_stage(stages, name):
    """The declared stage a trained stage's name belongs to: the longest declared name it starts with."""
    matching = [stage for stage in stages if name.startswith(stage.name)]
    return max(matching, key=lambda stage: len(stage.name)) if matching else None


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_every_stage_a_fit_trains_is_declared_with_its_epochs_and_every_declared_stage_runs(
    method, short_config, digits
):
    """The oracle is the fit itself: the stages its context trained (name, epochs), against those its
    options declare (:func:`bayesprune.methods.stages.stages_of`) at its ``train.epochs``."""
    config, ctx, _, _ = _fit(method, short_config, digits)
    declared = stages_of(config.method_options, config.train.epochs)
    trained = [(stage["name"], len(stage["history"]["epoch_losses"])) for stage in ctx._finished]
    for name, epochs in trained:
        stage = _declared_stage(declared, name)
        assert stage is not None, f"{method} trained {name!r}, which its options do not declare: {declared}"
        assert epochs == stage.epochs, (name, stage)
    ran = {_declared_stage(declared, name).name for name, epochs in trained if epochs}
    assert ran == {stage.name for stage in declared if stage.epochs}, (trained, declared)


@pytest.mark.parametrize(
    ("method", "table", "running"),
    [
        ("pft", {"at_initialization": True, "pretrain_epochs": 30, "finetune_epochs": 30}, ("finetune_epochs",)),
        ("probmask", {"supermask": True, "finetune_epochs": 30}, ()),
        ("sparse-vd", {"pretrain_epochs": 30}, ("pretrain_epochs",)),
    ],
)
def test_a_budget_gives_its_epochs_to_the_stages_that_run_and_none_to_a_stage_that_does_not(method, table, running):
    """``compare.budget_epochs = 9`` on a main stage of 30 epochs: the epochs go to the stages the options
    run, in their proportions (one stage of 30 beside it: 5 and 4; alone: 9). A stage its options skip (PFT's
    pre-training at initialisation, ProbMask's fine-tuning of a supermask) took a third before, so that the
    fit trained 6 of the 9."""
    from bayesprune.pipeline.compare.comparison import held_to_budget

    base = {"method": method, "train": {"epochs": 30}, "prune": {"finetune_epochs": 0}}
    held = held_to_budget(base, dict(table), method, 9)
    given = [base["train"]["epochs"], *(held[option] for option in running)]
    assert sum(given) == 9 and sorted(given) == ([4, 5] if running else [9])
