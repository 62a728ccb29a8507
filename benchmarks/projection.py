"""Time ProbMask's projection by bisection (paper 002, Theorem 1) against an exact projection by sorting.

What is measured: the wall-clock time of one projection of a vector of ``--size`` entries (10⁷ by
default) onto C = {x ∈ [0, 1]ⁿ : Σx ≤ K}, K = ``--keep`` · n, by two methods:

* ``bisection``: :func:`bayesprune.methods.probmask.projection.project_onto_budget`, a fixed number of bisection steps
  on the multiplier v of eq. 6, then a closed-form finish; no host synchronisation.
* ``sort``: :func:`project_by_sorting` below, the classic capped-simplex approach: sort s, evaluate
  g(v) = Σ min(1, max(0, s − v)) at every breakpoint (v = sᵢ and v = sᵢ − 1) from cumulative sums,
  and solve the linear piece that crosses K. Exact, O(n log n), one host synchronisation.

The input imitates a PGD step of Algorithm 1 (line 8): z = u + 0.1 ε, u ~ U(0, 1), ε ~ N(0, 1), in
``--dtype`` (float32 by default, like the parameters); both methods compute in float64 and return that
dtype. Before timing, the two results must agree to 1e-5 (max absolute difference), or the script
stops. On each device (CPU, and CUDA when available), after ``--warmup`` untimed calls of each method,
``--repeats`` rounds time one call of each in alternating order, with ``torch.cuda.synchronize``
before and after a CUDA call; the reported time is the median, and the ratio (bisection / sort) is
taken within the same run. CPU runs use one intra-op thread by default (``--threads``).

Usage: ``python benchmarks/projection.py [--json] [--size N] [--keep 0.1] [--repeats R] [--warmup W]
[--dtype float32|float64] [--threads T] [--devices cpu cuda]``. ``--json`` prints one JSON object and
nothing else on stdout.
"""

import argparse
import json
import statistics
import time

import torch

from bayesprune.methods.probmask.projection import BISECTION_STEPS, project_onto_budget

TOLERANCE = 1e-5


def project_by_sorting(s: torch.Tensor, budget: float) -> torch.Tensor:
    """proj_C(s) by sorting: the exact reference (K ≥ 0; the breakpoint search needs K < n when it binds).

    g(v) = Σ min(1, max(0, s − v)) = h(v) − h(v + 1) with h(v) = Σ_{sᵢ > v} (sᵢ − v), read off the
    ascending sort a of s and its prefix sums. g is linear between consecutive breakpoints, so the
    root of g(v) = K lies between the largest breakpoint (or 0) where g > K and the smallest where
    g ≤ K, and linear interpolation between them is exact.
    """
    z = s.detach().flatten().to(torch.float64)
    clipped = z.clamp(0, 1)
    if float(clipped.sum()) <= budget:
        return clipped.view(s.shape).to(s.dtype)
    a = torch.sort(z).values
    prefix = torch.cat([a.new_zeros(1), a.cumsum(0)])

    def h(v):  # v ascending: searchsorted is several times faster on sorted queries
        below = torch.searchsorted(a, v, right=True)  # a[below:] > v
        return prefix[-1] - prefix[below] - (len(a) - below) * v

    def g(v):
        return h(v) - h(v + 1)

    h_at = h(a)
    breakpoints = torch.cat([a - 1, a, a.new_zeros(1)])  # (a − 1) + 1 = a up to rounding
    values = torch.cat([h(a - 1) - h_at, h_at - h(a + 1), g(a.new_zeros(1))])
    low = torch.where(values > budget, breakpoints, -torch.inf).max()
    high = torch.where(values <= budget, breakpoints, torch.inf).min()
    v = low + (g(low) - budget) * (high - low) / (g(low) - g(high))
    return (z - v).clamp(0, 1).view(s.shape).to(s.dtype)


METHODS = {"bisection": project_onto_budget, "sort": project_by_sorting}


def synchronize(device):
    """Wait for queued CUDA work, so that wall-clock time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(method, s, budget):
    """Wall-clock seconds of one ``method(s, budget)``."""
    synchronize(s.device)
    start = time.perf_counter()
    method(s, budget)
    synchronize(s.device)
    return time.perf_counter() - start


def time_device(device, *, size, keep, dtype, repeats, warmup) -> dict:
    """Check that both methods agree, then the median ms of each and their ratio on ``device``."""
    generator = torch.Generator().manual_seed(0)
    s = (
        torch.rand(size, generator=generator, dtype=torch.float64)
        + 0.1 * torch.randn(size, generator=generator, dtype=torch.float64)
    ).to(device, dtype)
    budget = keep * size
    difference = float((project_onto_budget(s, budget).double() - project_by_sorting(s, budget).double()).abs().max())
    if not difference <= TOLERANCE:
        raise SystemExit(f"{device}: bisection and sort disagree by {difference:.3g} > {TOLERANCE}")
    for method in METHODS.values():
        for _ in range(warmup):
            seconds(method, s, budget)
    samples = {name: [] for name in METHODS}
    for index in range(repeats):
        for name in list(METHODS) if index % 2 == 0 else list(METHODS)[::-1]:
            samples[name].append(1e3 * seconds(METHODS[name], s, budget))
    ms = {name: statistics.median(times) for name, times in samples.items()}
    return {
        "bisection_ms": ms["bisection"],
        "sort_ms": ms["sort"],
        "ratio": ms["bisection"] / ms["sort"],
        "max_abs_difference": difference,
    }


def run(args) -> dict:
    """Time both methods on the CPU and, when available, on CUDA."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    devices = [torch.device(name) for name in args.devices]
    options = dict(
        size=args.size, keep=args.keep, dtype=getattr(torch, args.dtype), repeats=args.repeats, warmup=args.warmup
    )
    return {
        "devices": {str(device): time_device(device, **options) for device in devices},
        "size": args.size,
        "keep": args.keep,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "bisection_steps": BISECTION_STEPS,
        "num_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
    }


def format_table(result) -> str:
    """The human-readable report of :func:`run`'s result."""
    lines = [
        f"projection onto {{x in [0,1]^n : sum x <= {result['keep']} n}}, n = {result['size']}, {result['dtype']}"
        f" (median of {result['repeats']}; {result['bisection_steps']} bisection steps;"
        f" torch {result['torch_version']}, {result['num_threads']} CPU threads)",
        f"{'device':<8} {'bisection ms':>13} {'sort ms':>10} {'bisection/sort':>15} {'max |diff|':>11}",
    ]
    lines += [
        f"{device:<8} {r['bisection_ms']:>13.2f} {r['sort_ms']:>10.2f} {r['ratio']:>15.3f}"
        f" {r['max_abs_difference']:>11.1e}"
        for device, r in result["devices"].items()
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument(
        "--devices",
        nargs="+",
        choices=("cpu", "cuda"),
        default=["cpu"] + (["cuda"] if torch.cuda.is_available() else []),
        help="devices to time (default: the CPU, and CUDA when available)",
    )
    parser.add_argument("--size", type=int, default=10**7, help="entries of the projected vector")
    parser.add_argument("--keep", type=float, default=0.1, help="budget K as a fraction of the entries, in (0, 1)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per method (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per method first")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op CPU threads; 0 keeps torch's default (all cores)"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
