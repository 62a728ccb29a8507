"""Does the pruning curve of a batch-norm network report the masked network the user has?

What is measured: torchvision's ``resnet18(num_classes=10)`` (a residual CNN with batch norm that
bayesprune did not write), fitted with sBNN from a ``model.factory`` TOML config and an ``.npz`` as a
user would (scikit-learn's digits, 8x8, upsampled to 3x32x32), then, at ``--sparsity`` of the weights
removed by score:

* ``curve``: the run's pruning curve (``metrics.json``; batch-norm statistics re-estimated on
  ``prune.recalibrate_batches`` training batches, the default);
* ``by hand``: the same masked network (``fitted.network()``, the lowest-scored weights zeroed) with
  every batch norm's statistics reset and accumulated by hand over one pass of all training rows in
  training mode (``momentum = None``), no gradient;
* ``stale``: the masked network with the dense fit's statistics (what the curve reported before);
* ``export``: the test error ``bayesprune export --budget sparsity=...,level=weight`` prints for the
  file it writes, and that file's own error recomputed here (its masks add the median-probability
  model, p >= 1/2, as every export of sBNN does);
* ``stale run``: the curve of the same config with ``prune.recalibrate = false``.

The figure of merit: |curve - by hand| (target <= 5 points).

Usage: ``python benchmarks/recalibration.py [--epochs 3] [--sparsity 0.8] [--device auto] [--out DIR] [--threads 2]``.
"""

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.cli import main
from bayesprune.core.pruning import prune
from bayesprune.data import load_dataset
from bayesprune.pipeline.runner import load_run

#: ``tvnets:<name>``: torchvision's builder ``<name>`` with random weights (``resnet18``, ``mobilenet_v2``, ...).
FACTORY = """
import torchvision


def __getattr__(name):
    def build(input_shape, output_dim):
        return torchvision.models.get_model(name, weights=None, num_classes=output_dim)
    return build
"""


def write_user_files(folder: Path):
    """``tvnets.py`` (the factory) and ``digits32.npz``: digits upsampled to 32x32, three channels."""
    (folder / "tvnets.py").write_text(FACTORY)
    data = load_dataset("digits")

    def rgb32(x):
        return F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1).numpy()

    np.savez(
        folder / "digits32.npz",
        x_train=rgb32(data.x_train),
        y_train=data.y_train.numpy(),
        x_test=rgb32(data.x_test),
        y_test=data.y_test.numpy(),
    )


def error_of(net, x, y) -> float:
    with torch.no_grad():
        predictions = torch.cat([net(chunk).argmax(-1) for chunk in torch.split(x, 256)])
    return 100.0 * (predictions != y).float().mean().item()


def recalibrated_by_hand(net, x, batch_size: int):
    """``net`` with every batch norm's statistics reset and averaged over one pass of ``x`` (train mode, no grad)."""
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None
    net.train()
    with torch.no_grad():
        for chunk in torch.split(x, batch_size):
            net(chunk)
    return net.eval()


def masked_network(fitted, masks):
    net = fitted.network()
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name in masks:
                param.mul_(masks[name].to(param.dtype))
    return net.eval()


def run(folder: Path, *, epochs: int, sparsity: float, device: str) -> dict:
    base = {
        "method": "sbnn",
        "device": device,
        "seed": 0,
        "data": {"dataset": "npz", "path": str(folder / "digits32.npz"), "batch_size": 128},
        "model": {"factory": "tvnets:resnet18"},
        "optim": {"lr": 1e-3},
        "train": {"epochs": epochs},
        "prune": {"sparsities": [0.0, 0.5, sparsity, 0.9]},
        "baseline": {"enabled": False},
    }
    result = {}
    for name, recalibrate in (("run", True), ("stale-run", False)):
        config = {**base, "prune": {**base["prune"], "recalibrate": recalibrate}}
        (folder / f"{name}.toml").write_text(tomli_w.dumps(config))
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["run", str(folder / f"{name}.toml"), "--out", str(folder / name), "--quiet"]) == 0
        result[f"{name}_seconds"] = round(time.perf_counter() - start, 1)
        curve = json.loads((folder / name / "metrics.json").read_text())["pruning_curve"]
        result[f"{name}_curve"] = {row["droprate"]: row["test_error"] for row in curve}

    config, data, fitted = load_run(folder / "run")
    masks = prune(fitted.scores(), config.prune.budget(sparsity))
    stale = masked_network(fitted, masks)
    result["stale"] = error_of(stale, data.x_test, data.y_test)
    result["by_hand"] = error_of(recalibrated_by_hand(stale, data.x_train, 128), data.x_test, data.y_test)
    result["curve"] = result["run_curve"][sparsity]
    result["unpruned"] = result["run_curve"][0.0]

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(
                [
                    "export",
                    str(folder / "run"),
                    "--out",
                    str(folder / "net.pt2"),
                    "--budget",
                    f"sparsity={sparsity}",
                    "--budget",
                    "level=weight",
                    "--budget",
                    "min_keep=0",
                    "--repeats",
                    "1",
                    "--json",
                    "--force",
                ]
            )
            == 0
        )
    reported = json.loads(out.getvalue())
    program = torch.export.load(str(folder / "net.pt2")).module()
    result["export_printed"] = reported["test_error"]
    result["export_file"] = error_of(program, data.x_test, data.y_test)
    result["export_method"] = reported["method_test_error"]
    probabilities = fitted.inclusion_probabilities()
    median = {site: mask & (probabilities[site] >= 0.5) for site, mask in masks.items()}
    result["export_by_hand"] = error_of(
        recalibrated_by_hand(masked_network(fitted, median), data.x_train, 128), data.x_test, data.y_test
    )
    return result


def main_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--sparsity", type=float, default=0.8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--device", default="auto", help="where the runs fit (the config's device; default: CUDA if there is one)"
    )
    parser.add_argument("--out", help="folder for the run directories (default: a temporary one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.out or temporary)
        folder.mkdir(parents=True, exist_ok=True)
        write_user_files(folder)
        sys.path.insert(0, str(folder))
        result = run(folder, epochs=args.epochs, sparsity=args.sparsity, device=args.device)
    print(json.dumps(result, indent=1))
    print(
        f"{args.sparsity:.0%} removed: curve {result['curve']:.2f}%, by hand {result['by_hand']:.2f}% "
        f"(|difference| {abs(result['curve'] - result['by_hand']):.2f} points), stale statistics {result['stale']:.2f}%, "
        f"export file {result['export_file']:.2f}% (printed {result['export_printed']:.2f}%, its masks by hand "
        f"{result['export_by_hand']:.2f}%); unpruned {result['unpruned']:.2f}%"
    )


if __name__ == "__main__":
    main_cli()
