"""Time one training epoch of every method on full MNIST LeNet-300-100, against two references.

What is measured: the wall-clock time of one epoch (60,000 images) of each method as the runner calls
it (``get_method(name).fit(net, dataset, options, ctx)`` with the method's packaged LeNet-300-100
config at one epoch of its main stage, its other stages at none where they can be skipped: building
the model and guide, moving the data once, the loop, and what the method does around it), against,
in the same run:

* (a) the same objective hand-written in plain PyTorch over the same minibatches
  (``svi_step.PlainTorchSBNN``: flat m and ρ, one ``torch.optim.Adam``, loss read back every step as
  ``svi.step`` does), the target being a ratio of at most 1.15;
* (b) deterministic training of the same network at the same batch size (cross-entropy, Adam),
  the cost of not being Bayesian at all.

Each method runs one untimed epoch first, which builds its compiled per-weight kernels
(``train.kernels = "auto"``: a few seconds, once a process). Methods and references run in
interleaved rounds (the order rotates); each reports the median over rounds of its time per epoch
(``--epochs`` epochs per sample). CPU runs use one intra-op thread by default (``--threads``). The
sBNN's minibatch penalty is set to ``uniform`` (eq. 4.2) in both it and its reference. A new method
adds one row to :data:`METHODS`.

Usage: ``python benchmarks/epoch.py [--json] [--rounds 3] [--epochs 1] [--device auto|cpu|cuda]
[--threads 1] [--data auto|mnist|synthetic] [--methods NAME ...] [--precision float32|bfloat16]
[--network lenet300|resnet18] [--rows N] [--kernels auto|eager|compiled] [--memory-format auto|channels_last|contiguous]``. ``--data mnist`` reads full MNIST through
``bayesprune.data.load_dataset("mnist")`` (fetched and cached once); ``synthetic`` times random
tensors of MNIST's shape (60,000, or ``--rows``; content does not change the timing); ``auto`` (the default) is MNIST when it
loads and synthetic otherwise. ``--precision bfloat16`` trains the methods (``train.precision``) and the
deterministic reference under bfloat16 autocast; ``--memory-format`` lays out both's minibatches of
images (``train.memory_format``; ``auto``: channels-last on CUDA). ``--network resnet18`` times torchvision's resnet18
(random weights, 10 classes) on ``--rows`` random 3x32x32 images instead (each method's LeNet settings
otherwise; no plain-PyTorch reference): issue 40's GPU measurement,

    python benchmarks/epoch.py --device cuda --network resnet18 --rows 10000 --precision bfloat16
"""

import argparse
import json
import statistics
import sys
import time

import pyro
import torch
import torch.nn.functional as F

from bayesprune import TensorBatches, resolve_device
from bayesprune.core.errors import DataError
from bayesprune.core.fused import KERNEL_MODES
from bayesprune.core.layout import MEMORY_FORMATS, resolve_memory_format
from bayesprune.core.loop import optimizer_step, train
from bayesprune.core.precision import training_precision
from bayesprune.data import CLASSIFICATION, Dataset, load_dataset
from bayesprune.methods import FitContext, get_method
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import new_net
from svi_step import PlainTorchSBNN

#: Method name → its packaged LeNet-300-100 config and the overrides that leave one epoch of its main stage.
METHODS = {
    "sbnn": ("mnist-lenet-300-100", ["sbnn.penalty='uniform'"]),
    "sparse-vd": ("sparse-vd-lenet300", []),
    "unit-gates": ("unit-gates-lenet300", ["unit-gates.finetune_epochs=0"]),
    "pft": (
        "pft-lenet300",
        [
            "pft.pretrain_epochs=0",
            "pft.finetune_epochs=0",
            "pft.start_masks=['magnitude']",
            "pft.sparsities=[0.95]",
            "pft.perturbation_draws=0",
            "pft.equal_budget_baseline=false",
        ],
    ),
    "pbp": (
        "pbp-lenet300",
        [
            "pbp.prior_epochs=0",
            "pbp.prior_mask_epochs=0",
            "pbp.mc_samples=1",
            "pbp.prior_samples=1",
            "pbp.sampling='networks'",
        ],
    ),
    "probmask": (
        "probmask-lenet300",
        ["probmask.finetune_epochs=0", "probmask.baseline=false", "probmask.t1=1", "probmask.t2=2"],
    ),
    "saliency": (
        "criteria-mlp",
        [
            "saliency.finetune_epochs=0",
            "saliency.stages=[1]",
            "saliency.penalties=[0.0]",
            "saliency.criteria=['magnitude']",
        ],
    ),
}


def mnist(kind: str, rows: int = 60_000) -> Dataset:
    """Full MNIST (``mnist``), ``rows`` random tensors of its shape (``synthetic``), or MNIST if it loads (``auto``)."""
    if kind in ("mnist", "auto"):
        try:
            return load_dataset("mnist")
        except DataError as error:
            if kind == "mnist":
                raise
            print(f"MNIST not available ({error}); timing synthetic data", file=sys.stderr)
    return synthetic("synthetic-mnist", rows, (1, 28, 28))


def synthetic(name: str, rows: int, shape: tuple) -> Dataset:
    """``rows`` uniform random images of ``shape`` with random labels of 10 classes."""
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(rows, *shape, generator=generator)
    y = torch.randint(10, (rows,), generator=generator)
    return Dataset(
        name=name,
        task=CLASSIFICATION,
        x_train=x,
        y_train=y,
        x_test=x[:10],
        y_test=y[:10],
        input_shape=shape,
        num_classes=10,
    )


def network(config, dataset, name: str):
    """The config's LeNet-300-100 (``lenet300``) or torchvision's resnet18 with random weights (``resnet18``)."""
    if name == "resnet18":
        import torchvision

        torch.manual_seed(config.seed)
        return torchvision.models.resnet18(weights=None, num_classes=dataset.output_dim)
    return new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)


def method_epoch(name, dataset, device, epochs, args):
    """``epochs`` epochs of ``name`` through its ``Method.fit``, as the runner calls it."""
    config_name, overrides = METHODS[name]
    config = load_config(
        config_name,
        [
            *overrides,
            f"train.epochs={epochs}",
            f"device={str(device)!r}",
            f"train.precision={args.precision!r}",
            f"train.memory_format={args.memory_format!r}",
            f"train.kernels={args.kernels!r}",
        ],
    )

    def run():
        net = network(config, dataset, args.network)
        with pyro.validation_enabled(False):
            get_method(name).fit(
                net, dataset, config.method_options, FitContext.from_config(config, dataset, device=device)
            )

    return run, config


def reference_epoch(config, dataset, device, epochs):
    """(a): the sBNN objective in plain PyTorch over the same minibatches."""
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed).to(device)
    reference = PlainTorchSBNN(
        net,
        config.method_options.prior(),
        lr=config.optim.lr,
        init_scale=config.method_options.init_scale,
        dataset_size=dataset.num_train,
    )
    batches = TensorBatches(dataset.x_train.to(device), dataset.y_train.to(device), batch_size=config.data.batch_size)

    def run():
        for _ in range(epochs):
            for x, y in batches:
                reference.step(x, y)

    return run


def deterministic_epoch(config, dataset, device, epochs, args):
    """(b): maximum-likelihood training of the same network (cross-entropy, Adam) on the library's loop, at
    the methods' precision and memory layout."""
    net = network(config, dataset, args.network).to(device)
    step = optimizer_step(
        lambda x, y: F.cross_entropy(net(x), y), torch.optim.Adam(net.parameters(), lr=config.optim.lr)
    )
    batches = TensorBatches(
        dataset.x_train.to(device),
        dataset.y_train.to(device),
        batch_size=config.data.batch_size,
        memory_format=resolve_memory_format(args.memory_format, dataset.input_shape, device),
    )

    def run():
        with training_precision(args.precision):
            train(step, batches, epochs=epochs)

    return run


def timed(epoch, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    epoch()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def run(args) -> dict:
    device = resolve_device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.network == "lenet300":
        dataset = mnist(args.data, args.rows or 60_000)
    else:
        dataset = synthetic("synthetic-cifar", args.rows or 10_000, (3, 32, 32))
    result = {
        "device": str(device),
        "network": args.network,
        "precision": args.precision,
        "memory_format": str(resolve_memory_format(args.memory_format, dataset.input_shape, device)),
        "data": dataset.name,
        "num_threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "epochs": args.epochs,
        "torch_version": str(torch.__version__),
        "pyro_version": pyro.__version__,
    }
    for name in args.methods:
        run_method, config = method_epoch(name, dataset, device, args.epochs, args)
        epochs = {name: run_method, "deterministic": deterministic_epoch(config, dataset, device, args.epochs, args)}
        if (
            name == "sbnn" and args.network == "lenet300"
        ):  # the same objective hand-written: what the library's loop costs
            epochs["plain_torch"] = reference_epoch(config, dataset, device, args.epochs)
        epochs[name]()  # untimed: builds the compiled kernels (train.kernels = "auto"), once a process
        samples = {key: [] for key in epochs}
        keys = list(epochs)
        for index in range(args.rounds):
            shift = index % len(keys)
            for key in keys[shift:] + keys[:shift]:
                samples[key].append(timed(epochs[key], device))
        seconds = {key: statistics.median(values) / args.epochs for key, values in samples.items()}
        result[name] = {
            "epoch_seconds": seconds[name],
            "deterministic_epoch_seconds": seconds["deterministic"],
            "ratio_vs_deterministic": seconds[name] / seconds["deterministic"],
        }
        if "plain_torch" in seconds:
            result[name].update(
                plain_torch_epoch_seconds=seconds["plain_torch"],
                ratio_vs_plain_torch=seconds[name] / seconds["plain_torch"],
            )
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (one epoch of each per round)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads; 0 keeps torch's default")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per timed sample (times are per epoch)")
    parser.add_argument("--data", choices=("auto", "mnist", "synthetic"), default="auto")
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--network", choices=("lenet300", "resnet18"), default="lenet300")
    parser.add_argument("--memory-format", choices=MEMORY_FORMATS, default="auto")
    parser.add_argument("--kernels", choices=KERNEL_MODES, default="auto", help="the methods' train.kernels")
    parser.add_argument(
        "--rows",
        type=int,
        help="random images: of MNIST's shape (default 60,000), for --network resnet18 3x32x32 (10,000)",
    )
    parser.add_argument(
        "--methods", nargs="+", choices=list(METHODS), default=list(METHODS), help="time these only (default: all)"
    )
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"one epoch of {result['network']} on {result['data']} at {result['precision']}, {result['memory_format']} "
        "(each method's batch size), "
        f"on {result['device']} ({result['num_threads']} threads, "
        f"median of {result['rounds']} rounds of {result['epochs']} epoch(s))"
    )
    for name in args.methods:
        r = result[name]
        reference = (
            f"; plain PyTorch, same objective: {r['plain_torch_epoch_seconds']:.2f} s (ratio {r['ratio_vs_plain_torch']:.3f})"
            if "plain_torch_epoch_seconds" in r
            else ""
        )
        print(
            f"{name}: {r['epoch_seconds']:.2f} s; deterministic training: {r['deterministic_epoch_seconds']:.2f} s "
            f"(ratio {r['ratio_vs_deterministic']:.2f}){reference}"
        )


if __name__ == "__main__":
    main()
