"""Unit gates at their packaged CNN settings (``unit-gates-cnn``) on torchvision's resnet18, mobilenet_v2,
mobilenet_v3_small and a small vision transformer, against the dense network trained as a careful user would.

Data: scikit-learn's digits as 3x32x32 images (``data.shape = "3x32x32"``: 1,437 training and 360 test
images). Per network and seed:

* **unit gates**: ``bayesprune run unit-gates-cnn`` with ``model.builder`` (and the ViT's arguments) set and
  nothing else: its test error (``metrics.json``), the units of the gated groups it removed, and the MACs of
  the network it returns against the dense network's (:func:`bayesprune.core.export.count_macs`);
* **dense**: the same network (same seed) trained by Adam at the config's ``optim.lr`` on the mean
  cross-entropy for as many epochs as unit gates train in all (Algorithm 1's and the fine-tuning's), batches
  of the config's size, its batch-norm statistics then estimated again on the training rows
  (:func:`bayesprune.core.normalization.recalibrate`, as unit gates do for theirs); the better of its error
  with the statistics training left and with them estimated again.

``--validation F`` holds out the fraction F of the training rows (a fixed permutation) and reports errors
on them instead of on the test rows, which are then not read: the packaged settings were chosen that way.
``--set KEY=VALUE`` overrides a setting of the config for both (``unit-gates.theta_lr=0.02``).

Numbers and the command: docs/reproductions.md, "Unit gates' packaged CNN settings".

Usage: ``nice -n 10 python benchmarks/unit_gates_defaults.py [--networks resnet18 ...] [--seeds 0]
[--validation 0.2] [--set KEY=VALUE ...] [--out DIR] [--json]`` (one thread).
"""

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w
import torch

from bayesprune.cli import main
from bayesprune.core.export import count_macs
from bayesprune.core.normalization import recalibrate
from bayesprune.core.plain import maximise_likelihood
from bayesprune.data import load_dataset
from bayesprune.models import build_architecture
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.rundir import load_run

#: ``model`` of each network: a torchvision builder, or the vision transformer's class and arguments.
NETWORKS = {
    "resnet18": {"builder": "resnet18"},
    "mobilenet_v2": {"builder": "mobilenet_v2"},
    "mobilenet_v3_small": {"builder": "mobilenet_v3_small"},
    "vit": {
        "builder": "VisionTransformer",
        "image_size": 32,
        "patch_size": 8,
        "num_layers": 2,
        "num_heads": 4,
        "hidden_dim": 64,
        "mlp_dim": 128,
    },
}


def error_of(net, x, y) -> float:
    net.eval()
    with torch.no_grad():
        predictions = torch.cat([net(chunk).argmax(-1) for chunk in torch.split(x, 256)])
    return 100.0 * float((predictions != y).float().mean())


def held_out(folder: Path, fraction: float) -> dict:
    """``[data]`` of the training rows less a fixed ``fraction`` of them, which are its test rows (an npz)."""
    digits = load_dataset("digits", shape="3x32x32")
    order = np.random.default_rng(0).permutation(len(digits.y_train))
    held, kept = order[: round(fraction * len(order))], order[round(fraction * len(order)) :]
    x, y = digits.x_train.numpy(), digits.y_train.numpy()
    path = folder / "digits32-validation.npz"
    np.savez(path, x_train=x[kept], y_train=y[kept], x_test=x[held], y_test=y[held])
    return {"dataset": "npz", "path": str(path)}


def config_for(network: str, seed: int, data: dict | None, sets: list) -> dict:
    """The packaged config with the network, the seed, the data and ``--set`` given, as a TOML table."""
    base = ["baseline.enabled=false", "device='cpu'", f"seed={seed}", *sets]
    table = load_config("unit-gates-cnn", base).to_dict()
    table["model"] = {"architecture": "torchvision", **NETWORKS[network]}
    if data is not None:
        table["data"] = {**data, "batch_size": table["data"]["batch_size"]}
    return table


def dense_error(table: dict, data, seed: int) -> tuple:
    """``(errors, network)`` of the dense network trained for unit gates' total epochs (see the module docstring)."""
    model = dict(table["model"])
    torch.manual_seed(seed)
    net = build_architecture(model.pop("architecture"), data.input_shape, 10, **model)
    epochs = table["train"]["epochs"] + table["unit-gates"]["finetune_epochs"]
    batch = table["data"]["batch_size"]
    maximise_likelihood(
        net,
        data.x_train,
        data.y_train,
        epochs=epochs,
        lr=table["optim"]["lr"],
        batch_size=batch,
        seed=seed,
        callbacks=[],
        memory_format=torch.contiguous_format,
    )
    as_trained = error_of(net, data.x_test, data.y_test)
    recalibrate(net, data.x_train, batch_size=batch, seed=seed)
    again = error_of(net, data.x_test, data.y_test)
    return {"dense_error": min(as_trained, again), "dense_error_as_trained": as_trained}, net


def run_network(folder: Path, network: str, seed: int, args) -> dict:
    table = config_for(network, seed, args.data, args.set)
    path = folder / f"{network}-{seed}.toml"
    path.write_text(tomli_w.dumps(table))
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["run", str(path), "--out", str(folder / f"{network}-{seed}"), "--quiet", "--force"])
    assert status == 0, f"bayesprune run {path} failed"
    seconds = time.perf_counter() - start
    metrics = json.loads((folder / f"{network}-{seed}" / "metrics.json").read_text())
    _, dataset, fitted = load_run(folder / f"{network}-{seed}")
    dense, net = dense_error(table, dataset, seed)
    shape = dataset.input_shape
    start_units, end_units = metrics["starting_architecture"], metrics["learned_architecture"]
    return {
        "network": network,
        "seed": seed,
        "unit_gates_error": metrics["test_error"],
        "units_removed": sum(start_units) - sum(end_units),
        "units": sum(start_units),
        "groups_at_floor": sum(end == max(1, -(-start // 10)) for start, end in zip(start_units, end_units)),
        "groups": len(start_units),
        "macs_kept": count_macs(fitted.net.cpu(), shape) / count_macs(net, shape),
        "unit_gates_seconds": seconds,
        **dense,
    }


def main_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", nargs="+", choices=sorted(NETWORKS), default=list(NETWORKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--validation", type=float, default=0.0, help="fraction of training rows to report errors on")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE of the config, for both networks")
    parser.add_argument("--out", help="folder for the runs (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print every number as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.out or temporary)
        folder.mkdir(parents=True, exist_ok=True)
        args.data = held_out(folder, args.validation) if args.validation > 0 else None
        where = "held-out training rows" if args.validation > 0 else "test rows"
        print(f"| network | seed | dense error | unit-gates error | units removed | MACs kept | ({where})")
        print("|---|---|---|---|---|---|")
        for network in args.networks:
            for seed in args.seeds:
                row = run_network(folder, network, seed, args)
                rows.append(row)
                print(
                    f"| {network} | {seed} | {row['dense_error']:.2f}% | {row['unit_gates_error']:.2f}% | "
                    f"{row['units_removed']:,} of {row['units']:,} | {100 * row['macs_kept']:.1f}% |",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main_cli()
