"""Count the host synchronisations inside every method's training steps on a CUDA device (issue 40, item 3).

A step that reads a value back to the host (``.item()``, ``float(tensor)``, a data-dependent shape, a
CPU tensor built from a CUDA one) makes the host wait for the GPU, so the next kernels cannot be queued
while the current ones run. Each method fits its packaged digits config for one epoch of its main stage
(the rest of its declared ``quick`` settings) through ``Method.fit``; every call of a step
(:meth:`~bayesprune.methods.FitContext.train`'s ``step``) runs under
``torch.cuda.set_sync_debug_mode("warn")``, which warns at every synchronising CUDA call, and the
warnings are counted per step with the source line that made them. The loop's own read-back, once per
epoch (:func:`bayesprune.core.loop.train`), is outside the steps and not counted.

    python benchmarks/host_syncs.py --json                   # on a machine with a GPU
    python benchmarks/host_syncs.py --device cpu --methods sbnn   # runs anywhere (counts nothing: no CUDA)

Prints, per method: the steps run, the synchronisations per step (median and most) and the source lines
that synchronised, most frequent first.
"""

import argparse
import collections
import json
import statistics
import warnings

import torch

import bayesprune.methods.context as context
from bayesprune.core.loop import resolve_device
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, available_methods, get_method
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import new_net


def counted(step, counts: list, places: collections.Counter, cuda: bool):
    """``step`` with the synchronising CUDA calls of each of its calls counted into ``counts`` (one entry a
    call) and their source lines into ``places``."""

    def each(*args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                return step(*args)
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode("default")
                syncs = [w for w in caught if "synchroniz" in str(w.message)]
                counts.append(len(syncs))
                places.update(f"{w.filename}:{w.lineno}" for w in syncs)

    return each


def method_syncs(name: str, device: torch.device, epochs: int) -> dict:
    quick = available_methods()[name].quick
    config = load_config(f"{name}-digits", [f"train.epochs={epochs}", f"device={str(device)!r}", *quick])
    data = load_dataset("digits")
    counts, places = [], collections.Counter()
    train = context.train

    def counting_train(step, batches, **kwargs):
        return train(counted(step, counts, places, device.type == "cuda"), batches, **kwargs)

    context.train = counting_train
    try:
        net = new_net(config, data.input_shape, data.output_dim, seed=config.seed)
        get_method(name).fit(net, data, config.method_options, FitContext.from_config(config, data, device=device))
    finally:
        context.train = train
    return {
        "steps": len(counts),
        "median_syncs_per_step": statistics.median(counts) if counts else None,
        "most_syncs_in_a_step": max(counts, default=None),
        "where": dict(places.most_common(5)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--epochs", type=int, default=1, help="epochs of each method's main stage")
    parser.add_argument(
        "--methods", nargs="+", choices=sorted(available_methods()), default=sorted(available_methods())
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    result = {"device": str(device), **{name: method_syncs(name, device, args.epochs) for name in args.methods}}
    if args.json:
        print(json.dumps(result))
        return
    print(f"host synchronisations inside the training steps on {result['device']}")
    for name in args.methods:
        r = result[name]
        print(
            f"{name}: {r['steps']} steps, {r['median_syncs_per_step']} a step (median), at most "
            f"{r['most_syncs_in_a_step']}; {r['where'] or 'none'}"
        )


if __name__ == "__main__":
    main()
