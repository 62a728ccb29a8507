"""Peak memory of a LeNet-300-100 run: its training against what comes after (the predictive, ArviZ).

What is measured: the resident set size of this process, sampled every millisecond by a thread
while ``bayesprune.pipeline.runner.run`` executes a packaged config (``mnist-lenet-300-100`` by default;
``--epochs`` shortens its training), split by phase: ``setup`` (data, network), ``training``
(``Method.fit``), ``evaluation`` (the pruning curve with its Monte-Carlo predictive and the plain
baseline), ``inference_data`` (the ArviZ conversion: posterior draws, posterior predictive,
importance draws), ``writing`` (``posterior.nc`` and the report) and ``finishing`` (the rest of the
run after training: metrics, moving the run into place). The target is
``after_training_over_training`` (the largest peak after training over the training peak) of at
most 2.

Usage: ``python benchmarks/memory.py [--json] [--config mnist-lenet-300-100] [--epochs 1] [--set KEY=VALUE ...]``.
"""

import argparse
import json
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

import bayesprune.pipeline.runner as runner
from bayesprune.methods import get_method
from bayesprune.pipeline.config import load_config

PAGE = 4096


def resident_bytes() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * PAGE


class Sampler:
    """The largest resident set size seen in each phase, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.001):
        self.interval, self.phase, self.peaks = interval, "setup", {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.record()
            time.sleep(self.interval)

    def record(self):
        value = resident_bytes()
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), value)

    @contextmanager
    def running(self):
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    @contextmanager
    def within(self, phase: str):
        self.record()
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.record()
            self.phase = "finishing" if phase == "training" and previous == "setup" else previous


def instrument(sampler: Sampler, method):
    """Wrap the runner's phases so that the sampler knows which one runs."""

    def phase(name, function):
        def wrapped(*args, **kwargs):
            with sampler.within(name):
                return function(*args, **kwargs)

        return wrapped

    cls = type(method)  # the runner makes its own instance
    cls.fit = phase("training", cls.fit)
    cls.inference_data = phase("inference_data", cls.inference_data)
    runner._evaluate = phase("evaluation", runner._evaluate)
    runner.write_posterior = phase("writing", runner.write_posterior)
    runner.write_report = phase("writing", runner.write_report)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--config", default="mnist-lenet-300-100", help="packaged config or TOML path")
    parser.add_argument("--epochs", type=int, default=1, help="train.epochs (default 1)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = load_config(args.config, [f"train.epochs={args.epochs}", *args.overrides])
    method = get_method(config.method)
    sampler = Sampler()
    instrument(sampler, method)
    with sampler.running(), tempfile.TemporaryDirectory() as folder:
        runner.run(config, Path(folder) / "run")
    peaks = {phase: round(value / 2**20, 1) for phase, value in sampler.peaks.items()}
    after = max(value for phase, value in peaks.items() if phase not in ("setup", "training"))
    result = {
        "config": args.config,
        "epochs": args.epochs,
        "peak_mib": peaks,
        "training_peak_mib": peaks["training"],
        "after_training_peak_mib": after,
        "after_training_over_training": after / peaks["training"],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.config}, {args.epochs} epoch(s): peak resident memory per phase (MiB): {peaks}")
    print(f"after training / training: {result['after_training_over_training']:.2f}")


if __name__ == "__main__":
    main()
