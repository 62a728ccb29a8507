"""The ``bayesprune`` command line: ``run`` a config, ``list`` the packaged configs.

User errors (bad config values, bad data, an occupied output directory, a diverged fit) print one
line on stderr and exit with status 2, without a traceback.
"""
import argparse
import json
import sys

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
    metric = "test_error" if "test_error" in metrics else "test_rmse"
    print(f"{metrics['dataset']}: {metric} {metrics[metric]:.4g} (plain network: "
          f"{metrics.get('baseline_' + metric, float('nan')):.4g}); results in {args.out}")


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
                     help="override a config key, e.g. --set prior.pi=0.3 (repeatable)")
    run.add_argument("--data-root", help="directory holding the data (sets data.root)")
    run.add_argument("--force", action="store_true", help="overwrite a non-empty --out directory")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_run)

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
