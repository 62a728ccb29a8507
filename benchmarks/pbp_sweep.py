"""PAC-Bayes pruning over sparsities and prior fractions α: paper 000, Fig. 4 (error and bound against sparsity).

Sweeps the packaged ``pbp-lenet300`` config (or ``--config``) over every (α, sparsity) with
:func:`bayesprune.pipeline.compare.sweep.sweep` (``bayesprune sweep``): one run directory per point under
``--out/cells``, its ``summary.md``/``summary.csv``, and here ``sweep.json``, ``sweep.md`` (a table of the
certificate and the measured errors) and ``fig4.png``::

    python benchmarks/pbp_sweep.py --out runs/pbp-sweep [--alphas 0.5 0.7] [--sparsities 0.5 0.8 0.9 0.95]
        [--jobs 2] [--set key=value ...]

Running it again with the same ``--out`` continues: finished points are read back, never refitted.
Every point's ``pbp.grid_size`` is the number of points, so each certificate holds for whichever point
is picked afterwards (the union bound of appendix D.2, counted by the sweep).
"""

import argparse
import json
from pathlib import Path

from bayesprune.analysis.tables import markdown_table
from bayesprune.methods.pbp.plots import plot_bound_against_sparsity
from bayesprune.pipeline.compare.sweep import sweep

KEYS = (
    "bound",
    "bound_kl_inverse",
    "empirical_risk",
    "posterior_test_error",
    "prior_test_error",
    "kl",
    "sparsity",
    "grid_size",
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", default="pbp-lenet300")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.5, 0.7])
    parser.add_argument("--sparsities", type=float, nargs="+", default=[0.5, 0.8, 0.9, 0.95])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--resume", action="store_true", help="continue the interrupted sweep in --out")
    args = parser.parse_args(argv)
    grid = [f"pbp.alpha={','.join(map(str, args.alphas))}", f"pbp.sparsity={','.join(map(str, args.sparsities))}"]
    if args.resume:
        rows = sweep(None, None, args.out, jobs=args.jobs, engine=args.engine, resume=True)
    else:  # PBP's network is already pruned to its mask: the pruning curve needs no further sparsity.
        rows = sweep(
            args.config,
            grid,
            args.out,
            jobs=args.jobs,
            engine=args.engine,
            overrides=["prune.sparsities=[0.0]", *args.overrides],
        )
    records = [
        {"alpha": row["pbp.alpha"], "target_sparsity": row["pbp.sparsity"], **{key: row[key] for key in KEYS}}
        for row in rows
    ]
    (args.out / "sweep.json").write_text(json.dumps(records, indent=1) + "\n")
    (args.out / "sweep.md").write_text(markdown_table(records) + "\n")
    plot_bound_against_sparsity(records, args.out / "fig4.png")
    print(markdown_table(records))


if __name__ == "__main__":
    main()
