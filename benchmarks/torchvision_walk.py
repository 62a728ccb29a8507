"""Every classification builder of ``torchvision.models`` through ``bayesprune run``, as a new user would.

Each builder (random weights, ``num_classes`` of the data) is a ``model.factory`` of a TOML config on
a tiny ``.npz`` of random images at the smallest input size it accepts; one epoch of each method,
one predictive draw, no baseline, the unpruned point only. A builder passes when the command exits 0
and writes ``metrics.json``; the largest builders are skipped on memory (:data:`SKIPPED`).

    python benchmarks/torchvision_walk.py                      # every builder, sbnn and sparse-vd
    python benchmarks/torchvision_walk.py resnet18 vit_b_16    # some builders

Each run is a process of its own, one at a time, its address space capped (``--max-gib``, default 16).
Prints one line per builder and method (seconds of the command and the process's peak resident
memory, or the error) and exits 1 if any failed. ``tests/test_torchvision_walk.py`` runs a representative subset with :func:`run_one`.
"""

import argparse
import contextlib
import io
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import tomli_w
import torch
import torchvision

from bayesprune.cli import main

#: Builders skipped, with the reason: a run peaks at about 95 bytes a weight (vgg11, 133M weights: 12.5 GB
#: resident with sparse VD; parameters, the variational ones, Adam's state, the training checkpoint's copy
#: and the pruning curve's ranking), so these do not fit a 24 GB machine (convnext_large's sparse VD does,
#: at 19.2 GB; its sBNN does not); smaller versions of each are walked.
SKIPPED = {
    "vit_h_14": "632M parameters: about 60 GB at 95 bytes a weight; vit_b_16 is walked",
    "regnet_y_128gf": "645M parameters: about 61 GB at 95 bytes a weight; regnet_y_32gf is walked",
    "vit_l_16": "304M parameters: about 29 GB at 95 bytes a weight; vit_b_16 is walked",
    "vit_l_32": "306M parameters: about 29 GB at 95 bytes a weight; vit_b_32 is walked",
    "convnext_large": "198M parameters: the sBNN's run needs more than 23 GiB (its sparse VD ran at 19.2 GB); "
    "convnext_base is walked",
}

#: Input sides tried, smallest first, in training mode: most builders take 32 pixels, AlexNet 64, the
#: vision transformers only their ``image_size`` (224) and Inception v3's auxiliary classifier 299.
SIDES = (32, 64, 96, 128, 224, 299)
CLASSES = 3
ROWS = 8

#: One epoch, one draw: what the walk checks is that every stage runs, not what it learns.
METHODS = {
    "sbnn": {"predictive_samples": 1},
    "sparse-vd": {"kl_anneal_start": 0, "kl_anneal_end": 1, "predictive_samples": 1},
}

FACTORY = """
import torchvision


def __getattr__(name):
    def build(input_shape, output_dim):
        return torchvision.models.get_model(name, weights=None, num_classes=output_dim)
    return build
"""


def builders() -> list:
    """Every classification builder of ``torchvision.models``, fewest parameters first."""

    def size(name):
        if name in SKIPPED:
            return float("inf")
        try:
            with torch.device("meta"):  # shapes only: no initialisation computed
                net = torchvision.models.get_model(name, weights=None)
        except NotImplementedError:  # a builder that computes its widths with tensors (RegNet)
            net = torchvision.models.get_model(name, weights=None)
        return sum(p.numel() for p in net.parameters())

    return sorted(torchvision.models.list_models(module=torchvision.models), key=size)


def smallest_side(name: str) -> int:
    """The smallest of :data:`SIDES` at which builder ``name`` maps a batch of two images to logits."""
    net = torchvision.models.get_model(name, weights=None, num_classes=CLASSES)
    for side in SIDES:
        try:
            with torch.no_grad():
                net(torch.zeros(2, 3, side, side))
            return side
        except (RuntimeError, ValueError, AssertionError):
            continue
    raise ValueError(f"{name} takes none of the input sides {SIDES}")


def write_inputs(folder: Path, side: int) -> None:
    """The factory module (``tvnets:<builder>``) and ``<side>.npz`` of random images."""
    (folder / "tvnets.py").write_text(FACTORY)
    path = folder / f"{side}.npz"
    if not path.exists():
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2 * ROWS, 3, side, side)).astype(np.float32)
        y = np.arange(2 * ROWS) % CLASSES
        np.savez(path, x_train=x[:ROWS], y_train=y[:ROWS], x_test=x[ROWS:], y_test=y[ROWS:])


def run_one(folder: Path, name: str, method: str, side: int) -> tuple:
    """Run ``method`` for one epoch on builder ``name`` at ``side`` x ``side`` pixels from a TOML config
    in ``folder`` (on ``sys.path``); returns (exit status, stderr or traceback, run directory)."""
    write_inputs(folder, side)
    config = {
        "method": method,
        "device": "cpu",
        "seed": 0,
        "data": {"dataset": "npz", "path": str(folder / f"{side}.npz"), "batch_size": ROWS},
        "model": {"factory": f"tvnets:{name}"},
        "optim": {"lr": 1e-3},
        "train": {"epochs": 1},
        method: METHODS[method],
        "prune": {"sparsities": [0.0]},
        "baseline": {"enabled": False},
    }
    toml = folder / f"{name}-{method}.toml"
    toml.write_text(tomli_w.dumps(config))
    out = folder / f"run-{name}-{method}"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(["run", str(toml), "--out", str(out), "--quiet"])
        except Exception:  # noqa: BLE001 - a traceback is what the walk reports
            status, err = 1, io.StringIO(traceback.format_exc())
    return status, err.getvalue(), out


def walk_one(name: str, method: str, folder: str, threads: int, max_gib: float) -> tuple:
    """The line of :func:`main_walk`'s table for ``method`` on builder ``name``, run in a process of its
    own (its address space capped at ``max_gib``), and whether it failed. The line gives the seconds of
    the command and the peak resident memory of the process."""
    resource.setrlimit(resource.RLIMIT_AS, (int(max_gib * 2**30),) * 2)
    torch.set_num_threads(threads)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    side = smallest_side(name)
    start = time.perf_counter()
    status, err, out = run_one(Path(folder), name, method, side)
    ok = status == 0 and (out / "metrics.json").exists()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    detail = f"{time.perf_counter() - start:7.1f} s {peak:6.2f} GiB" if ok else "FAILED\n" + err.strip()
    shutil.rmtree(out, ignore_errors=True)  # a checkpoint of every weight: the walk keeps one run's on disk
    return f"{name:24s} {side:4d} px {method:10s} {detail}", not ok


def main_walk(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="builders (default: all but the skipped ones)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each run")
    parser.add_argument("--max-gib", type=float, default=16, help="address space of each run's process (GiB)")
    parser.add_argument("--one", nargs=2, metavar=("FOLDER", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a run in this process: the walk's child
        line, failed = walk_one(args.names[0], args.one[1], args.one[0], args.threads, args.max_gib)
        print(line, flush=True)
        return 1 if failed else 0
    names = args.names or builders()
    for name in names:
        if name in SKIPPED and not args.names:
            print(f"{name:24s} skipped: {SKIPPED[name]}", flush=True)
    names = [name for name in names if args.names or name not in SKIPPED]
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:  # one run at a time, each in a process of its own: its peak memory is its own
            for method in args.methods:
                options = ["--threads", str(args.threads), "--max-gib", str(args.max_gib)]
                child = subprocess.run(
                    [sys.executable, __file__, name, "--one", tmp, method, *options], capture_output=True, text=True
                )
                print(child.stdout.strip() or f"{name:24s} {method:10s} FAILED (exit {child.returncode})", flush=True)
                if child.returncode != 0:
                    print(child.stderr.strip()[-2000:], flush=True)
                    failed.append(f"{name}/{method}")
    print(f"{len(failed)} failed" + (": " + ", ".join(failed) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_walk())
