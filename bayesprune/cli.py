"""The ``bayesprune`` command line: ``run`` a config; ``report``, ``importance``, ``export`` and ``certify`` of a saved run; ``list`` configs.

User errors (bad config values, bad data, an occupied output directory, a diverged fit) print one
line on stderr and exit with status 2, without a traceback.
"""
import argparse
import json
import math
import signal
import sys
from pathlib import Path

from .config import load_config, packaged_configs
from .errors import BayesPruneError, Interrupted
from .fit import STOP


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"bayesprune: error: {message}\n")


def _run(args):
    from .runner import resume_run, run  # heavy imports (torch, pyro) only when needed

    if args.resume is not None:
        given = [flag for flag, value in (("a config", args.config), ("--out", args.out), ("--set", args.overrides),
                                          ("--data-root", args.data_root), ("--force", args.force)) if value]
        if given:
            raise BayesPruneError(f"--resume continues the run with its own config.toml; drop {', '.join(given)}")
        metrics = resume_run(args.resume, progress=not args.quiet)
        _print_result(metrics, args.resume)
        return
    if args.out is None:
        raise BayesPruneError("run needs --out DIR (or --resume DIR)")
    overrides = list(args.overrides)
    if args.data_root is not None:
        # stored resolved, so the run directory's config.toml works from any directory
        overrides.append(f"data.root={json.dumps(str(Path(args.data_root).resolve()))}")
    config = load_config(args.config, overrides)
    # A run's own config.toml may rerun it in place (it is read before anything is replaced).
    own = (Path(args.out) / "config.toml").resolve()
    config_file = [args.config] if args.config and Path(args.config).is_file() and Path(args.config).resolve() != own else []
    metrics = run(config, args.out, force=args.force, progress=not args.quiet, inputs=config_file)
    if config.experiment.name is not None:
        print(f"experiment {config.experiment.name}: results in {args.out}")
        return
    _print_result(metrics, args.out)


def _print_result(metrics, out):
    metric = "test_error" if "test_error" in metrics else "test_rmse"
    baseline = metrics.get(f"baseline_{metric}")
    versus = "" if baseline is None else f" (plain network: {baseline:.4g})"
    print(f"{metrics['dataset']}: {metric} {metrics[metric]:.4g}{versus}; results in {out}")


def _report(args):
    from .analysis.report import write_report

    run_dir = Path(args.run_dir)
    for names in (("metrics.json",), ("history.csv", "elbo.csv"), ("scores.npz", "inclusion_probabilities.npz")):
        if not any((run_dir / name).is_file() for name in names):
            raise BayesPruneError(f"{run_dir}: not a run directory of a single fit (no {names[0]})")
    print(f"wrote {write_report(run_dir)}")


def _importance(args):
    from .analysis.importance import importance_table, node_importance_table, plot_importance, plot_importance_image
    from .analysis.tables import write_csv
    from .runner import load_run

    run_dir = Path(args.run_dir)
    outputs = [run_dir / name for name in ("importance.csv", "node_importance.csv", "importance.png")]
    if any(path.exists() for path in outputs) and not args.force:
        raise BayesPruneError(f"{run_dir}: importance.csv exists; pass --force to overwrite it")
    _, dataset, fitted = load_run(run_dir)
    scores = fitted.inclusion_probabilities()
    if scores is None:
        raise BayesPruneError(f"{run_dir}: importance paths need inclusion probabilities; method {fitted.method!r} scores by {fitted.score_name}")
    try:
        rows = importance_table(fitted.net, scores, dataset.feature_names)
        nodes = node_importance_table(fitted.net, scores)
    except ValueError as error:
        raise BayesPruneError(f"{run_dir}: {error}") from None
    ordered = sorted(rows, key=lambda row: -row["phi"])
    ranks = {row["feature"]: rank for rank, row in enumerate(ordered, start=1)}
    write_csv(outputs[0], [{**row, "rank": ranks[row["feature"]]} for row in rows])
    write_csv(outputs[1], nodes)
    if len(dataset.input_shape) == 3 and len(rows) == math.prod(dataset.input_shape):
        plot_importance_image(rows, dataset.input_shape, outputs[2], title="Feature importance φ")
    else:
        plot_importance(ordered[: args.top], outputs[2],
                        title=f"Feature importance φ (top {min(args.top, len(rows))} of {len(rows)})")
    print(f"wrote {', '.join(str(path) for path in outputs)}")


def _export(args):
    import os

    import torch

    from .export import count_macs, count_parameters, export, measure_latency, save_portable
    from .pruning import apply_masks, expand_unit_masks, prune
    from .runner import load_run

    out = Path(args.out)
    if out.exists() and not args.force:
        raise BayesPruneError(f"--out {out}: exists; pass --force to overwrite it")
    if not out.parent.is_dir():
        raise BayesPruneError(f"--out {out}: the folder {out.parent} does not exist")
    budget = _budget(args.budget)
    _, dataset, fitted = load_run(args.run_dir)
    dense = fitted.network().eval()
    try:
        masks = prune(fitted.scores(), budget, net=dense)
        exported = export(dense, masks).eval()
    except ValueError as error:
        raise BayesPruneError(f"export: {error}") from None
    weight_masks = expand_unit_masks(dense, masks) if budget.level == "unit" else masks
    x = dataset.x_test[:256]
    with torch.no_grad():
        masked = torch.func.functional_call(dense, apply_masks(dict(dense.named_parameters()), weight_masks), (x,))
        difference = (exported(x) - masked).abs().max().item()
    partial = out.with_name(f".{out.stem}.partial.pt2")
    save_portable(exported, partial, x[:2])
    os.replace(partial, out)

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    report = {"budget": {key: value for key, value in vars(budget).items() if value is not None},
              "max_abs_difference_to_masked": difference, "file": str(out)}
    for name, net in (("dense", dense), ("exported", exported)):
        report[name] = {"parameters": count_parameters(net), "macs": count_macs(net, dataset.input_shape),
                        "latency_seconds": {device: measure_latency(net, dataset.input_shape, device=device, repeats=args.repeats)
                                            for device in devices}}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    rows = [("parameters", "parameters", "total"), ("non-zero parameters", "parameters", "nonzero"), ("MACs", "macs", None)]
    print(f"budget {report['budget']}; max |exported - masked dense| on {len(x)} test inputs: {difference:.2e}")
    print(f"{'':<28}{'dense':>14}{'exported':>14}{'ratio':>8}")
    for label, key, sub in rows:
        values = [report[name][key][sub] if sub else report[name][key] for name in ("dense", "exported")]
        print(f"{label:<28}{values[0]:>14,}{values[1]:>14,}{values[1] / values[0]:>8.3f}")
    for device in devices:
        for batch, seconds in report["dense"]["latency_seconds"][device].items():
            small = report["exported"]["latency_seconds"][device][batch]
            print(f"{f'latency {device}, batch {batch} (ms)':<28}{1e3 * seconds:>14.4f}{1e3 * small:>14.4f}{small / seconds:>8.3f}")
    print(f"wrote {out}: torch.export.load(path).module() runs it with torch alone")


def _certify(args):
    from .methods import get_method
    from .runner import load_run

    if args.samples is not None and args.samples < 1:
        raise BayesPruneError(f"--samples must be a positive integer, got {args.samples}")
    config, dataset, fitted = load_run(args.run_dir)
    result = get_method(config.method).certificate(fitted, dataset, config.method_options, samples=args.samples)
    if result is None:
        raise BayesPruneError(f"{args.run_dir}: method {config.method!r} has no certificate (pbp has)")
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:<24}{value:.6g}" if isinstance(value, float) else f"{key:<24}{value}")


def _budget(assignments):
    """The :class:`~bayesprune.pruning.Budget` of ``--budget key=value`` assignments over the command's defaults."""
    from .config import parse_override
    from .pruning import Budget

    fields = {"level": "unit", "min_keep": 1}
    for assignment in assignments:
        keys, value = parse_override(assignment)
        fields[".".join(keys)] = value
    if not {"fraction", "keep", "threshold"} & set(fields):
        fields["fraction"] = 0.5
    unknown = sorted(set(fields) - set(Budget.__dataclass_fields__))
    if unknown:
        raise BayesPruneError(f"--budget {unknown[0]}: not a budget field (one of {sorted(Budget.__dataclass_fields__)})")
    return Budget(**fields)


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
    run.add_argument("--out", help="run directory to create")
    run.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR from its last checkpoint")
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
    importance.add_argument("--top", type=int, default=30, help="features shown in the bar plot importance.png (default 30); image inputs get a heat map of every pixel")
    importance.add_argument("--force", action="store_true", help="overwrite existing importance files")
    importance.set_defaults(handler=_importance)

    exporting = commands.add_parser(
        "export", help="prune a fitted run by a budget and write a smaller network that runs with torch alone"
    )
    exporting.add_argument("run_dir")
    exporting.add_argument("--out", required=True, help="file to write (torch.export format, .pt2)")
    exporting.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE",
                           help="a field of the budget (repeatable): fraction, keep or threshold; scope global|layer; "
                                "level unit|weight; min_keep (default: fraction=0.5 level=unit min_keep=1)")
    exporting.add_argument("--repeats", type=int, default=30, help="timed forward passes per batch size (default 30)")
    exporting.add_argument("--json", action="store_true", help="print the measurements as JSON")
    exporting.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    exporting.set_defaults(handler=_export)

    certify = commands.add_parser("certify", help="recompute the PAC-Bayes certificate of a saved pbp run from its training data")
    certify.add_argument("run_dir")
    certify.add_argument("--samples", type=int, help="networks drawn from the posterior (default: the run's pbp.mc_samples)")
    certify.add_argument("--json", action="store_true", help="print the certificate as JSON")
    certify.set_defaults(handler=_certify)

    listing = commands.add_parser("list", help="list the packaged configs")
    listing.set_defaults(handler=_list)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    previous = {number: signal.signal(number, _request_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        args.handler(args)
    except Interrupted as error:
        print(f"bayesprune: interrupted: {error}", file=sys.stderr)
        return 128 + error.signal
    except BayesPruneError as error:
        print(f"bayesprune: error: {error}", file=sys.stderr)
        return 2
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        STOP.signal = None
    return 0


def _request_stop(number, frame):
    """Stop at the end of the training step in progress (a second signal stops at once)."""
    if STOP.signal is not None:
        raise KeyboardInterrupt
    STOP.signal = number


if __name__ == "__main__":
    sys.exit(main())
