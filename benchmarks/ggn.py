"""Time the diagonal generalised Gauss-Newton of OBD and QM (paper 001, eq. 8) against per-example
Jacobians of the whole network.

What is measured: the wall-clock time of the GGN diagonal of every weight of paper 001's MLP
(784-300-100-10, tanh; 266,200 weights) over ``--examples`` inputs (1,000 per pruning stage in the
paper), cross-entropy loss, by two methods:

* ``backward``: :func:`bayesprune.core.criteria.ggn_diagonal`, one backward pass per output column to the
  layers' outputs and (δ²)ᵀ(a²) per ``Linear``.
* ``jacobian``: :func:`per_example_jacobians` below, vmapped vector-Jacobian products of the whole
  network per example and output column, chunked over examples (what bayesprune did before).

The inputs are standard normal pixels and random labels (the labels do not enter the GGN). Before
timing, the two results must agree to 1e-4 relative to the largest entry, or the script stops. After
one untimed call of each, ``--repeats`` rounds time one call of each in alternating order; the reported
time is the median, and the ratio (backward / jacobian) is taken within the same run, on the CPU with
``--threads`` intra-op threads (one by default) and on CUDA when available.

Usage: ``python benchmarks/ggn.py [--json] [--examples N] [--repeats R] [--threads T] [--devices cpu cuda]``.
"""

import argparse
import json
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call, vjp, vmap

from bayesprune.core.criteria import _hessian_factor, ggn_diagonal, weight_sites
from projection import synchronize

TOLERANCE = 1e-4


def per_example_jacobians(net, sites, x, chunk: int = 32) -> dict:
    """The reference: G_kk = (1/N) Σ_i Σ_c (∂(a_icᵀ f(x_i))/∂θ_k)² with a_ic the columns of
    diag(√p) − p √pᵀ, from the vmapped pullback of the whole network at each example."""
    params = {name: param.detach() for name, param in net.named_parameters()}
    weights = {site: params[site] for site in sites}

    def squared(example, factor):
        _, pullback = vjp(lambda w: functional_call(net, {**params, **w}, (example.unsqueeze(0),)).flatten(), weights)
        return {site: grad.pow(2).sum(0) for site, grad in vmap(pullback)(factor.mT)[0].items()}

    total = {site: torch.zeros_like(weight) for site, weight in weights.items()}
    for batch in torch.split(x, chunk):
        factor = _hessian_factor(functional_call(net, params, (batch,)), "cross_entropy")
        for site, value in vmap(squared)(batch, factor).items():
            total[site] += value.sum(0)
    return {site: value / len(x) for site, value in total.items()}


def seconds(method, *args):
    synchronize(args[2].device)
    start = time.perf_counter()
    method(*args)
    synchronize(args[2].device)
    return time.perf_counter() - start


def time_device(device, *, examples, repeats) -> dict:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 300), nn.Tanh(), nn.Linear(300, 100), nn.Tanh(), nn.Linear(100, 10)).to(device)
    x = torch.randn(examples, 784, device=device)
    y = torch.randint(0, 10, (examples,), device=device)
    sites = weight_sites(net)
    methods = {"backward": lambda n, s, x_: ggn_diagonal(n, s, x_, y), "jacobian": per_example_jacobians}
    results = {name: method(net, sites, x) for name, method in methods.items()}
    scale = max(float(value.abs().max()) for value in results["jacobian"].values())
    difference = max(float((results["backward"][s] - results["jacobian"][s]).abs().max()) for s in sites) / scale
    if not difference <= TOLERANCE:
        raise SystemExit(f"{device}: the two GGN diagonals disagree by {difference:.3g} (relative) > {TOLERANCE}")
    samples = {name: [] for name in methods}
    for index in range(repeats):
        for name in list(methods) if index % 2 == 0 else list(methods)[::-1]:
            samples[name].append(seconds(methods[name], net, sites, x))
    median = {name: statistics.median(times) for name, times in samples.items()}
    return {
        "backward_s": median["backward"],
        "jacobian_s": median["jacobian"],
        "ratio": median["backward"] / median["jacobian"],
        "max_relative_difference": difference,
    }


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    devices = [torch.device(name) for name in args.devices]
    return {
        "devices": {
            str(device): time_device(device, examples=args.examples, repeats=args.repeats) for device in devices
        },
        "examples": args.examples,
        "repeats": args.repeats,
        "num_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
    }


def format_table(result) -> str:
    lines = [
        f"GGN diagonal of the 784-300-100-10 MLP over {result['examples']} examples (median of "
        f"{result['repeats']}; torch {result['torch_version']}, {result['num_threads']} CPU threads)",
        f"{'device':<8} {'backward s':>11} {'jacobian s':>11} {'backward/jacobian':>18} {'max rel diff':>13}",
    ]
    lines += [
        f"{device:<8} {r['backward_s']:>11.3f} {r['jacobian_s']:>11.3f} {r['ratio']:>18.4f}"
        f" {r['max_relative_difference']:>13.1e}"
        for device, r in result["devices"].items()
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument(
        "--devices",
        nargs="+",
        choices=("cpu", "cuda"),
        default=["cpu"] + (["cuda"] if torch.cuda.is_available() else []),
        help="devices to time (default: the CPU, and CUDA when available)",
    )
    parser.add_argument("--examples", type=int, default=1000, help="examples the GGN is averaged over")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per method (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op CPU threads")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
