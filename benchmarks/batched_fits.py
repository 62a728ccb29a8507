"""Time K seeds trained together against the same K trained one after another (issue 51, item 1).

In one run: K fits of ``--method`` (``plain``: the plain network of ``sbnn-digits``, an MLP 64-100-10 on
scikit-learn's digits, Adam at 0.01 with a cosine schedule, batch 128; ``sbnn`` or ``sparse-vd``: that
method's own fit as its ``<method>-digits`` config makes it) or, with ``--network lenet300``, of
LeNet-300-100 on ``--rows`` random images of MNIST's shape (the plain network at Adam 0.001, or the
method's LeNet-300-100 config), each from its own seed (start, minibatch order, random draws), first one
after another (:meth:`~bayesprune.methods.FitContext.train_network`, or the method's ``fit``) and then
together (:func:`~bayesprune.methods.context.train_networks_together`, or the method's ``fit_together``).
Reports both wall times, their ratio, and the largest difference between a seed's two fits: test error
(points) and parameters. The two are timed in ``--rounds`` interleaved rounds (the order alternating),
each the median.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/batched_fits.py --fits 8 --epochs 10
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/batched_fits.py --method sbnn --fits 8 --epochs 10
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/batched_fits.py --method sparse-vd --fits 8 --epochs 10
    nice -n 10 python benchmarks/batched_fits.py --network lenet300 --rows 6000 --epochs 2
    python benchmarks/batched_fits.py --device cuda --network lenet300 --rows 60000 --epochs 2 --json
    python benchmarks/batched_fits.py --device cuda --method sbnn --network lenet300 --rows 60000 --kernels eager
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from bayesprune.core.fused import KERNEL_MODES
from bayesprune.core.loop import resolve_device
from bayesprune.core.tasks import network_test_metric
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, get_method
from bayesprune.methods.context import train_networks_together
from bayesprune.models import new_net
from bayesprune.pipeline.config import load_config
from epoch import synthetic

#: The config of each method's LeNet-300-100 (``--network lenet300``).
LENET300 = {"plain": "mnist-lenet-300-100", "sbnn": "mnist-lenet-300-100", "sparse-vd": "sparse-vd-lenet300"}


def setting(network: str, method: str, rows: int, epochs: int, kernels: str = "auto"):
    """The config (its network, optimiser, batch size and method, its ``train.kernels``) and the data of ``network``."""
    plain = ["optim.lr=0.001" if network == "lenet300" else "optim.lr=0.01"] if method == "plain" else []
    plain = plain or [f"train.kernels={kernels!r}"]
    if network == "lenet300":
        data = synthetic("synthetic-mnist", rows, (1, 28, 28))
        return load_config(LENET300[method], [f"train.epochs={epochs}", *plain]), data
    name = "sbnn-digits" if method == "plain" else f"{method}-digits"
    return load_config(name, [f"train.epochs={epochs}", *plain]), load_dataset("digits")


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trainers(args, config, data, device) -> dict:
    """``{"separate": ..., "together": ...}``: each trains the K fits and returns ``(network, tensors)``
    of every fit (its point-estimate network, and every tensor it trained)."""
    seeds = list(range(args.fits))

    def nets():
        return [new_net(config, data.input_shape, data.output_dim, seed=seed).to(device) for seed in seeds]

    def contexts():
        return [FitContext.from_config(config, data, device=device, seed=seed) for seed in seeds]

    if args.method == "plain":

        def one_after_another():
            fitted = nets()
            for net, ctx in zip(fitted, contexts()):
                batches = ctx.batches(data.x_train, data.y_train)
                ctx.train_network("train", net, batches, epochs=args.epochs, loss=F.cross_entropy)
            return [(net, list(net.parameters())) for net in fitted]

        def together():
            fitted = nets()
            train_networks_together(
                contexts(), "train", fitted, data.x_train, data.y_train, epochs=args.epochs, loss=F.cross_entropy
            )
            return [(net, list(net.parameters())) for net in fitted]

        return {"separate": one_after_another, "together": together}

    method, options = get_method(args.method), config.method_options

    def results(fits):
        return [
            (fitted.network(), [t for part in fitted.state_dict().values() for t in part.values()]) for fitted in fits
        ]

    def one_after_another():
        return results([method.fit(net, data, options, ctx) for net, ctx in zip(nets(), contexts())])

    def together():
        return results(method.fit_together(nets(), [data] * len(seeds), options, contexts()))

    return {"separate": one_after_another, "together": together}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    config, data = setting(args.network, args.method, args.rows, args.epochs, args.kernels)
    device = resolve_device(args.device)
    fits = trainers(args, config, data, device)
    times, fitted = {"separate": [], "together": []}, {}
    for index in range(args.rounds):  # interleaved, the order alternating
        for key in sorted(fits, reverse=index % 2 == 1):
            synchronize(device)
            start = time.perf_counter()
            fitted[key] = fits[key]()
            synchronize(device)
            times[key].append(time.perf_counter() - start)
    separate_seconds, together_seconds = (statistics.median(times[key]) for key in ("separate", "together"))

    pairs = list(zip(fitted["separate"], fitted["together"]))
    errors = [(network_test_metric(a, data), network_test_metric(b, data)) for (a, _), (b, _) in pairs]
    parameters = max(
        (p - q).abs().max().item()
        for (_, mine), (_, theirs) in pairs
        for p, q in zip(mine, theirs)
        if torch.is_tensor(p) and p.is_floating_point()
    )
    return {
        "device": str(device),
        "method": args.method,
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
    parser.add_argument("--method", choices=tuple(LENET300), default="plain")
    parser.add_argument("--network", choices=("mlp", "lenet300"), default="mlp")
    parser.add_argument("--fits", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=6000, help="random images for --network lenet300")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument(
        "--kernels",
        choices=KERNEL_MODES,
        default="auto",
        help="the method's train.kernels (eager: no torch.compile in the times; a LeNet-300-100's compiles under auto)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; times are medians")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['fits']} {result['method']} fits of {result['network']} on {result['data']} on {result['device']} ({result['rows']} rows, "
        f"{result['epochs']} epochs, batch {result['batch_size']}, {result['threads']} thread(s), median of {result['rounds']} rounds): one after another "
        f"{result['separate_seconds']:.2f} s, together {result['together_seconds']:.2f} s (ratio {result['ratio']:.3f}); "
        f"largest difference: test error {result['largest_test_error_difference']:.3g} points, "
        f"parameters {result['largest_parameter_difference']:.3g}"
    )


if __name__ == "__main__":
    main()
