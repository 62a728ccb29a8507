"""What a ``bayesprune run`` costs around its training: seconds and peak memory of each phase of a run.

The network is torchvision's resnet18 (random weights, 10 classes) as ``model.factory``; the data are
scikit-learn's digits as 3x32x32 images (each 8x8 pixel repeated 4x4, the grey level in all three
channels; 1437 training and 360 test rows, the package's own split), written to an ``.npz``. One epoch,
one torch thread. The phases are timed by wrapping the runner's calls: ``training`` (``Method.fit``),
``pruning_curve``, ``baseline`` (the plain network), ``inference_data`` (the ArviZ conversion),
``posterior.nc`` (writing it), ``report``; ``rest`` is the run's total less these (data, network,
metrics, moving the run into place).

    python benchmarks/run_cost.py                         # sbnn
    python benchmarks/run_cost.py --method sparse-vd --set baseline.enabled=false

Prints a table of seconds and the peak resident memory (MiB) per phase, and the work outside training
over the training epoch (the target of issue 40: at most about 2).
"""

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import tomli_w
import torch

import bayesprune.pipeline.runner as runner
from bayesprune.methods import get_method
from bayesprune.pipeline.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import Sampler  # noqa: E402

FACTORY = """
import torchvision


def resnet18(input_shape, output_dim):
    return torchvision.models.resnet18(weights=None, num_classes=output_dim)
"""


def digits_as_images(path: Path, copies: int = 1) -> None:
    """scikit-learn's digits as 3x32x32 images in ``path`` (the package's digits split), each split's rows
    ``copies`` times over: a larger set of the same images, for costs that grow with the rows."""
    from bayesprune.data import load_dataset

    data = load_dataset("digits")

    def images(x):
        x = x.reshape(-1, 1, 8, 8).repeat_interleave(4, 2).repeat_interleave(4, 3)
        return np.tile(x.expand(-1, 3, -1, -1).numpy().astype(np.float32), (copies, 1, 1, 1))

    np.savez(
        path,
        x_train=images(data.x_train),
        y_train=np.tile(data.y_train.numpy(), copies),
        x_test=images(data.x_test),
        y_test=np.tile(data.y_test.numpy(), copies),
    )


class Phases(Sampler):
    """:class:`memory.Sampler` that also sums the seconds spent in each phase."""

    def __init__(self, profile=None):
        super().__init__()
        self.seconds, self.cpu_seconds, self.profile = {}, {}, profile

    @contextmanager
    def within(self, phase: str):
        start, cpu = time.perf_counter(), time.process_time()
        profiler = cProfile.Profile() if phase == self.profile else None
        with super().within(phase):
            if profiler is not None:
                profiler.enable()
            yield
            if profiler is not None:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
        self.cpu_seconds[phase] = self.cpu_seconds.get(phase, 0.0) + time.process_time() - cpu


def instrument(phases: Phases, method) -> None:
    def phase(name, function):
        def wrapped(*args, **kwargs):
            with phases.within(name):
                return function(*args, **kwargs)

        return wrapped

    cls = type(method)  # the runner makes its own instance
    cls.fit = phase("training", cls.fit)
    cls.inference_data = phase("inference_data", cls.inference_data)
    runner.pruning_curve = phase("pruning_curve", runner.pruning_curve)
    runner.train_plain = phase("baseline", runner.train_plain)
    runner.write_posterior = phase("posterior.nc", runner.write_posterior)
    runner.write_report = phase("report", runner.write_report)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="sbnn")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--copies", type=int, default=1, help="each row this many times (default 1)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", metavar="PHASE", help="print cProfile's 40 costliest calls of this phase")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "tvnets.py").write_text(FACTORY)
        sys.path.insert(0, str(folder))
        digits_as_images(folder / "digits.npz", args.copies)
        settings = {
            "method": args.method,
            "device": "cpu",
            "seed": 0,
            "data": {"dataset": "npz", "path": str(folder / "digits.npz"), "batch_size": 128},
            "model": {"factory": "tvnets:resnet18"},
            "train": {"epochs": 1},
        }
        (folder / "run.toml").write_text(tomli_w.dumps(settings))
        config = load_config(str(folder / "run.toml"), args.overrides)
        phases = Phases(args.profile)
        instrument(phases, get_method(config.method))
        start, start_cpu = time.perf_counter(), time.process_time()
        with phases.running():
            metrics = runner.run(config, folder / "run")
        total, total_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        files = {path.name: path.stat().st_size for path in (folder / "run").iterdir()}
    seconds = {name: round(value, 1) for name, value in phases.seconds.items()}
    seconds["rest"] = round(total - sum(phases.seconds.values()), 1)
    cpu = {name: round(value, 1) for name, value in phases.cpu_seconds.items()}
    cpu["rest"] = round(total_cpu - sum(phases.cpu_seconds.values()), 1)
    outside = total - phases.seconds["training"]
    result = {
        "method": args.method,
        "overrides": args.overrides,
        "copies": args.copies,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "total_seconds": round(total, 1),
        "total_cpu_seconds": round(total_cpu, 1),
        "outside_over_training": round(outside / phases.seconds["training"], 2),
        "outside_over_training_cpu": round(
            (total_cpu - phases.cpu_seconds["training"]) / phases.cpu_seconds["training"], 2
        ),
        "peak_mib": {name: round(value / 2**20) for name, value in phases.peaks.items()},
        "test_error": metrics.get("test_error"),
        "posterior_nc_mib": round(files.get("posterior.nc", 0) / 2**20, 1),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"resnet18 on digits 3x32x32 x{args.copies}, {args.method}, 1 epoch, 1 thread {' '.join(args.overrides)}")
    print(f"{'phase':16s}{'seconds':>9s}{'CPU s':>9s}{'peak MiB':>10s}")
    for name, value in seconds.items():
        print(f"{name:16s}{value:9.1f}{cpu[name]:9.1f}{result['peak_mib'].get(name, float('nan')):10.0f}")
    print(f"{'total':16s}{total:9.1f}{total_cpu:9.1f}")
    print(
        f"outside training / training: {result['outside_over_training']:.2f} "
        f"(CPU time: {result['outside_over_training_cpu']:.2f})"
    )
    print(f"posterior.nc: {result['posterior_nc_mib']} MiB; test error {result['test_error']}")


if __name__ == "__main__":
    main()
