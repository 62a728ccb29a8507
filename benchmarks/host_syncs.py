"""Count the host synchronisations inside every method's training steps (issue 40, item 3; issue 51, item 2).

A step that reads a value back to the host (``.item()``, ``float(tensor)``, a data-dependent shape, a
CPU tensor built from a CUDA one) makes the host wait for the GPU, so the next kernels cannot be queued
while the current ones run. Each method fits its packaged digits config for one epoch of its main stage
(the rest of its declared ``quick`` settings) through ``Method.fit``; every call of a step
(:meth:`~bayesprune.methods.FitContext.train`'s ``step``) is watched:

* on a CUDA device under ``torch.cuda.set_sync_debug_mode("warn")``, which warns at every synchronising
  CUDA call;
* on the CPU under :class:`HostReads`, which counts the calls that would synchronise with a CUDA device
  (reading a value: ``item``, ``tolist``, ``bool``, ``float``, ``int``, ``torch.equal``; a data-dependent
  shape: ``nonzero``, ``unique``, ``masked_select``, indexing by a boolean mask; a tensor built from
  host data on an explicit device), except in ``torch.optim`` (its step counters live on the host).

The counts are per step, with the source line that made them. The loop's own read-back, once per
epoch (:func:`bayesprune.core.loop.train`), is outside the steps and not counted.

    python benchmarks/host_syncs.py --json                   # on a machine with a GPU
    python benchmarks/host_syncs.py --device cpu             # anywhere: the reads that would synchronise

Prints, per method: the steps run, the synchronisations per step (median and most) and the source lines
that synchronised, most frequent first.
"""

import argparse
import collections
import json
import statistics
import traceback
import warnings

import torch
from torch.overrides import TorchFunctionMode

import bayesprune.methods.context as context
from bayesprune.core.loop import resolve_device
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, available_methods, get_method
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import new_net


class HostReads(TorchFunctionMode):
    """Counts, in ``places`` (source line → calls), the torch calls made under it that would make the host
    wait for a CUDA device, on any device (see the module's docstring); the line is the innermost one
    outside torch and Pyro."""

    READS = {
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.numpy,
        torch.Tensor.__bool__,
        torch.Tensor.__float__,
        torch.Tensor.__int__,
        torch.Tensor.__index__,
        torch.equal,
        torch.Tensor.equal,
        torch.nonzero,
        torch.Tensor.nonzero,
        torch.argwhere,
        torch.Tensor.argwhere,
        torch.masked_select,
        torch.Tensor.masked_select,
        torch.unique,
        torch.Tensor.unique,
    }

    def __init__(self):
        super().__init__()
        self.places = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._reads(func, args, kwargs):
            frames = traceback.extract_stack()[:-1]
            if "/torch/optim/" not in frames[-1].filename:
                outside = [f for f in frames if "/torch/" not in f.filename and "/pyro/" not in f.filename]
                self.places[f"{outside[-1].filename}:{outside[-1].lineno}"] += 1
        return func(*args, **kwargs)

    def _reads(self, func, args, kwargs) -> bool:
        if func in self.READS:
            return True
        if func in (torch.tensor, torch.as_tensor):
            return kwargs.get("device") is not None
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            return any(torch.is_tensor(i) and i.dtype == torch.bool for i in index)
        return False


def counted(step, counts: list, places: collections.Counter, cuda: bool):
    """``step`` with the synchronising calls of each of its calls counted into ``counts`` (one entry a
    call) and their source lines into ``places``: CUDA's own on a CUDA device, :class:`HostReads` else."""

    def each(*args):
        if not cuda:
            reads = HostReads()
            try:
                with reads:
                    return step(*args)
            finally:
                counts.append(sum(reads.places.values()))
                places.update(reads.places)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                return step(*args)
            finally:
                torch.cuda.set_sync_debug_mode("default")
                syncs = [w for w in caught if "synchroniz" in str(w.message)]
                counts.append(len(syncs))
                places.update(f"{w.filename}:{w.lineno}" for w in syncs)

    return each


def method_syncs(name: str, device: torch.device, epochs: int, overrides=()) -> dict:
    """The synchronisations of the steps of ``name``'s digits config (its ``quick`` settings, then
    ``overrides``, ``--set`` style) for ``epochs`` epochs of its main stage on ``device``."""
    quick = available_methods()[name].quick
    config = load_config(f"{name}-digits", [f"train.epochs={epochs}", f"device={str(device)!r}", *quick, *overrides])
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
