"""Peak memory of one epoch trained from a DataLoader read on demand, against the number of images.

Each measurement runs in a process of its own (peak resident memory, ``ru_maxrss``, is a process's
high-water mark): ``bp.fit_method(method, net, loader, test, epochs=1, stream=True)`` on a
:class:`GeneratedImages` DataLoader of N images 3x32x32, each synthesised from its index when read
(never stored), with a small CNN (two 3x3 convolutions of 8 channels, stride 2, and a linear
layer), batches of ``--batch-size``, one torch thread. ``--steps K`` stops the epoch after K
minibatches (the dataset raises on the next read), so that sizes compare at the same work: the
shuffled order of all N rows is drawn and their N labels held all the same. Printed: N, the method,
the steps trained, the peak RSS of the process, the RSS before the fit (after imports and building the
loader) and the fit's seconds. ``--one-epoch`` trains unit gates' epoch without the ten epochs of
fine-tuning that follow it (``finetune_epochs = 0``), so that every method trains one epoch.
``--default`` calls ``fit_method`` without its ``stream`` argument (a DataLoader streams by default);
``--no-targets`` gives the dataset no ``targets`` attribute (its labels read in one pass over the loader).

Usage::

    python benchmarks/streaming.py --sizes 10000 1000000 --methods sbnn unit-gates --one-epoch
    python benchmarks/streaming.py --sizes 10000 200000 --one-epoch --default [--no-targets]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Capped(Exception):
    """Raised by :class:`GeneratedImages` when asked for one batch more than its cap."""


class GeneratedImages(Dataset):
    """``n`` images 3x32x32, image ``i`` a fixed function of ``i`` (class ``i % 10``), made when read;
    after ``cap`` batches are read, the next raises :class:`Capped` (``None``: no cap)."""

    def __init__(self, n: int, cap: int | None = None, targets: bool = True):
        self.n, self.cap, self.batches_read = n, cap, 0
        generator = torch.Generator().manual_seed(0)
        self.frequency = torch.rand(3, 32, 32, generator=generator)
        self.patterns = torch.randn(10, 3, 32, 32, generator=generator)
        if targets:
            self.targets = torch.arange(n) % 10

    def __len__(self):
        return self.n

    def __getitems__(self, indices):
        if self.cap is not None and self.batches_read == self.cap:
            raise Capped
        self.batches_read += 1
        i = torch.as_tensor(indices)
        x = torch.sin(i[:, None, None, None] * self.frequency) + self.patterns[i % 10]
        return list(zip(x, i % 10))

    def __getitem__(self, index):
        return self.__getitems__([index])[0]


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 7 * 7, 10),
    )


#: Each method's options under ``--one-epoch``: its training epoch and nothing after it.
ONE_EPOCH = {"unit-gates": {"finetune_epochs": 0}}


def measure(n: int, method: str, batch_size: int, steps: int | None, one_epoch=False, default=False, targets=True):
    import bayesprune as bp

    torch.set_num_threads(1)
    torch.manual_seed(0)
    # One batch more than the training steps: fit_method checks the loader's first batch.
    # Without targets the labels are read first, one pass of the loader, and fit_method reads two rows twice.
    extra = 0 if targets else -(-n // batch_size) + 2
    images = GeneratedImages(n, cap=None if steps is None else steps + 1 + extra, targets=targets)
    loader = DataLoader(images, batch_size=batch_size)
    x_test, y_test = (torch.stack(part) for part in zip(*GeneratedImages(1000).__getitems__(range(1000))))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        bp.fit_method(
            method,
            cnn(),
            loader,
            (x_test, y_test),
            epochs=1,
            batch_size=batch_size,
            **({} if default else {"stream": True}),
            device="cpu",
            options=ONE_EPOCH.get(method) if one_epoch else None,
        )
    except Capped:
        pass
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "n": n,
        "method": method,
        "steps": images.batches_read - 1 - extra,
        "peak_rss_mb": peak / 1024,
        "rss_before_fit_mb": before / 1024,
        "seconds": seconds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--methods", nargs="+", default=["sbnn", "unit-gates"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--steps", type=int, default=None, help="stop each epoch after this many minibatches (default: the whole epoch)"
    )
    parser.add_argument("--one-epoch", action="store_true", help="unit gates without their fine-tuning epochs")
    parser.add_argument("--default", action="store_true", help="no stream argument: fit_method's default")
    parser.add_argument("--no-targets", action="store_true", help="a dataset without a targets attribute")
    parser.add_argument("--one", nargs=2, metavar=("N", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        options = {"one_epoch": args.one_epoch, "default": args.default, "targets": not args.no_targets}
        print(json.dumps(measure(int(args.one[0]), args.one[1], args.batch_size, args.steps, **options)))
        return
    for method in args.methods:
        for n in args.sizes:
            command = [sys.executable, __file__, "--one", str(n), method, "--batch-size", str(args.batch_size)]
            command += [] if args.steps is None else ["--steps", str(args.steps)]
            command += [
                flag
                for flag in ("--one-epoch", "--default", "--no-targets")
                if getattr(args, flag[2:].replace("-", "_"))
            ]
            result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            print(
                f"{method:>10}  N={n:>9,}  {result['steps']} steps  peak RSS {result['peak_rss_mb']:7.1f} MB  "
                f"(before the fit {result['rss_before_fit_mb']:6.1f} MB)  {result['seconds']:6.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
