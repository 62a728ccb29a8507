"""Time deterministic training with its steps run as CUDA graphs against the same steps launched one by one
(``train.graphs``, issue 51, item 3).

In one run: ``--epochs`` epochs of LeNet-300-100 (or torchvision's resnet18 at 3x32x32, ``--network
resnet18``) on ``--rows`` random images, cross-entropy and Adam at 0.001 with a cosine schedule (so the
graph is captured again every epoch, as the library does when the rate changes), batch ``--batch-size``,
on the library's loop (:func:`bayesprune.core.loop.train`) under ``graph_mode("off")`` and
``graph_mode("on")``, each from the same seed, in ``--rounds`` interleaved rounds (median). Reports each
one's seconds an epoch (the warm-up and the captures included), their ratio, what the captures cost
(:meth:`bayesprune.core.graphs.GraphedStep.summary`) and the largest difference between the two fits'
parameters. Without a CUDA device (``--device cpu``: the GPU session's dry run) the graphs are refused,
as ``train.graphs = "on"`` is, and only the eager fit is timed:

    python benchmarks/graphs.py --device cuda --json
    python benchmarks/graphs.py --device cuda --network resnet18 --rows 10000 --precision bfloat16
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from bayesprune.core.errors import ConfigError
from bayesprune.core.graphs import check_graphs, graph_mode
from bayesprune.core.loop import TensorBatches, optimizer_step, resolve_device, train
from bayesprune.core.precision import training_precision
from bayesprune.pipeline.config import load_config
from epoch import network, synthetic


def fit(mode: str, args, dataset, config, device) -> tuple:
    """``(seconds, history, parameters)`` of one fit under ``train.graphs = mode``."""
    net = network(config, dataset, args.network).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    step = optimizer_step(lambda x, y: F.cross_entropy(net(x), y), optimizer)
    batches = TensorBatches(
        dataset.x_train.to(device), dataset.y_train.to(device), batch_size=args.batch_size, seed=config.seed
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    with graph_mode(mode), training_precision(args.precision):
        history = train(step, batches, epochs=args.epochs, scheduler=scheduler)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, history, [param.detach() for param in net.parameters()]


def run(args) -> dict:
    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    config = load_config("mnist-lenet-300-100", [])
    shape = (1, 28, 28) if args.network == "lenet300" else (3, 32, 32)
    dataset = synthetic(f"synthetic-{args.network}", args.rows, shape)
    result = {
        "device": str(device),
        "network": args.network,
        "rows": args.rows,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "precision": args.precision,
        "rounds": args.rounds,
    }
    modes = ["off", "on"]
    try:
        check_graphs("on", device)
    except ConfigError as error:
        modes, result["graphs"] = ["off"], f"refused: {error}"
    times, fits = {mode: [] for mode in modes}, {}
    for index in range(args.rounds):
        for mode in modes if index % 2 == 0 else modes[::-1]:
            seconds, history, params = fit(mode, args, dataset, config, device)
            times[mode].append(seconds / args.epochs)
            fits[mode] = (history, params)
    result["eager_epoch_seconds"] = statistics.median(times["off"])
    if "on" in fits:
        (eager, eager_params), (graphed, graphed_params) = fits["off"], fits["on"]
        result["graphs_epoch_seconds"] = statistics.median(times["on"])
        result["ratio"] = result["graphs_epoch_seconds"] / result["eager_epoch_seconds"]
        result["graphs"] = graphed.graphs
        result["largest_parameter_difference"] = max(
            (a.float() - b.float()).abs().max().item() for a, b in zip(eager_params, graphed_params)
        )
        result["largest_step_loss_difference"] = max(abs(a - b) for a, b in zip(eager.step_losses, graphed.step_losses))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--network", choices=("lenet300", "resnet18"), default="lenet300")
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; times are medians")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    line = (
        f"{result['network']} on {result['rows']} random images, batch {result['batch_size']}, {result['precision']}, "
        f"on {result['device']} (median of {result['rounds']} rounds of {result['epochs']} epochs): "
        f"eager {result['eager_epoch_seconds']:.3f} s an epoch"
    )
    if "ratio" in result:
        graphs = result["graphs"]
        line += (
            f", graphs {result['graphs_epoch_seconds']:.3f} s (ratio {result['ratio']:.3f}; {graphs['captures']} "
            f"captures in {graphs['seconds']:.3f} s, {graphs['replayed']} steps replayed, {graphs['eager']} eager); "
            f"largest parameter difference {result['largest_parameter_difference']:.3g}"
        )
    else:
        line += f"; graphs {result['graphs']}"
    print(line)


if __name__ == "__main__":
    main()
