"""A finished unit-gates run (paper 004) against the dense network and a magnitude-pruning baseline.

For the run directory's first seed, the benchmark measures:

1. **Speed**: the median CPU forward time (:func:`bayesprune.core.export.measure_latency`, one thread) of
   the learned network against the dense starting architecture at batch sizes 1, 64 and 1024, as
   ratios (and on CUDA too when there is one).
2. **Training cost**: ``--steps`` steps of Algorithm 1 (gates on, the run's options) on the dense
   starting network, on the learned network, and of plain training of the dense network, interleaved
   over ``--rounds`` rounds on the same minibatches; the medians give the cost of a late epoch
   against the first (the gates' removal at work) and the gates' overhead over plain training.
3. **Whole training against dense training** (``training_ratio_vs_dense``): the run's whole
   unit-gates training as the runner calls it (``UnitGatesMethod.fit``: Algorithm 1 for
   ``train.epochs`` epochs, units leaving as soon as the pruning condition holds, then the
   fine-tuning) against plain training of the dense starting network (the same objective without
   gates: N/B-scaled cross-entropy plus λ/2 WᵀW, Adam, the same batches and loop) for the same
   number of epochs (``train.epochs + finetune_epochs``); ``training_ratio_vs_dense_train_epochs``
   sets it against the dense network's first ``train.epochs`` epochs alone. Both run in the same
   process and thread count, interleaved over ``--training-rounds`` rounds (the order alternating),
   medians reported (wall clock, and the process's CPU time, which a busy machine disturbs less).
4. **Equivalence**: the learned network against the starting architecture holding the same weights
   at the kept units' positions with the removed units' gates at 0 (the gated deterministic
   network): the largest absolute difference of their outputs on the test images.
5. **A structured-pruning baseline at the same architecture and budget**, Torch-Pruning's own
   magnitude pruner: the plain starting network trained for the run's epochs with the same
   objective (N/B-scaled cross-entropy plus λ/2 WᵀW, Adam), each hidden layer cut to the learned
   width by ``torch_pruning.pruner.MetaPruner`` with ``MagnitudeImportance(p=1)`` (the L1 norm of a
   unit's weights across its dependency group), and fine-tuned for the run's fine-tuning epochs;
   its test error beside the gates'.

Usage: ``python benchmarks/unit_gates.py RUN_DIR [--json] [--skip-baseline] [--steps 300] [--rounds 3]
[--training-rounds 2] [--threads 1]``.
"""

import argparse
import copy
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bayesprune.core.chain import layer_chain
from bayesprune.core.export import measure_latency
from bayesprune.core.gates import UnitGates
from bayesprune.core.loop import TensorBatches, optimizer_step, train
from bayesprune.core.predict import metric
from bayesprune.methods import FitContext, get_method
from bayesprune.methods.unit_gates import GateTraining, adam, data_cost
from bayesprune.pipeline.runner import load_run, new_net


def gated_equivalent(config, dataset, learned, kept_units):
    """The starting architecture holding ``learned``'s weights at the kept units' positions (zeros
    elsewhere), its gates, and the gate values (1 kept, 0 removed) that make it compute ``learned``."""
    shape = tuple(dataset.input_shape)
    dense = new_net(config, shape, dataset.output_dim, seed=config.seed)
    gates = UnitGates(dense, input_shape=shape)
    values, columns = [], None
    for index, (full, small) in enumerate(zip(layer_chain(dense, shape), layer_chain(learned, shape))):
        rows = torch.tensor(kept_units[index]) if index < len(kept_units) else torch.arange(full.units)
        if index < len(kept_units):
            values.append(torch.zeros(full.units).index_fill_(0, rows, 1.0))
        weight = full.module.weight
        columns = torch.arange(weight.shape[1]) if columns is None else columns
        with torch.no_grad():
            weight.zero_()
            weight[rows[:, None], columns[None, :]] = small.module.weight
            if full.module.bias is not None:
                full.module.bias.zero_()
                full.module.bias[rows] = small.module.bias
        per_unit = full.inputs_per_unit or 1
        columns = (rows[:, None] * per_unit + torch.arange(per_unit)).flatten()
    return dense, gates, values


def magnitude_baseline(config, dataset, widths) -> float:
    """Train the dense network as the gates were trained (without gates), cut every hidden layer to
    ``widths`` with Torch-Pruning's magnitude pruner, fine-tune, and return the test error (%).

    The pruner is ``torch_pruning.pruner.MetaPruner`` with ``MagnitudeImportance(p=1)``: a unit's
    importance is the L1 norm of its weights across its dependency group (incoming rows and the
    next layer's columns), and each hidden layer's ratio is ``1 − (width + 1/2) / units``, which
    the pruner's ``int(units · (1 − ratio))`` turns into exactly ``width`` kept units.
    """
    import torch_pruning as tp

    options = config.method_options
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    batches = TensorBatches(dataset.x_train, dataset.y_train, batch_size=config.data.batch_size, seed=config.seed)

    def fit(model, lr, epochs):
        def loss_fn(x, y):
            return data_cost(model(x), y, dataset.num_train, None)

        train(optimizer_step(loss_fn, adam(model, lr, options.weight_precision)), batches, epochs=epochs)

    fit(net, config.optim.lr, config.train.epochs)
    chain = layer_chain(net, dataset.input_shape)
    ratios = {
        layer.module: 1 - (width + 0.5) / layer.units for layer, width in zip(chain[:-1], widths) if width < layer.units
    }
    pruner = tp.pruner.MetaPruner(
        net.eval(),
        dataset.x_train[:2],
        importance=tp.importance.MagnitudeImportance(p=1),
        pruning_ratio=0.0,
        pruning_ratio_dict=ratios,
        ignored_layers=[chain[-1].module],
    )
    pruner.step()
    assert [layer.units for layer in layer_chain(net, dataset.input_shape)[:-1]] == list(widths)
    fit(net.train(), options.finetune_lr, options.finetune_epochs)
    with torch.no_grad():
        return metric("classification", torch.softmax(net.eval()(dataset.x_test), -1), dataset.y_test)


def training_costs(config, dataset, learned, *, steps: int, rounds: int) -> dict:
    """Median seconds of ``steps`` training steps: Algorithm 1 on the starting network and on
    ``learned``, and plain Adam on the starting network (the baseline's training), interleaved over
    ``rounds``."""
    options = config.method_options
    batches = TensorBatches(dataset.x_train, dataset.y_train, batch_size=config.data.batch_size, seed=config.seed)
    data = list(itertools.islice(iter(batches), steps))

    def gated(net):
        training = GateTraining(
            net.train(), options, num_train=dataset.num_train, lr=config.optim.lr, input_shape=dataset.input_shape
        )
        return training.step

    def fresh_dense():
        return new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)

    plain_net = fresh_dense().train()
    plain = optimizer_step(
        lambda x, y: data_cost(plain_net(x), y, dataset.num_train, None),
        adam(plain_net, config.optim.lr, options.weight_precision),
    )
    steppers = {
        "gates_dense": gated(fresh_dense()),
        "gates_learned": gated(copy.deepcopy(learned)),
        "plain_dense": plain,
    }
    times = {name: [] for name in steppers}
    for _ in range(rounds):
        for name, step in steppers.items():
            start = time.perf_counter()
            for index, (x, y) in enumerate(data):
                step(x, y, index, len(data))
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def whole_training(config, dataset, *, rounds: int) -> dict:
    """Median seconds of the run's whole unit-gates fit (``UnitGatesMethod.fit``, fine-tuning
    included) and of plain training of the dense starting network for ``train.epochs +
    finetune_epochs`` epochs (and its time at the end of epoch ``train.epochs``), interleaved over
    ``rounds`` with the order alternating."""
    options = config.method_options
    epochs = config.train.epochs + options.finetune_epochs

    def gates():
        net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
        start, cpu = time.perf_counter(), time.process_time()
        get_method("unit-gates").fit(
            net, dataset, options, FitContext.from_config(config, dataset, device=torch.device("cpu"))
        )
        return {"gates": time.perf_counter() - start, "gates_cpu": time.process_time() - cpu}

    def dense():
        net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
        batches = TensorBatches(dataset.x_train, dataset.y_train, batch_size=config.data.batch_size, seed=config.seed)
        step = optimizer_step(
            lambda x, y: data_cost(net(x), y, dataset.num_train, None),
            adam(net, config.optim.lr, options.weight_precision),
        )
        ends = []
        start, cpu = time.perf_counter(), time.process_time()
        train(
            step,
            batches,
            epochs=epochs,
            callbacks=[lambda epoch, history: ends.append((time.perf_counter() - start, time.process_time() - cpu))],
        )
        return {
            "dense": ends[-1][0],
            "dense_train_epochs": ends[config.train.epochs - 1][0],
            "dense_cpu": ends[-1][1],
            "dense_train_epochs_cpu": ends[config.train.epochs - 1][1],
        }

    samples = {}
    for index in range(rounds):
        for timed in (gates, dense) if index % 2 == 0 else (dense, gates):
            for key, seconds in timed().items():
                samples.setdefault(key, []).append(seconds)
                print(f"round {index + 1}: {key} {seconds:.1f} s", file=sys.stderr, flush=True)
    seconds = {key: statistics.median(values) for key, values in samples.items()}
    return {
        "epochs": epochs,
        "train_epochs": config.train.epochs,
        "rounds": rounds,
        "seconds": seconds,
        "training_ratio_vs_dense": seconds["gates"] / seconds["dense"],
        "training_ratio_vs_dense_train_epochs": seconds["gates"] / seconds["dense_train_epochs"],
        "cpu_ratio_vs_dense": seconds["gates_cpu"] / seconds["dense_cpu"],
        "cpu_ratio_vs_dense_train_epochs": seconds["gates_cpu"] / seconds["dense_train_epochs_cpu"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-baseline", action="store_true", help="only speed, training cost and equivalence")
    parser.add_argument("--steps", type=int, default=300, help="training steps per timed round (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the training-cost timing")
    parser.add_argument(
        "--training-rounds",
        type=int,
        default=2,
        help="interleaved rounds of the whole training against dense training (0 skips it)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads of every timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config, dataset, fitted = load_run(args.run_dir)
    metrics = json.loads((args.run_dir / "metrics.json").read_text())
    kept = metrics["kept_units"]
    learned = fitted.net.eval()
    dense, gates, values = gated_equivalent(config, dataset, learned, kept)
    dense.eval()
    with torch.no_grad(), gates.applied(dense, values):
        gated = dense(dataset.x_test)
    with torch.no_grad():
        difference = float((gated - learned(dataset.x_test)).abs().max())
    shape = tuple(dataset.input_shape)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    forward = {}
    for device in devices:
        dense_times = measure_latency(dense, shape, device=device)
        learned_times = measure_latency(learned, shape, device=device)
        forward[device] = {
            batch: {
                "dense": dense_times[batch],
                "learned": learned_times[batch],
                "speedup": dense_times[batch] / learned_times[batch],
            }
            for batch in dense_times
        }
    costs = training_costs(config, dataset, learned, steps=args.steps, rounds=args.rounds)
    result = {
        "num_threads": torch.get_num_threads(),
        "learned_architecture": [len(units) for units in kept],
        "max_abs_difference_gated_vs_learned": difference,
        "forward_seconds": forward,
        "speedup_batch_1024": forward["cpu"][1024]["speedup"],
        f"training_seconds_per_{args.steps}_steps": costs,
        "late_epoch_over_first": costs["gates_learned"] / costs["gates_dense"],
        "gates_over_plain_training": costs["gates_dense"] / costs["plain_dense"],
        "unit_gates_test_error": metrics["test_error"]
        if "per_seed" not in metrics
        else metrics["per_seed"][0]["test_error"],
    }
    if args.training_rounds > 0:
        whole = whole_training(config, dataset, rounds=args.training_rounds)
        result.update(
            training_ratio_vs_dense=whole.pop("training_ratio_vs_dense"),
            training_ratio_vs_dense_train_epochs=whole.pop("training_ratio_vs_dense_train_epochs"),
            whole_training=whole,
        )
    if not args.skip_baseline:
        result["magnitude_baseline_test_error"] = magnitude_baseline(config, dataset, [len(units) for units in kept])
    print(json.dumps(result, indent=1) if args.json else "\n".join(f"{key}: {value}" for key, value in result.items()))


if __name__ == "__main__":
    main()
