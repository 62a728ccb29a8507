"""What several test modules share: a LeNet-5 written the usual way, a check of one-line data errors,
a run's metrics without wall-clock numbers, the comparisons' one-epoch settings and command-line launch, each method's shortest settings, and a posterior whose every network is right or wrong by one weight."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import Future

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.core.errors import ConfigError, DataError
from bayesprune.methods import available_methods
from bayesprune.methods.pbp.distributions import DiracSpikeSlab
from bayesprune.methods.stages import held_to_budget


class ClassicLeNet5(nn.Module):
    """6-16-120-84 LeNet-5 written the usual way: a forward with functional ReLU, pooling and view."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).view(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


#: Wall-clock numbers, which no two runs share.
TIMINGS = {"train_seconds", "epoch_seconds"}


def without_timings(value):
    """``value`` as ``metrics.json`` holds it, without wall-clock numbers at any depth."""
    if isinstance(value, dict):
        return {key: without_timings(item) for key, item in value.items() if key.removesuffix("_std") not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(item) for item in value]
    return json.loads(json.dumps(value))


@contextlib.contextmanager
def raises_data_error(*needles):
    """Expect a one-line DataError whose message contains every needle."""
    with pytest.raises(DataError) as info:
        yield info
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert str(needle) in message, f"{needle!r} not in {message!r}"


#: Comparison settings of one epoch everywhere: the compare and tracking tests check bookkeeping, not accuracy.
TINY = [
    "train.epochs=1",
    "baseline.epochs=1",
    "compare.finetune_epochs=1",
    "compare.latency_repeats=2",
    "pbp.prior_epochs=1",
    "pbp.prior_mask_epochs=1",
    "pbp.mc_samples=10",
    "pbp.prior_samples=5",
]


def start_compare(out, cwd, *options: str, settings=()) -> subprocess.Popen:
    """``bayesprune compare --out out *options`` in a process of its own (one thread, stderr piped), with
    :data:`TINY` then ``settings`` set. ``cwd`` is another folder than the checkout: there ``-m bayesprune``
    would import the source tree, not the installed package."""
    sets = [flag for item in [*TINY, *settings] for flag in ("--set", item)]
    argv = [sys.executable, "-m", "bayesprune", "compare", "--out", str(out), *options, *sets]
    return subprocess.Popen(
        argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True, cwd=cwd
    )


class InThisProcess:
    """The local engine's process pool, run here: each cell is executed when it is submitted."""

    def __init__(self, *args, **kwargs):
        pass

    def submit(self, function, *args):
        future = Future()
        try:
            future.set_result(function(*args))
        except Exception as error:  # a worker's exception, as the pool hands it back
            future.set_exception(error)
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        pass


@contextlib.contextmanager
def cells_here():
    """The local engine's cells (compare, sweep) run in this process while the block runs: no worker is
    spawned, and the thread count a cell sets (one, as a worker has) is restored afterwards."""
    from bayesprune.pipeline.compare import engines

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "ProcessPoolExecutor", InThisProcess)
        yield
    torch.set_num_threads(threads)


def signal_after_one_epoch(number: int):
    """A stand-in for the training loop's progress bar (``loop.tqdm``) over its epochs that raises signal
    ``number`` in this process as the second epoch begins: the run stops as that signal sent from outside
    stops it, with the first epoch's checkpoint."""

    class Bar(list):
        def __init__(self, epochs, **_):
            super().__init__(epochs)

        def __iter__(self):
            for index, epoch in enumerate(super().__iter__()):
                if index == 1:
                    signal.raise_signal(number)
                yield epoch

        def set_postfix(self, **_):
            pass

    return Bar


PBP_TINY = [
    "train.epochs=1",
    "pbp.prior_epochs=1",
    "pbp.prior_mask_epochs=1",
    "pbp.mc_samples=10",
    "pbp.prior_samples=5",
    "baseline.enabled=false",
]


class OneWeightDecides:
    """A linear classifier on the constant input 1 whose answer is right exactly when one Bernoulli keep
    draw of weight (0, 0) is 1 (λ = 0.3): every network is right on every example or on none, and a
    network drawn per example is wrong with probability 0.7, independently."""

    def __init__(self):
        self.net = torch.nn.Linear(1, 2)
        tiny = torch.full((2, 1), 1e-6)
        self.q = {
            "weight": DiracSpikeSlab(torch.tensor([[0.3], [1.0]]), torch.tensor([[1.0], [0.5]]), tiny),
            "bias": DiracSpikeSlab(torch.ones(2), torch.zeros(2), torch.full((2,), 1e-6)),
        }

    def network(self, params, x):
        return torch.func.functional_call(self.net, params, (x,))

    def posteriors(self):
        return self.q

    def sample_params(self):
        return {name: q.sample() for name, q in self.q.items()}


def shortest_of(method: str) -> tuple:
    """``(table, optim)`` in TOML layout: the method's digits config at its ``quick`` settings with every
    stage it declares one epoch long and ``train.epochs`` 1, the smallest ``compare.budget_epochs`` its
    stages take (:func:`bayesprune.methods.stages.held_to_budget`: only the network a comparison's row
    reports), read from the registry: a new method needs no entry."""
    from dataclasses import asdict

    from bayesprune.pipeline.config import load_config

    config = load_config(f"{method}-digits", ["train.epochs=2", "device='cpu'", *available_methods()[method].quick])
    for budget in range(1, 100):
        try:
            options, epochs, _ = held_to_budget(config.method_options, config.train.epochs, 0, budget, owner=method)
        except ConfigError:  # fewer epochs than its stages
            continue
        assert epochs == 1, (method, budget, epochs)
        table = {name: value for name, value in asdict(options).items() if value is not None}
        return table, {name: value for name, value in asdict(config.optim).items() if value is not None}
    raise AssertionError(f"{method}: no budget under 100 epochs runs its stages")


def assert_close(got, want, where):
    """``got`` equals ``want`` with every number to float tolerance, through nested lists and dicts (a curve's
    rows), which ``pytest.approx`` refuses from pytest 9.2 on."""
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            assert_close(got[key], want[key], (*where, key))
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for index, (part, wanted) in enumerate(zip(got, want)):
            assert_close(part, wanted, (*where, index))
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-9), where
    else:
        assert got == want, where


def image_folder(root, classes=None, sizes=(10, 12), count=3, mode="RGB"):
    """``root/{train,test}/<class>/<k>.png`` random images; ``classes`` maps part to its class names."""
    from PIL import Image

    rng = np.random.default_rng(0)
    classes = classes or {"train": ["circle", "square"], "test": ["circle", "square"]}
    for part, names in classes.items():
        for name in names:
            (root / part / name).mkdir(parents=True, exist_ok=True)
            for k in range(count):
                shape = sizes if mode == "L" else (*sizes, 3)
                Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode).save(
                    root / part / name / f"{k}.png"
                )
    return str(root)
