"""Torch-Pruning's magnitude pruning (global and per layer) against hard-concrete gates at equal MACs, from one trained network.

On scikit-learn's digits as 3x32x32 images (``benchmarks/recalibration.py``'s ``digits32.npz``) and a
torchvision network (``--network``, random weights, 10 classes):

1. the dense network is trained once (``--dense-epochs``, Adam at ``--lr``, batch 64, its batch-norm
   statistics estimated again on training batches) and its weights saved in ``--out``; a later call with
   the same network, epochs, rate and split loads them (``torch.load(weights_only=True)``);
2. from that network, per ``--seeds``:

   * **Torch-Pruning magnitude, per layer**: ``tp.pruner.BasePruner`` with ``MagnitudeImportance(p=2)``,
     every group losing the same fraction of its channels, the fraction whose MACs
     (:func:`bayesprune.core.export.count_macs`) are closest to ``--macs`` of the dense network's and not above
     (bisection); the output layer and the layers that produce no unit group kept
     (:func:`bayesprune.pipeline.compare.structured.ignored_layers`);
   * **Torch-Pruning magnitude, global**: the same with ``global_pruning=True`` (groups ranked together);
   * **hard-concrete** (``bayesprune.methods.hard_concrete``, the method's own fit): ``--gate-epochs`` of
     gates and weights under the MAC constraint at ``--gate-lr-weights``, then cut to at most ``--macs``;
   * every row then fine-tuned ``--finetune-epochs`` epochs (Adam at ``--finetune-lr``, batch 64, the same
     seed) and its batch-norm statistics estimated again on training batches
     (:func:`bayesprune.pipeline.finetune.finetune`); Torch-Pruning global is also reported fine-tuned
     ``--gate-epochs`` more epochs, so that it trains as many epochs after the dense network as the gates.

``--validation F`` holds out the fraction F of the training rows (a fixed permutation) and reports
errors on them; the test rows are then not read: settings are chosen that way.

Usage: ``python benchmarks/structured_macs.py [--network resnet18] [--seeds 0 1] [--macs 0.5]
[--dense-epochs 10] [--gate-epochs 3] [--finetune-epochs 5] [--validation 0.2] [--set hard-concrete.KEY=VALUE]
[--out DIR] [--json]`` (one thread). Numbers: docs/comparisons.md, "Structured pruning at equal MACs".
"""

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch_pruning as tp
import torchvision

from bayesprune.core.channels import ignored_layers
from bayesprune.core.export import count_macs
from bayesprune.core.normalization import Calibration, recalibrate
from bayesprune.core.optim import OptimConfig
from bayesprune.core.plain import fit_plain
from bayesprune.core.structure import example_input
from bayesprune.data import load_dataset
from bayesprune.methods.context import FitContext
from bayesprune.methods.hard_concrete import HardConcreteMethod, HardConcreteOptions
from bayesprune.pipeline.finetune import finetune

sys.path.insert(0, str(Path(__file__).parent))
from recalibration import write_user_files  # noqa: E402
from unit_gates_resnet import BATCH, SHAPE, error_of, held_out  # noqa: E402


def build(network: str):
    return torchvision.models.get_model(network, weights=None, num_classes=10)


def dense_network(folder: Path, data, args):
    """The trained dense network, trained once and saved (or loaded)."""
    path = folder / f"dense-{args.network}-e{args.dense_epochs}-lr{args.lr}-v{args.validation}.pt"
    torch.manual_seed(0)
    net = build(args.network)
    if path.exists():
        net.load_state_dict(torch.load(path, weights_only=True))
        return net.eval()
    fit_plain(net, data.x_train, data.y_train, epochs=args.dense_epochs, lr=args.lr, batch_size=BATCH, seed=0)
    recalibrate(net, data.x_train, batch_size=BATCH)
    torch.save(net.state_dict(), path)
    return net.eval()


def torch_pruning(dense, target: int, *, global_pruning: bool, steps: int = 14):
    """``(pruned copy, MACs)``: magnitude pruning at the largest channel ratio whose MACs are at most ``target``."""
    ignored = ignored_layers(dense, SHAPE)

    def pruned(ratio):
        net = copy.deepcopy(dense)
        tp.pruner.BasePruner(
            net,
            example_input(net, SHAPE, batch=1),
            importance=tp.importance.MagnitudeImportance(p=2),
            pruning_ratio=ratio,
            global_pruning=global_pruning,
            ignored_layers=[net.get_submodule(name) for name in ignored],
        ).step()
        return net, count_macs(net, SHAPE)

    low, high, best = 0.0, 0.95, None
    for _ in range(steps):
        ratio = (low + high) / 2
        net, macs = pruned(ratio)
        if macs <= target:
            best, high = (net, macs), ratio
        else:
            low = ratio
    return best if best is not None else pruned(high)


def hard_concrete(dense, data, args, seed: int):
    options = HardConcreteOptions(macs=args.macs, **args.options)
    ctx = FitContext(seed=seed, epochs=args.gate_epochs, batch_size=BATCH, optim=OptimConfig(lr=args.gate_lr_weights))
    fitted = HardConcreteMethod().fit(copy.deepcopy(dense).train(), data, options, ctx)
    return fitted.net.cpu(), fitted.report


def finetuned(net, data, epochs: int, args, seed: int):
    calibration = Calibration(data.x_train, batch_size=BATCH)
    return finetune(
        net,
        data.x_train,
        data.y_train,
        {},
        epochs=epochs,
        lr=args.finetune_lr,
        batch_size=BATCH,
        seed=seed,
        calibration=calibration,
    )


def run_seed(dense, data, args, seed: int) -> dict:
    dense_macs = count_macs(dense, SHAPE)
    target = args.macs * dense_macs
    rows = {}
    for name, global_pruning in (("tp-layer", False), ("tp-global", True)):
        if name not in args.rows:
            continue
        start = time.perf_counter()
        pruned, macs = torch_pruning(dense, target, global_pruning=global_pruning)
        pruned_error = error_of(
            recalibrate(copy.deepcopy(pruned), data.x_train, batch_size=BATCH), data.x_test, data.y_test
        )
        epochs = [args.finetune_epochs] + ([args.finetune_epochs + args.gate_epochs] if global_pruning else [])
        for total in epochs:
            torch.manual_seed(seed)
            net = finetuned(copy.deepcopy(pruned), data, total, args, seed)
            key = name if total == args.finetune_epochs else f"{name}-long"
            rows[key] = {
                "error": error_of(net, data.x_test, data.y_test),
                "error_before_finetuning": pruned_error,
                "macs_ratio": macs / dense_macs,
                "parameters": sum(p.numel() for p in net.parameters()),
                "finetune_epochs": total,
                "seconds": time.perf_counter() - start,
            }
    if "hard-concrete" not in args.rows:
        return rows
    start = time.perf_counter()
    net, report = hard_concrete(dense, data, args, seed)
    cut_error = error_of(net, data.x_test, data.y_test)
    torch.manual_seed(seed)
    net = finetuned(net, data, args.finetune_epochs, args, seed)
    rows["hard-concrete"] = {
        "error": error_of(net, data.x_test, data.y_test),
        "error_before_finetuning": cut_error,
        "macs_ratio": count_macs(net, SHAPE) / dense_macs,
        "parameters": sum(p.numel() for p in net.parameters()),
        "finetune_epochs": args.finetune_epochs,
        "gate_epochs": args.gate_epochs,
        "learned_architecture": report["learned_architecture"],
        "expected_macs_ratio": report["expected_macs_ratio"],
        "multipliers": report["multipliers"],
        "seconds": time.perf_counter() - start,
    }
    return rows


def parse_options(pairs) -> dict:
    options = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key.removeprefix("hard-concrete.")] = json.loads(value)
    return options


def main_cli(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", default="resnet18")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--macs", type=float, default=0.5)
    parser.add_argument("--dense-epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.003, help="the dense network's Adam rate")
    parser.add_argument("--gate-epochs", type=int, default=3)
    parser.add_argument(
        "--gate-lr-weights", type=float, default=0.0001, help="the weights' rate in the gate stage (chosen held out)"
    )
    parser.add_argument("--finetune-epochs", type=int, default=5)
    parser.add_argument("--finetune-lr", type=float, default=0.001)
    parser.add_argument("--set", dest="options", action="append", default=[], help="hard-concrete.KEY=JSON")
    parser.add_argument("--validation", type=float, default=0.0)
    parser.add_argument("--rows", nargs="+", default=["tp-layer", "tp-global", "hard-concrete"], help="the rows to run")
    parser.add_argument("--out", required=True, help="folder for the data and the dense weights")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.options = parse_options(args.options)
    torch.set_num_threads(1)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "digits32.npz").exists():
        write_user_files(folder)
    data_file = held_out(folder, args.validation) if args.validation > 0 else "digits32.npz"
    data = load_dataset("npz", path=str(folder / data_file))
    dense = dense_network(folder, data, args)
    print(f"dense {args.network}: {error_of(dense, data.x_test, data.y_test):.2f}% error", flush=True)
    results = []
    for seed in args.seeds:
        rows = run_seed(dense, data, args, seed)
        results.append(rows)
        for name, row in rows.items():
            print(
                f"seed {seed} {name}: {row['error']:.2f}% (before fine-tuning {row['error_before_finetuning']:.2f}%) "
                f"at {100 * row['macs_ratio']:.1f}% of the MACs, {row['parameters']} parameters, {row['seconds']:.0f} s",
                flush=True,
            )
    for name in results[0]:
        errors = [rows[name]["error"] for rows in results]
        print(f"mean {name}: {statistics.mean(errors):.2f}% ({', '.join(f'{e:.2f}' for e in errors)})")
    if args.json:
        print(json.dumps({"args": vars(args), "results": results}))


if __name__ == "__main__":
    main_cli()
