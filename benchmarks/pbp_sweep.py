"""PAC-Bayes pruning over sparsities and prior fractions α: paper 000, Fig. 4 (error and bound against sparsity).

Runs the packaged ``pbp-lenet300`` config (or ``--config``) once per (α, sparsity) and writes, under
``--out``, one run directory per point, ``sweep.json``, ``sweep.md`` (a table of the certificate and the
measured errors) and ``fig4.png``::

    python benchmarks/pbp_sweep.py --out runs/pbp-sweep [--alphas 0.5 0.7] [--sparsities 0.5 0.8 0.9 0.95]
        [--jobs 2] [--set key=value ...]

``grid_size`` is not changed: the points are separate runs, each certified on its own; a user who picks
the best of them must count them in ``pbp.grid_size`` (appendix D.2).
"""
import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from bayesprune.analysis.tables import markdown_table
from bayesprune.config import load_config
from bayesprune.methods.pbp.plots import plot_bound_against_sparsity
from bayesprune.runner import run

KEYS = ("bound", "bound_kl_inverse", "empirical_risk", "posterior_test_error", "prior_test_error", "kl", "sparsity")


def run_point(point, args) -> dict:
    alpha, sparsity = point
    torch.set_num_threads(1)
    overrides = [f"pbp.alpha={alpha}", f"pbp.sparsity={sparsity}", f"prune.droprates=[0.0, {sparsity}]", *args.overrides]
    out = args.out / f"alpha{alpha}-sparsity{sparsity}"
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() and not args.force \
        else run(load_config(args.config, overrides), out, force=args.force)
    return {"alpha": alpha, "target_sparsity": sparsity, **{key: metrics[key] for key in KEYS}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", default="pbp-lenet300")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.5, 0.7])
    parser.add_argument("--sparsities", type=float, nargs="+", default=[0.5, 0.8, 0.9, 0.95])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="rerun points whose run directory is complete")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    points = [(alpha, sparsity) for alpha in args.alphas for sparsity in args.sparsities]
    with ProcessPoolExecutor(args.jobs) as pool:
        records = list(pool.map(run_point, points, [args] * len(points)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(records, indent=1) + "\n")
    (args.out / "sweep.md").write_text(markdown_table(records) + "\n")
    plot_bound_against_sparsity(records, args.out / "fig4.png")
    print(markdown_table(records))


if __name__ == "__main__":
    main()
