"""Independent fits trained together as one stacked model end where the same fits trained one after
another end (issue 51, item 1): the oracle is :meth:`FitContext.train_network` run once per seed."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.core.batched import StackedNetworks, train_stacked
from bayesprune.core.errors import ConfigError, Interrupted
from bayesprune.core.loop import STOP, TensorBatches
from bayesprune.core.optim import OptimConfig
from bayesprune.methods.context import FitContext, train_networks_together


def mlp(seed: int, hidden: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 3))


def problem(rows: int = 200):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2, 3, generator=generator)
    y = (x.flatten(1) @ torch.randn(6, 3, generator=generator)).argmax(-1)
    return x, y


@pytest.mark.parametrize(
    "optim", [OptimConfig(lr=0.05, schedule="cosine"), OptimConfig(name="sgd", lr=0.1, momentum=0.9, weight_decay=1e-3)]
)
def test_fits_together_end_where_separate_fits_end(optim):
    x, y = problem()
    validation = (x[:60] + 0.5 * torch.randn(60, 2, 3, generator=torch.Generator().manual_seed(1)), y[:60])
    seeds = [3, 4, 5, 6]

    def context(seed):
        return FitContext(seed=seed, batch_size=32, optim=optim, validation=validation, patience=2)

    separate, separate_best = [], []
    for seed in seeds:
        net, ctx = mlp(seed), context(seed)
        history = ctx.train_network("train", net, ctx.batches(x, y), epochs=12, loss=F.cross_entropy, validate=True)
        separate.append((net, history, ctx.training_cost()))
        separate_best.append(ctx.best_epoch)

    contexts = [context(seed) for seed in seeds]
    nets = [mlp(seed) for seed in seeds]
    histories = train_networks_together(contexts, "train", nets, x, y, epochs=12, loss=F.cross_entropy, validate=True)

    assert [ctx.best_epoch for ctx in contexts] == separate_best
    for (net, history, cost), together, ctx, alone in zip(separate, histories, contexts, nets):
        together_cost = ctx.training_cost()  # the epochs each fit trained before its own early stop
        assert together_cost.pop("train_seconds") > 0 and cost.pop("train_seconds") > 0 and together_cost == cost
        assert together.epoch_losses == pytest.approx(history.epoch_losses, rel=1e-5)
        for (name, expected), actual in zip(net.named_parameters(), alone.parameters()):
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_the_stacked_forward_pass_is_each_networks():
    nets = [mlp(seed) for seed in range(3)]
    x = torch.randn(3, 5, 2, 3)
    stacked = StackedNetworks(nets)
    for k, net in enumerate(nets):
        torch.testing.assert_close(stacked(x)[k], net(x[k]))
        torch.testing.assert_close(stacked(x[0])[k], net(x[0]))  # the same rows for every fit


def test_networks_of_other_shapes_or_with_dropout_or_batch_norm_are_refused_in_one_line():
    x, y = problem(40)
    with pytest.raises(ConfigError, match=r"^batched fits must share one network shape: fit 2's 1.weight is \(8, 6\)"):
        train_stacked(
            [mlp(0), mlp(1, hidden=8)],
            [TensorBatches(x, y, batch_size=8)] * 2,
            epochs=1,
            loss=F.cross_entropy,
            optim=OptimConfig(),
        )
    with pytest.raises(ConfigError, match="dropout"):
        StackedNetworks([nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))] * 2)
    with pytest.raises(ConfigError, match="batch norm"):
        StackedNetworks([nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))] * 2)


class Scaled(nn.Sequential):
    """A network whose forward reads an attribute of its own (not a parameter or buffer)."""

    def __init__(self, scale):
        super().__init__(nn.Linear(2, 3))
        self.scale = scale

    def forward(self, x):
        return super().forward(x) * self.scale


def test_networks_whose_other_attributes_differ_are_refused_naming_the_attribute():
    """The stack runs one module's forward for every fit: the fits' own attributes must be the same, or
    fit 2 would compute fit 1's function."""
    with pytest.raises(ConfigError, match=r"^batched fits must share one network: fit 2's scale is 2.0, fit 1's 1.0$"):
        StackedNetworks([Scaled(1.0), Scaled(2.0)])
    nets = [Scaled(2.0), Scaled(2.0)]
    x = torch.randn(4, 2)
    torch.testing.assert_close(StackedNetworks(nets)(x)[1], nets[1](x))


def test_contexts_that_differ_beyond_the_seed_are_refused_naming_the_key():
    x, y = problem(40)
    contexts = [FitContext(seed=0, batch_size=8), FitContext(seed=1, batch_size=16)]
    with pytest.raises(ConfigError, match="^batched fits must share batch_size"):
        train_networks_together(contexts, "train", [mlp(0), mlp(1)], x, y, epochs=1, loss=F.cross_entropy)


def test_a_signal_stops_the_stack_after_the_step_in_progress(monkeypatch):
    x, y = problem(64)
    nets = [mlp(0), mlp(1)]
    before = [net[1].weight.detach().clone() for net in nets]
    monkeypatch.setattr(STOP, "signal", 15)
    with pytest.raises(Interrupted, match="^stopped by signal 15 in epoch 1$"):
        train_stacked(
            nets, [TensorBatches(x, y, batch_size=8)] * 2, epochs=3, loss=F.cross_entropy, optim=OptimConfig()
        )
    assert all(torch.equal(net[1].weight, weights) for net, weights in zip(nets, before))  # nothing copied back
