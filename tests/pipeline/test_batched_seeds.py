"""A run of several seeds of a method that fits them together (``Method.fits_together``: magnitude
pruning's plain network) trains them as one stacked model, and each seed's metrics are those of the
same seed run alone (issue 51, item 1)."""

import gc
import json
import weakref

import pytest
import torch
from torch import nn

from bayesprune.core import batched
from bayesprune.core.loop import rng_state
from bayesprune.data import load_dataset
from bayesprune.methods import get_method
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.fits import fit_chains_together, fit_stack, start_fit
from bayesprune.pipeline.runner import run
from helpers import assert_close

SHORT = ["train.epochs=4", "prune.finetune_epochs=1", "prune.sparsities=[0.0, 0.9]"]
COMPARED = ("test_error", "baseline_test_error", "train_epochs", "train_steps", "pruning_curve")


class DeviceMemory:
    """A device that holds at most ``fits`` fits in one stack: the stack's step raises the device's
    out-of-memory error (through :data:`bayesprune.core.batched.BEFORE_STEP`) at the third step of its
    second epoch, after it trained, for a larger stack. It keeps a weak reference to every stack that ran
    out, and ``leaked`` counts those still alive when a smaller stack starts (the device's memory not given
    back before the fallback trains)."""

    def __init__(self, fits: int):
        self.fits, self.failed, self.leaked = fits, [], 0

    def __call__(self, stack, epoch, index):
        if epoch == index == 0:
            gc.collect()  # what is still alive is referenced, not garbage
            self.leaked += sum(ref() is not None for ref in self.failed)
        if stack.count > self.fits and (epoch, index) == (1, 2):
            self.failed.append(weakref.ref(next(iter(stack.params.values()))))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """``alone(validation)``: the metrics of seeds 1, 2 and 3 each run alone (the oracle), run once per
    validation share for the module (the cases without validation share them)."""
    runs = {}

    def metrics(validation):
        if validation not in runs:
            folder = tmp_path_factory.mktemp(f"alone-{validation}")
            runs[validation] = {}
            for seed in (1, 2, 3):
                run(
                    load_config("magnitude-digits", [*SHORT, f"train.validation={validation}", f"seed={seed}"]),
                    folder / f"{seed}",
                )
                runs[validation][seed] = json.loads((folder / f"{seed}" / "metrics.json").read_text())
        return runs[validation]

    return metrics


@pytest.mark.parametrize(("validation", "memory"), [(0.0, None), (0.25, None), (0.0, 1)])
def test_seeds_trained_together_give_each_seeds_own_run(validation, memory, alone, tmp_path, monkeypatch, capsys):
    """``memory``: the most fits a stack may hold before the device runs out (``None``: any number)."""
    method = type(get_method("magnitude"))
    settings = [*SHORT, f"train.validation={validation}"]
    alone = alone(validation)

    def refuse(*args, **kwargs):
        raise AssertionError("a seed was fitted alone")

    monkeypatch.setattr(method, "fit", refuse)
    device = DeviceMemory(memory or 3)
    monkeypatch.setattr(batched, "BEFORE_STEP", [device])
    capsys.readouterr()
    run(load_config("magnitude-digits", [*settings, "seeds=[1, 2, 3]"]), tmp_path / "together")
    said = capsys.readouterr().err.splitlines()
    if memory is not None:  # 3 -> 2 + 1 -> 1 + 1 + 1
        assert said == [
            "bayesprune: 3 fits together ran out of device memory; fitting 2 at a time",
            "bayesprune: 2 fits together ran out of device memory; fitting 1 at a time",
        ]
        assert len(device.failed) == 2 and device.leaked == 0
    for seed in (1, 2, 3):
        together = json.loads((tmp_path / "together" / "seeds" / f"seed-{seed}.json").read_text())
        for key in COMPARED:
            assert_close(together[key], alone[seed][key], (seed, key))
        assert together.get("best_epoch") == alone[seed].get("best_epoch")


def test_seeds_whose_networks_the_stack_refuses_are_fitted_one_at_a_time_said_in_one_line(capsys):
    """Networks of other shapes (a factory that builds each seed's own), or with dropout: each seed fits alone."""
    config = load_config("magnitude-digits", SHORT)
    shapes = {1: nn.Linear(2, 3), 2: nn.Linear(2, 4)}
    assert fit_stack(config, get_method("magnitude"), [1, 2], lambda seed: (None, (shapes[seed], None))) == {}
    said = capsys.readouterr().err
    assert said == (
        "bayesprune: 2 seeds fitted one at a time: batched fits must share one network shape: fit 2's weight is "
        "(4, 2), fit 1's (3, 2)\n"
    )


def test_a_runs_chains_after_the_first_train_together_each_as_fitted_alone(short_config, tmp_path, monkeypatch):
    """``chains = 3``: chains 2 and 3 (seeds 1 and 2) are trained as one stack once chain 1 is fitted, each
    chain's fit (the sBNN's guide) that of the chain fitted alone from its seed; a run asks for that stack."""
    config = short_config("sbnn", "chains=3", "model.hidden=[8]")
    method = get_method("sbnn")
    data = load_dataset("digits")
    stacked = fit_chains_together(config, method, data, None, 3, torch.device("cpu"), False)
    assert sorted(stacked) == [1, 2]
    for chain, (_, baseline_net, start, ctx, fitted) in stacked.items():
        assert baseline_net is start is None  # the first chain's alone
        net, _, _, alone_ctx = start_fit(config, data, None, seed=chain, device=torch.device("cpu"), progress=False)
        alone = method.fit(net, data, config.method_options, alone_ctx)
        assert torch.equal(ctx.rng_after["torch"], rng_state()["torch"])
        for part, values in alone.state_dict().items():
            for key, value in values.items():
                torch.testing.assert_close(fitted.state_dict()[part][key], value, rtol=1e-4, atol=1e-5)

    magnitude = type(get_method("magnitude"))
    stacks, together = [], magnitude.fit_together

    def counted(self, nets, *args):
        stacks.append(len(nets))
        return together(self, nets, *args)

    monkeypatch.setattr(magnitude, "fit_together", counted)
    run(load_config("magnitude-digits", [*SHORT, "chains=3"]), tmp_path / "run")
    assert stacks == [2]


def _uci(root, splits: int, rows: int = 60):
    """A UCI folder (the layout of Gal and Ghahramani's splits) of ``rows`` rows y = x1 - 2 x2 + noise, each
    split holding out its own 10 rows."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2, generator=generator)
    y = x[:, 0] - 2 * x[:, 1] + 0.1 * torch.randn(rows, generator=generator)
    folder = root / "toy"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("\n".join(f"{a} {b} {c}" for (a, b), c in zip(x.tolist(), y.tolist())) + "\n")
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    for split in range(splits):
        test = set(range(10 * split, 10 * split + 10))
        (folder / f"index_train_{split}.txt").write_text("\n".join(str(i) for i in range(rows) if i not in test) + "\n")
        (folder / f"index_test_{split}.txt").write_text("\n".join(map(str, sorted(test))) + "\n")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    return ["data.dataset='uci'", f"data.root='{root}'", "data.name='toy'"]


@pytest.mark.parametrize(("method", "alone_seeds"), [("magnitude", [0]), ("sbnn", [0, 1, 2])])
def test_a_runs_splits_after_the_first_train_together_each_as_its_split_alone(
    method, alone_seeds, tmp_path, monkeypatch
):
    """A UCI run of 3 splits: split 0 is fitted alone (with its checkpoint), splits 1 and 2 (seeds 1 and 2) as
    one stack where the method's stack holds them (the sBNN's does not hold a learned noise scale: one after
    another); the run's mean and standard error of every metric are those of the 3 splits each run alone."""
    uci = _uci(tmp_path / "uci", splits=3)
    settings = [*SHORT, "prune.sparsities=[0.0, 0.5]", "train.validation=0.2", *uci]
    config = f"{method}-digits"
    alone = [
        run(load_config(config, [*settings, f"data.split={split}", f"seed={split}"]), tmp_path / f"alone-{split}")
        for split in range(3)
    ]
    kind = type(get_method(method))
    fitted, fit = [], kind.fit
    monkeypatch.setattr(
        kind, "fit", lambda self, net, data, options, ctx: fitted.append(ctx.seed) or fit(self, net, data, options, ctx)
    )
    together = run(load_config(config, [*settings, "data.splits=[0, 1, 2]"]), tmp_path / "together")
    assert fitted == alone_seeds
    for key in ("test_rmse", "test_ll", "baseline_test_rmse"):
        if key not in alone[0]:
            continue
        values = torch.tensor([metrics[key] for metrics in alone], dtype=torch.float64)
        assert together[f"{key}_mean"] == pytest.approx(float(values.mean()), rel=1e-5), key
        assert together[f"{key}_stderr"] == pytest.approx(
            float(values.std(correction=0) / 3**0.5), rel=1e-4, abs=1e-9
        ), key
