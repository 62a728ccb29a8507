"""Does removing units pay off in time? LeNet-300-100 dense against its exported smaller network.

What is measured: a unit-level budget (``Budget(sparsity=..., level="unit")``, global, by the L2 norm of
each hidden unit's incoming weights) removes hidden units of a randomly initialised LeNet-300-100
(784 MNIST-shaped inputs), :func:`bayesprune.core.export.export` rebuilds the smaller ``Linear`` layers,
and for both networks the benchmark prints parameters, MACs (:func:`count_macs`) and the median CPU
forward time at batch sizes 1, 64 and 1024 (:func:`measure_latency`, one intra-op thread by default).

The figure of merit is the efficiency at batch 1024: (dense time / exported time) divided by
(dense MACs / exported MACs); 1 means time falls in proportion to the MACs, the target is >= 0.7.

Usage: ``python benchmarks/export.py [--json] [--remove 0.5 0.7] [--threads 1] [--repeats 30]``.
"""

import argparse
import json

import torch

from bayesprune.core.export import count_macs, count_parameters, export, measure_latency
from bayesprune.core.pruning import Budget, prune
from bayesprune.models import lenet_300_100

INPUT_SHAPE = (784,)
BATCH_SIZES = (1, 64, 1024)


def weight_norm_scores(net) -> dict:
    """One score per hidden unit: the L2 norm of its incoming weights, keyed ``"<layer>.gate"``."""
    return {"1.gate": net[1].weight.detach().norm(dim=1), "3.gate": net[3].weight.detach().norm(dim=1)}


def profile(net, *, repeats) -> dict:
    return {
        "parameters": count_parameters(net)["nonzero"],
        "macs": count_macs(net, INPUT_SHAPE),
        "seconds": measure_latency(net, INPUT_SHAPE, batch_sizes=BATCH_SIZES, repeats=repeats, device="cpu"),
    }


def run(remove, *, repeats) -> dict:
    torch.manual_seed(0)
    dense = lenet_300_100(INPUT_SHAPE, 10).eval()
    result = {"dense": profile(dense, repeats=repeats), "exported": {}}
    for fraction in remove:
        small = export(dense, prune(weight_norm_scores(dense), Budget(sparsity=fraction, level="unit"), net=dense))
        entry = profile(small, repeats=repeats)
        entry["hidden"] = [small[1].out_features, small[3].out_features]
        mac_reduction = result["dense"]["macs"] / entry["macs"]
        time_reduction = {b: result["dense"]["seconds"][b] / entry["seconds"][b] for b in BATCH_SIZES}
        entry.update(
            mac_reduction=mac_reduction,
            time_reduction=time_reduction,
            efficiency_1024=time_reduction[1024] / mac_reduction,
        )
        result["exported"][str(fraction)] = entry
    return result


def print_table(result):
    dense = result["dense"]
    print(
        f"{'network':<22}{'params':>9}{'MACs':>9}"
        + "".join(f"{f'ms@{b}':>10}" for b in BATCH_SIZES)
        + f"{'MAC red.':>10}{'time red.@1024':>16}{'efficiency':>12}"
    )
    rows = [("dense 300-100", dense, None)]
    rows += [
        (f"remove {fraction} -> {'-'.join(map(str, e['hidden']))}", e, e) for fraction, e in result["exported"].items()
    ]
    for label, entry, reduced in rows:
        line = f"{label:<22}{entry['parameters']:>9}{entry['macs']:>9}"
        line += "".join(f"{entry['seconds'][b] * 1e3:>10.3f}" for b in BATCH_SIZES)
        if reduced:
            line += f"{reduced['mac_reduction']:>10.2f}{reduced['time_reduction'][1024]:>16.2f}{reduced['efficiency_1024']:>12.2f}"
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--remove", type=float, nargs="+", default=[0.5, 0.7], help="fractions of hidden units removed")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads; 0 keeps torch's default")
    parser.add_argument("--repeats", type=int, default=30, help="timed forward passes per batch size (median)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.remove, repeats=args.repeats)
    result["threads"] = torch.get_num_threads()
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
