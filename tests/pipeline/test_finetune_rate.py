"""``prune.finetune_lr``: the fine-tuning rate chosen on held-out training rows. Oracles: the held-out
errors of every candidate recomputed by hand (the split drawn again from the seed, each copy fine-tuned
by :func:`finetune` and scored by counting its mistakes), whose argmin must be the rate chosen and whose
network must be the one returned; the test rows replaced by NaN change nothing (never read)."""

import copy

import pytest
import torch
from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.data.registry import Dataset
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.finetune import FineTuning, finetune

RATES = (1.0, 0.03, 1e-5)


def noisy(rows: int):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(rows, 4, generator=generator)
    flip = torch.rand(rows, generator=generator) < 0.15
    return x, ((x[:, 0] - x[:, 1] > 0) ^ flip).long()


def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Linear(12, 2))


def test_the_chosen_rate_is_the_argmin_of_the_held_out_errors_and_the_test_rows_are_not_read():
    x, y = noisy(200)
    nan = torch.full((50, 4), float("nan"))
    dataset = Dataset(
        name="toy", task="classification", x_train=x, y_train=y, x_test=nan, y_test=torch.zeros(50).long(),
        input_shape=(4,), num_classes=2,
    )  # fmt: skip
    kept = torch.ones(12, dtype=torch.bool)
    kept[8:] = False  # four hidden units removed and held at zero
    masks = {"0.weight": kept[:, None].expand(12, 4), "0.bias": kept, "2.weight": kept[None, :].expand(2, 12)}
    tuning = FineTuning(epochs=3, lr=0.5, batch_size=25, seed=7, candidates=RATES, held_out=0.3)
    chosen, choice = tuning.apply(network(), dataset, masks)

    order = torch.randperm(200, generator=torch.Generator().manual_seed(7))  # the oracle: the split again
    held, rest = order[:60], order[60:].sort().values
    errors, nets = [], []
    for rate in RATES:
        net = finetune(network(), x[rest], y[rest], masks, epochs=3, lr=rate, batch_size=25, seed=7)
        with torch.no_grad():
            errors.append(100.0 * (net(x[held]).argmax(-1) != y[held]).float().mean().item())
        nets.append(net)
    assert len(set(errors)) == len(RATES)  # the rates differ on the held-out rows, so the choice means something
    best = errors.index(min(errors))
    assert choice == {
        "finetune_lr": RATES[best],
        "held_out_metrics": {str(r): pytest.approx(e) for r, e in zip(RATES, errors)},
    }
    for got, want in zip(chosen.state_dict().values(), nets[best].state_dict().values()):
        assert torch.equal(got, want)
    assert chosen[0].weight[~kept].eq(0).all()  # removed units stay removed


def test_each_distinct_set_of_masks_is_fine_tuned_once():
    x, y = noisy(120)
    dataset = Dataset(
        name="toy", task="classification", x_train=x[:80], y_train=y[:80], x_test=x[80:], y_test=y[80:],
        input_shape=(4,), num_classes=2,
    )  # fmt: skip

    class Fitted:
        calibration = None

        def __init__(self):
            self.net = network()

        def network(self):
            return copy.deepcopy(self.net)

    tuning = FineTuning(epochs=1, lr=0.1, batch_size=20, seed=0, candidates=(0.1, 0.01))
    tuned = tuning.test_metrics(Fitted(), dataset)
    everything = {"0.weight": torch.ones(12, 4, dtype=torch.bool)}
    first = tuned(everything)
    assert tuned({}) == first and len(tuned.choices) == 1  # keeping everything is no mask: the same network
    half = {"0.weight": torch.arange(12)[:, None].expand(12, 4) < 6}
    tuned(half)
    tuned(dict(half))
    assert len(tuned.choices) == 2
    alone = [tuning.test_metric(network(), dataset, masks)[1] for masks in ({}, half)]  # each choice made again
    assert tuned.choices == alone and alone[0] != alone[1]


def test_finetune_lr_in_a_config():
    config = load_config("sparse-vd-digits", ["prune.finetune_epochs=2", "prune.finetune_lr=[0.01, 0.001]"])
    tuning = FineTuning.of(config, 1000)
    assert tuning.candidates == (0.01, 0.001) and tuning.held_out == 0.2
    assert tuning.steps(1000) == 2 * 2 * 8  # two candidates, 2 epochs of 800 rows in batches of 100
    single = FineTuning.of(load_config("sparse-vd-digits", ["prune.finetune_epochs=2", "prune.finetune_lr=0.05"]), 10)
    assert single.lr == 0.05 and single.candidates == ()
    default = FineTuning.of(load_config("sparse-vd-digits", ["prune.finetune_epochs=2", "optim.lr=0.02"]), 10)
    assert default.lr == 0.02 and default.candidates == ()
    for bad in ("0", "[0.1, 0.1]", "'fast'"):
        with pytest.raises(ConfigError, match=r"^prune\.finetune_lr must be a positive rate"):
            load_config("sparse-vd-digits", [f"prune.finetune_lr={bad}"])
