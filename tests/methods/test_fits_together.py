"""Variational fits of several seeds trained together as one stack (``Method.fit_together`` of the sBNN
and Sparse VD) end where each seed's separate fit ends (issue 51, item 1): the oracle is ``Method.fit``
run once per seed on a small MLP, compared on the fitted parameters, every step's loss, the epoch early
stopping kept, the training cost and the random state each fit leaves for the evaluation that follows."""

import pytest
import torch

from bayesprune.core.early_stopping import hold_out
from bayesprune.core.loop import rng_state
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, get_method
from bayesprune.models import new_net
from bayesprune.pipeline.config import load_config

SEEDS = (3, 4)
SMALL = ["model.hidden=[12]", "train.epochs=3", "train.validation=0.25", "train.patience=1"]


def begin(config, data, seed):
    """A fit's network, rows and context, as the runner starts a seed's fit."""
    data, *validation = hold_out(data, config.train.validation, seed=seed)
    net = new_net(config, data.input_shape, data.output_dim, seed=seed)
    ctx = FitContext.from_config(config, data, device=torch.device("cpu"), seed=seed, validation=tuple(validation))
    return net, data, ctx


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("sbnn", []),
        ("sbnn", ["sbnn.penalty=geometric", "sbnn.num_particles=2", "optim.schedule=constant"]),
        ("sbnn", ["sbnn.local_reparameterization=true"]),
        ("sparse-vd", ["sparse-vd.kl_anneal_start=1", "sparse-vd.kl_anneal_end=3"]),
        (
            "sparse-vd",
            ["sparse-vd.pretrain_epochs=1", "sparse-vd.linear_lr_decay=false", "sparse-vd.kl_anneal_start=0"],
        ),
    ],
)
def test_fits_together_end_where_each_seeds_separate_fit_ends(name, settings):
    config = load_config(f"{name}-digits", [*SMALL, *settings])
    data = load_dataset("digits")
    method = get_method(name)
    separate = []
    for seed in SEEDS:
        net, rows, ctx = begin(config, data, seed)
        fitted = method.fit(net, rows, config.method_options, ctx)
        separate.append((fitted, ctx, rng_state()["torch"]))
    begun = [begin(config, data, seed) for seed in SEEDS]
    nets, parts, contexts = map(list, zip(*begun))
    together = method.fit_together(nets, parts, config.method_options, contexts)
    for (alone, ctx, drawn), fitted, (_, _, context) in zip(separate, together, begun):
        assert type(fitted) is type(alone)
        assert context.best_epoch == ctx.best_epoch
        cost, cost_alone = context.training_cost(), ctx.training_cost()
        assert cost.pop("train_seconds") > 0 and cost_alone.pop("train_seconds") > 0 and cost == cost_alone
        assert fitted.history.step_losses == pytest.approx(alone.history.step_losses, rel=1e-5)
        assert torch.equal(context.rng_after["torch"], drawn)  # the draws the separate fit made, no more
        expected, actual = alone.state_dict(), fitted.state_dict()
        for part in expected:
            for key, value in expected[part].items():
                torch.testing.assert_close(actual[part][key], value, rtol=1e-4, atol=1e-5, msg=f"{part}.{key}")
        scores = alone.scores()
        for site, score in fitted.scores().items():
            torch.testing.assert_close(score, scores[site], rtol=1e-4, atol=1e-4, msg=site)


def test_fits_the_stack_does_not_hold_run_one_after_another():
    """Several starts (``sbnn.starts``) are several fits each: the seeds are fitted one at a time, as alone."""
    config = load_config("sbnn-digits", [*SMALL, "train.epochs=1", "sbnn.starts=[1, 0.5]", "sbnn.keep=validation"])
    data = load_dataset("digits")
    method = get_method("sbnn")
    net, rows, ctx = begin(config, data, 3)
    alone = method.fit(net, rows, config.method_options, ctx)
    begun = [begin(config, data, seed) for seed in (3, 4)]
    nets, parts, contexts = map(list, zip(*begun))
    together = method.fit_together(nets, parts, config.method_options, contexts)
    assert together[0].starts == alone.starts
    torch.testing.assert_close(together[0].guide.loc, alone.guide.loc)
