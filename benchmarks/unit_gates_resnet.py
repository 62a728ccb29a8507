"""Unit gates on torchvision's ResNet-18 (or another builder, ``--network``) against Torch-Pruning's magnitude pruning, at the same MACs and epochs.

What is measured, per seed, on scikit-learn's digits as 3x32x32 images (``benchmarks/recalibration.py``'s
``digits32.npz``) and ``torchvision.models.resnet18(num_classes=10)`` with random weights:

* **unit gates** (paper 004, one gate per group of coupled channels), from the command line as a user
  runs it (``model.factory`` TOML, ``bayesprune run``): ``--epochs`` epochs of Algorithm 1, channels
  leaving the network while it trains, then ``--finetune-epochs`` of the smaller network; its test
  error (``metrics.json``), the learned network's MACs against the dense one's
  (:func:`bayesprune.core.export.count_macs`), the seconds of each epoch and the channels alive
  after it, and the CPU time of one training step (forward and backward, gates on) of the learned
  network against the dense one (median of interleaved repeats: the measure a busy machine disturbs
  least);
* **Torch-Pruning's magnitude pruning**: the dense network trained ``--epochs`` epochs with the same
  objective (N/B-scaled cross-entropy plus λ/2 WᵀW, Adam at ``--lr``, batch 64), pruned once by
  ``tp.pruner.MagnitudePruner`` with ``tp.importance.MagnitudeImportance(p=2)`` (the classifier kept)
  at the channel ratio whose MACs are the unit gates' network's (bisection,
  :func:`bayesprune.core.channels.pruned_to_macs`), then fine-tuned
  ``--finetune-epochs`` epochs at ``--finetune-lr`` (or the split and rate ``--tp-epochs`` and
  ``--tp-finetune-lr`` give, the same total): the same total epochs and MACs; its test error with the
  batch-norm statistics its fine-tuning left (the procedure as Torch-Pruning's examples run it) and
  with them estimated again on training batches, as unit gates' fit does (``unit-gates.recalibrate``);
* the mean over ``--seeds``.

``--validation F`` holds out the fraction F of the training rows (a fixed permutation) and reports
errors on them instead of on the test rows, which are then not read: settings are chosen that way.

Numbers and the command: docs/reproductions.md, "Unit gates on torchvision networks".

Usage: ``python benchmarks/unit_gates_resnet.py [--network resnet18] [--seeds 0 1 2] [--epochs 8] [--finetune-epochs 2]
[--log-gamma -4] [--theta-lr 0.01] [--lr 0.003] [--finetune-lr 0.001] [--min-keep-fraction 0] [--remove-at epoch] [--tp-epochs N]
[--tp-finetune-lr R] [--validation F] [--out DIR] [--json]`` (one thread).
"""

import argparse
import contextlib
import copy
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w
import torch
import torchvision

from bayesprune.cli import main
from bayesprune.core.channels import pruned_to_macs
from bayesprune.core.export import count_macs
from bayesprune.core.normalization import recalibrate
from bayesprune.data import load_dataset
from bayesprune.methods.unit_gates import GateTraining, UnitGatesOptions, adam, data_cost
from bayesprune.pipeline.runner import load_run

sys.path.insert(0, str(Path(__file__).parent))
from recalibration import write_user_files  # noqa: E402

SHAPE = (3, 32, 32)
BATCH = 64


def error_of(net, x, y) -> float:
    """The test error of ``net`` on ``(x, y)`` in percent, 256 rows at a time."""
    net.eval()
    with torch.no_grad():
        predictions = torch.cat([net(chunk).argmax(-1) for chunk in torch.split(x, 256)])
    return 100.0 * float((predictions != y).float().mean())


def train(net, data, epochs: int, lr: float, precision: float, seed: int):
    """Adam on (N/B)·cross-entropy + λ/2 WᵀW (unit gates' objective without gates), batches of 64."""
    optimizer = adam(net, lr, precision)
    generator = torch.Generator().manual_seed(seed)
    n = len(data.x_train)
    net.train()
    for _ in range(epochs):
        for rows in torch.randperm(n, generator=generator).split(BATCH):
            optimizer.zero_grad(set_to_none=True)
            data_cost(net(data.x_train[rows]), data.y_train[rows], n, None).backward()
            optimizer.step()
    return net


def classifier(net) -> str:
    """The name of ``net``'s last ``Linear`` (its classifier, which pruning keeps whole)."""
    return [name for name, module in net.named_modules() if isinstance(module, torch.nn.Linear)][-1]


def step_seconds(net, data, options, rounds: int = 5) -> float:
    """Median CPU seconds of one Algorithm 1 step (gates on) on ``net``, a batch of 64."""
    training = GateTraining(copy.deepcopy(net), options, num_train=len(data.x_train), lr=1e-9, input_shape=SHAPE)
    x, y = data.x_train[:BATCH], data.y_train[:BATCH]
    times = []
    for _ in range(rounds + 1):
        start = time.process_time()
        training.step(x, y, 0, 1)
        times.append(time.process_time() - start)
    return statistics.median(times[1:])


def held_out(folder: Path, fraction: float) -> str:
    """``digits32-validation.npz``: the training rows less a fixed ``fraction`` of them, which are its test rows."""
    digits = np.load(folder / "digits32.npz")
    order = np.random.default_rng(0).permutation(len(digits["y_train"]))
    held, kept = order[: round(fraction * len(order))], order[round(fraction * len(order)) :]
    x, y = digits["x_train"], digits["y_train"]
    np.savez(folder / "digits32-validation.npz", x_train=x[kept], y_train=y[kept], x_test=x[held], y_test=y[held])
    return "digits32-validation.npz"


def run_seed(folder: Path, seed: int, args) -> dict:
    data = load_dataset("npz", path=str(folder / args.data_file))
    config = {
        "method": "unit-gates",
        "device": "cpu",
        "seed": seed,
        "data": {"dataset": "npz", "path": str(folder / args.data_file), "batch_size": BATCH},
        "model": {"factory": f"tvnets:{args.network}"},
        "optim": {"lr": args.lr},
        "train": {"epochs": args.epochs},
        "unit-gates": {
            "log_gamma": args.log_gamma,
            "theta_lr": args.theta_lr,
            "remove_at": args.remove_at,
            "finetune_epochs": args.finetune_epochs,
            "finetune_lr": args.finetune_lr,
            "min_keep_fraction": args.min_keep_fraction,
        },
        "prune": {"level": "unit", "sparsities": [0.0]},
        "baseline": {"enabled": False},
    }
    toml = folder / f"gates-{seed}.toml"
    toml.write_text(tomli_w.dumps(config))
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", str(toml), "--out", str(folder / f"gates-{seed}"), "--quiet"]) == 0
    gates_seconds = time.perf_counter() - start
    metrics = json.loads((folder / f"gates-{seed}" / "metrics.json").read_text())
    _, _, fitted = load_run(folder / f"gates-{seed}")
    learned = fitted.net.cpu()
    torch.manual_seed(seed)
    dense = torchvision.models.get_model(args.network, num_classes=10)
    dense_macs, learned_macs = count_macs(dense, SHAPE), count_macs(learned, SHAPE)
    options = UnitGatesOptions(log_gamma=args.log_gamma)
    dense_step, learned_step = step_seconds(dense, data, options), step_seconds(learned, data, options)

    start = time.perf_counter()
    torch.manual_seed(seed)
    tp_epochs = args.epochs if args.tp_epochs is None else args.tp_epochs
    tp_finetune, tp_lr = args.epochs + args.finetune_epochs - tp_epochs, args.tp_finetune_lr or args.finetune_lr
    trained = train(torchvision.models.get_model(args.network, num_classes=10), data, tp_epochs, args.lr, 20.0, seed)
    tp_dense_error = error_of(trained, data.x_test, data.y_test)
    pruned, tp_macs, ratio = pruned_to_macs(trained.eval(), SHAPE, learned_macs, ignored=[classifier(trained)])
    train(pruned, data, tp_finetune, tp_lr, 20.0, seed + 1000)
    tp_seconds = time.perf_counter() - start
    tp_error = error_of(pruned, data.x_test, data.y_test)
    recalibrate(pruned, data.x_train, batch_size=BATCH, seed=seed)
    return {
        "seed": seed,
        "gates_error": metrics["test_error"],
        "gates_macs_ratio": learned_macs / dense_macs,
        "gates_learned_channels": metrics["learned_architecture"],
        "gates_units_alive": metrics["units_alive"],
        "gates_epoch_seconds": metrics["epoch_seconds"],
        "gates_epoch_test_error": metrics["epoch_test_error"],
        "gates_step_cpu_seconds": {"dense": dense_step, "learned": learned_step},
        "gates_seconds": gates_seconds,
        "tp_error": tp_error,
        "tp_error_recalibrated": error_of(pruned, data.x_test, data.y_test),
        "tp_epochs": [tp_epochs, tp_finetune],
        "tp_macs_ratio": tp_macs / dense_macs,
        "tp_channel_ratio": ratio,
        "tp_dense_error": tp_dense_error,
        "tp_seconds": tp_seconds,
        "dense_macs": dense_macs,
    }


def main_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", default="resnet18", help="a torchvision builder (default resnet18)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--finetune-epochs", type=int, default=2)
    parser.add_argument("--log-gamma", type=float, default=-4.0)
    parser.add_argument("--theta-lr", type=float, default=0.01)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--remove-at", default="epoch", choices=["step", "epoch"])
    parser.add_argument("--finetune-lr", type=float, default=0.001)
    parser.add_argument("--min-keep-fraction", type=float, default=0.0, help="unit-gates.min_keep_fraction")
    parser.add_argument(
        "--tp-epochs", type=int, help="Torch-Pruning's dense epochs (default --epochs; the rest fine-tune)"
    )
    parser.add_argument("--tp-finetune-lr", type=float, help="Torch-Pruning's fine-tuning rate (default --finetune-lr)")
    parser.add_argument("--validation", type=float, default=0.0, help="fraction of training rows to report errors on")
    parser.add_argument("--out", help="folder for the runs (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print every number as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.out or temporary)
        folder.mkdir(parents=True, exist_ok=True)
        write_user_files(folder)
        args.data_file = held_out(folder, args.validation) if args.validation > 0 else "digits32.npz"
        sys.path.insert(0, str(folder))
        rows = []
        for seed in args.seeds:
            rows.append(run_seed(folder, seed, args))
            row = rows[-1]
            print(
                f"seed {seed}: unit gates {row['gates_error']:.2f}% at {100 * row['gates_macs_ratio']:.1f}% of the MACs "
                f"(channels alive per epoch {row['gates_units_alive']}, epoch seconds {row['gates_epoch_seconds']}, "
                f"step CPU seconds dense {row['gates_step_cpu_seconds']['dense']:.3f} / learned "
                f"{row['gates_step_cpu_seconds']['learned']:.3f}); Torch-Pruning magnitude {row['tp_error']:.2f}% "
                f"({row['tp_error_recalibrated']:.2f}% with statistics estimated again) at "
                f"{100 * row['tp_macs_ratio']:.1f}% (dense before pruning {row['tp_dense_error']:.2f}%)",
                flush=True,
            )
    keys = ("gates_error", "tp_error", "tp_error_recalibrated", "gates_macs_ratio", "tp_macs_ratio")
    mean = {key: statistics.mean(row[key] for row in rows) for key in keys}
    print(
        f"mean of {len(rows)} seeds ({'held-out training rows' if args.validation > 0 else 'test rows'}): unit gates "
        f"{mean['gates_error']:.2f}% at {100 * mean['gates_macs_ratio']:.1f}% of {args.network}'s MACs, Torch-Pruning "
        f"magnitude + fine-tuning {mean['tp_error']:.2f}% ({mean['tp_error_recalibrated']:.2f}% with statistics "
        f"estimated again) at {100 * mean['tp_macs_ratio']:.1f}%"
    )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main_cli()
