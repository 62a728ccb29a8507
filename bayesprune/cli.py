"""The ``bayesprune`` command line: ``run`` a config, ``report`` and ``importance`` of a saved run, ``list`` configs.

User errors (bad config values, bad data, an occupied output directory, a diverged fit) print one
line on stderr and exit with status 2, without a traceback.
"""
import argparse
import json
import sys
from pathlib import Path

from .config import load_config, packaged_configs
from .errors import BayesPruneError


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"bayesprune: error: {message}\n")


def _run(args):
    from .runner import run  # heavy imports (torch, pyro) only when needed

    overrides = list(args.overrides)
    if args.data_root is not None:
        overrides.append(f"data.root={json.dumps(args.data_root)}")
    config = load_config(args.config, overrides)
    metrics = run(config, args.out, force=args.force, progress=not args.quiet)
    if config.experiment.name is not None:
        print(f"experiment {config.experiment.name}: results in {args.out}")
        return
    metric = "test_error" if "test_error" in metrics else "test_rmse"
    baseline = metrics.get(f"baseline_{metric}")
    versus = "" if baseline is None else f" (plain network: {baseline:.4g})"
    print(f"{metrics['dataset']}: {metric} {metrics[metric]:.4g}{versus}; results in {args.out}")


def _report(args):
    from .analysis.report import write_report

    run_dir = Path(args.run_dir)
    for names in (("metrics.json",), ("history.csv", "elbo.csv"), ("scores.npz", "inclusion_probabilities.npz")):
        if not any((run_dir / name).is_file() for name in names):
            raise BayesPruneError(f"{run_dir}: not a run directory of a single fit (no {names[0]})")
    print(f"wrote {write_report(run_dir)}")


def _importance(args):
    from .analysis.importance import importance_table, node_importance_table, plot_importance
    from .analysis.tables import write_csv
    from .runner import load_run

    run_dir = Path(args.run_dir)
    outputs = [run_dir / name for name in ("importance.csv", "node_importance.csv", "importance.png")]
    if any(path.exists() for path in outputs) and not args.force:
        raise BayesPruneError(f"{run_dir}: importance.csv exists; pass --force to overwrite it")
    _, dataset, fitted = load_run(run_dir)
    if not fitted.scores_are_probabilities:
        raise BayesPruneError(f"{run_dir}: importance paths need inclusion probabilities; method {fitted.method!r} scores by {fitted.score_name}")
    scores = fitted.scores()
    try:
        rows = importance_table(fitted.net, scores, dataset.feature_names)
        nodes = node_importance_table(fitted.net, scores)
    except ValueError as error:
        raise BayesPruneError(f"{run_dir}: {error}") from None
    ordered = sorted(rows, key=lambda row: -row["phi"])
    ranks = {row["feature"]: rank for rank, row in enumerate(ordered, start=1)}
    write_csv(outputs[0], [{**row, "rank": ranks[row["feature"]]} for row in rows])
    write_csv(outputs[1], nodes)
    plot_importance(ordered[: args.top], outputs[2],
                    title=f"Feature importance φ (top {min(args.top, len(rows))} of {len(rows)})")
    print(f"wrote {', '.join(str(path) for path in outputs)}")


def _list(args):
    configs = packaged_configs()
    width = max(map(len, configs))
    for name, description in configs.items():
        print(f"{name:<{width}}  {description}")


def build_parser():
    parser = _Parser(prog="bayesprune", description="Bayesian and probabilistic pruning of neural networks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="fit a config and write its run directory")
    run.add_argument("config", nargs="?", help="packaged config name or TOML path (default: the embedded default)")
    run.add_argument("--out", required=True, help="run directory to create")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set sbnn.pi=0.3 (repeatable)")
    run.add_argument("--data-root", help="directory holding the data (sets data.root)")
    run.add_argument("--force", action="store_true", help="overwrite a non-empty --out directory")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_run)

    report = commands.add_parser("report", help="regenerate report.md and its plots from a run directory")
    report.add_argument("run_dir")
    report.set_defaults(handler=_report)

    importance = commands.add_parser(
        "importance", help="feature importance ψ, φ (paper 003, eqs. 3.18-3.19) and node importance of a run"
    )
    importance.add_argument("run_dir")
    importance.add_argument("--top", type=int, default=30, help="features shown in importance.png (default 30)")
    importance.add_argument("--force", action="store_true", help="overwrite existing importance files")
    importance.set_defaults(handler=_importance)

    listing = commands.add_parser("list", help="list the packaged configs")
    listing.set_defaults(handler=_list)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except BayesPruneError as error:
        print(f"bayesprune: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
