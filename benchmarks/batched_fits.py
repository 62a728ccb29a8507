"""Time K seeds of the plain network trained together against the same K trained one after another (issue 51, item 1).

In one run: K fits of the plain network of ``sbnn-digits`` (an MLP 64-100-10 on scikit-learn's digits,
Adam at 0.01 with a cosine schedule, batch 128) or of ``mnist-lenet-300-100`` (LeNet-300-100 on
``--rows`` random images of MNIST's shape, Adam at 0.001), each from its
own seed (start, minibatch order), first one after another through
:meth:`~bayesprune.methods.FitContext.train_network` and then together through
:func:`~bayesprune.methods.context.train_networks_together`. Reports both wall times, their ratio, and
the largest difference between a seed's two fits: test error (points) and parameters. The two are
timed in ``--rounds`` interleaved rounds (the order alternating), each the median.

    nice -n 10 python benchmarks/batched_fits.py --fits 8 --threads 1            # digits MLP
    nice -n 10 python benchmarks/batched_fits.py --network lenet300 --rows 6000 --epochs 2
    python benchmarks/batched_fits.py --device cuda --network lenet300 --rows 60000 --epochs 2 --json
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from bayesprune.core.loop import resolve_device
from bayesprune.core.tasks import network_test_metric
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext
from bayesprune.methods.context import train_networks_together
from bayesprune.models import new_net
from bayesprune.pipeline.config import load_config
from epoch import synthetic


def setting(network: str, rows: int, epochs: int):
    """The config (its network, optimiser and batch size) and the data of ``network``."""
    if network == "lenet300":
        data = synthetic("synthetic-mnist", rows, (1, 28, 28))
        return load_config("mnist-lenet-300-100", [f"train.epochs={epochs}", "optim.lr=0.001"]), data
    return load_config("sbnn-digits", [f"train.epochs={epochs}", "optim.lr=0.01"]), load_dataset("digits")


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    config, data = setting(args.network, args.rows, args.epochs)
    seeds = list(range(args.fits))
    device = resolve_device(args.device)

    def nets():
        return [new_net(config, data.input_shape, data.output_dim, seed=seed).to(device) for seed in seeds]

    def contexts():
        return [FitContext.from_config(config, data, device=device, seed=seed) for seed in seeds]

    def one_after_another():
        fitted = nets()
        for net, ctx in zip(fitted, contexts()):
            batches = ctx.batches(data.x_train, data.y_train)
            ctx.train_network("train", net, batches, epochs=args.epochs, loss=F.cross_entropy)
        return fitted

    def together():
        fitted = nets()
        train_networks_together(
            contexts(), "train", fitted, data.x_train, data.y_train, epochs=args.epochs, loss=F.cross_entropy
        )
        return fitted

    times = {"separate": [], "together": []}
    for index in range(args.rounds):  # interleaved, the order alternating
        for key, fit in sorted({"separate": one_after_another, "together": together}.items(), reverse=index % 2 == 1):
            synchronize(device)
            start = time.perf_counter()
            fitted = fit()
            synchronize(device)
            times[key].append(time.perf_counter() - start)
            if key == "separate":
                separate = fitted
            else:
                stacked = fitted
    separate_seconds, together_seconds = (statistics.median(times[key]) for key in ("separate", "together"))

    errors = [(network_test_metric(a, data), network_test_metric(b, data)) for a, b in zip(separate, stacked)]
    parameters = max(
        (p - q).abs().max().item() for a, b in zip(separate, stacked) for p, q in zip(a.parameters(), b.parameters())
    )
    return {
        "device": str(device),
        "network": args.network,
        "data": data.name,
        "rows": data.num_train,
        "fits": args.fits,
        "epochs": args.epochs,
        "batch_size": config.data.batch_size,
        "threads": torch.get_num_threads(),
        "separate_seconds": separate_seconds,
        "together_seconds": together_seconds,
        "ratio": together_seconds / separate_seconds,
        "rounds": args.rounds,
        "test_errors": errors,
        "largest_test_error_difference": max(abs(a - b) for a, b in errors),
        "largest_parameter_difference": parameters,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=("mlp", "lenet300"), default="mlp")
    parser.add_argument("--fits", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=6000, help="random images for --network lenet300")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; times are medians")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['fits']} fits of {result['network']} on {result['data']} on {result['device']} ({result['rows']} rows, "
        f"{result['epochs']} epochs, batch {result['batch_size']}, {result['threads']} thread(s), median of {result['rounds']} rounds): one after another "
        f"{result['separate_seconds']:.2f} s, together {result['together_seconds']:.2f} s (ratio {result['ratio']:.3f}); "
        f"largest difference: test error {result['largest_test_error_difference']:.3g} points, "
        f"parameters {result['largest_parameter_difference']:.3g}"
    )


if __name__ == "__main__":
    main()
