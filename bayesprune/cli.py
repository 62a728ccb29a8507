"""The ``bayesprune`` command line: ``run`` a config; ``report``, ``importance``, ``export`` and ``certify`` of a saved run; ``compare`` methods and ``sweep`` grids; ``list`` configs.

User errors (bad config values, bad data, an occupied output directory, a diverged fit) print one
line on stderr and exit with status 2, without a traceback.
"""
import argparse
import json
import math
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

from bayesprune.pipeline.config import load_config, packaged_configs
from bayesprune.core.errors import BayesPruneError, Interrupted, StopNow, one_line
from bayesprune.core.loop import STOP


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"bayesprune: error: {one_line(message)}\n")


def _run(args):
    from bayesprune.pipeline.runner import resume_run, run  # heavy imports (torch, pyro) only when needed

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
    from bayesprune.pipeline.report import report

    print(f"wrote {report(args.run_dir)}")


def _importance(args):
    from bayesprune.analysis.importance import (SELECTION, input_importance, keep_matrices, kept_inputs_record, node_importance_table,
                                      plot_importance, plot_importance_image)
    from bayesprune.analysis.tables import write_csv
    from bayesprune.core.files import write_text
    from bayesprune.pipeline.runner import load_run

    if args.top < 1:
        raise BayesPruneError(f"--top must be a positive integer, got {args.top}")
    if not 0 <= args.fdr < 1:
        raise BayesPruneError(f"--fdr must lie in [0, 1), got {args.fdr}")
    run_dir = Path(args.run_dir)
    outputs = [run_dir / name for name in ("importance.csv", "node_importance.csv", "importance.png", SELECTION)]
    if any(path.exists() for path in outputs) and not args.force:
        raise BayesPruneError(f"{run_dir}: importance.csv exists; pass --force to overwrite it")
    folder = next((path for path in outputs if path.is_dir() and not path.is_symlink()), None)
    if folder is not None:
        raise BayesPruneError(f"{folder}: is a folder, where importance writes a file; move it away")
    config, dataset, fitted = load_run(run_dir)
    idata = _posterior_with_importance(run_dir)
    if idata is not None:
        rows, nodes, selection = _pooled_importance(idata, fitted, args.fdr)
    else:
        try:
            soft, hard, kept_by = keep_matrices(fitted)
            rows = input_importance(fitted, dataset.feature_names)
            nodes = node_importance_table(fitted.net, hard if soft is None else soft)
        except ValueError as error:
            raise BayesPruneError(f"{run_dir}: {error}") from None
        selection = kept_inputs_record(rows, kept_by)
    write_csv(outputs[0], rows)
    write_csv(outputs[1], nodes)
    if len(dataset.input_shape) == 3 and len(rows) == math.prod(dataset.input_shape):
        plot_importance_image(rows, dataset.input_shape, outputs[2], title="Feature importance φ")
    else:
        ordered = sorted(rows, key=lambda row: row["rank"])
        plot_importance(ordered[: args.top], outputs[2],
                        title=f"Feature importance ψ (top {min(args.top, len(rows))} of {len(rows)})")
    if len(dataset.input_shape) == 1:
        selection["refit"] = _refit_on_selection(config, dataset, [row["selected"] for row in rows])
    write_text(outputs[3], json.dumps(selection, indent=1) + "\n")
    print(f"selected {len(selection['selected'])} of {len(rows)} inputs ({selection['rule']}): "
          f"{', '.join(selection['selected']) or 'none'}")
    if "refit" in selection:
        refit = selection["refit"]
        print(f"plain network refit on the selected inputs: {refit['metric']} {refit['selected_inputs']:.4g} "
              f"(all inputs: {refit['all_inputs']:.4g})")
    print(f"wrote {', '.join(str(path) for path in outputs)}")


def _refit_on_selection(config, dataset, selected: list) -> dict:
    """Test metric of the run's plain network trained, as the run trains it, on all inputs and on the
    selected ones only (the others set to zero: X·diag(Ẑ), paper 003's Algorithm 2)."""
    from dataclasses import replace

    import torch

    from bayesprune.analysis.selection import mask_features
    from bayesprune.models import new_net
    from bayesprune.pipeline.baseline import train_plain
    from bayesprune.pipeline.evaluation import metric_name

    config = config.for_data(dataset.num_train)
    mask = torch.tensor(selected, dtype=torch.bool)
    masked = replace(dataset, x_train=mask_features(dataset.x_train, mask), x_test=mask_features(dataset.x_test, mask))
    result = {"metric": metric_name(dataset.task)}
    for key, data in (("all_inputs", dataset), ("selected_inputs", masked)):
        net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
        result[key] = train_plain(net, data, epochs=config.baseline.epochs or config.train.epochs,
                                  lr=config.baseline.lr or config.optim.lr, batch_size=config.data.batch_size,
                                  seed=config.seed, hold=config.baseline.held_out)["test"]
    return result


def _posterior_with_importance(run_dir: Path):
    """The run's ``posterior.nc`` (checked as the report checks it) when it holds ψ's draws, else ``None``."""
    from bayesprune.pipeline.report import read_metrics, read_posterior, read_scores

    if not (run_dir / "posterior.nc").is_file():
        return None
    idata = read_posterior(run_dir, read_metrics(run_dir)["method"], read_scores(run_dir))
    return idata if "psi" in idata.posterior.data_vars else None


def _pooled_importance(idata, fitted, fdr: float) -> tuple:
    """Rows of ``importance.csv`` and ``node_importance.csv`` and the ``selection.json`` record, from every
    restart of ``posterior.nc`` pooled: the numbers the report gives."""
    from bayesprune.analysis.importance import node_layer_names, pooled_importance_of, pooled_node_importance_of, selection_record
    from bayesprune.core.structure import layer_chain

    rows = pooled_importance_of(idata, fdr=fdr)
    outputs = layer_chain(fitted.net)[-1].module.weight.shape[0]
    nodes = pooled_node_importance_of(idata, node_layer_names(fitted.net), outputs)
    return rows, nodes, selection_record(rows, fdr=fdr, restarts=idata.posterior.sizes["chain"])


def _export(args):
    from bayesprune.pipeline.export import check_export_arguments, export_run

    check_export_arguments(args.out, repeats=args.repeats, force=args.force)  # before the budget and the run are read
    exported = export_run(args.run_dir, out=args.out, budget=_budget(args.budget) if args.budget else None,
                          repeats=args.repeats, force=args.force)
    print(json.dumps(exported.report, indent=2) if args.json else "\n".join(exported.summary()))


def _certify(args):
    from bayesprune.pipeline.certify import certify

    result = certify(args.run_dir, samples=args.samples)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:<24}{value:.6g}" if isinstance(value, float) else f"{key:<24}{value}")


def _budget(assignments):
    """The :class:`~bayesprune.core.pruning.Budget` of ``--budget key=value`` assignments over the command's defaults
    (``level=unit min_keep=1``; one of fraction, keep and threshold must be given)."""
    from bayesprune.pipeline.config import parse_override
    from bayesprune.core.pruning import Budget

    fields, given = {"level": "unit", "min_keep": 1}, set()
    for assignment in assignments:
        keys, value = parse_override(assignment)
        key = ".".join(keys)
        if key in given:
            raise BayesPruneError(f"--budget {key}: given twice; give each budget field once")
        fields[key] = value
        given.add(key)
    unknown = sorted(set(fields) - set(Budget.__dataclass_fields__))
    if unknown:
        raise BayesPruneError(f"--budget {unknown[0]}: not a budget field (one of {sorted(Budget.__dataclass_fields__)})")
    if not {"fraction", "keep", "threshold"} & set(fields):
        raise BayesPruneError("--budget needs one of fraction, keep and threshold (e.g. --budget fraction=0.5)")
    return Budget(**fields)


def _grid_folder(args) -> Path:
    """The folder a ``compare`` or ``sweep`` writes: ``--out`` (a new grid) or ``--resume`` (one to continue)."""
    if (args.out is None) == (args.resume is None):
        raise BayesPruneError(f"{args.command} needs --out DIR (a new {args.command}) or --resume DIR (continue one), not both")
    if "" in (args.out, args.resume):
        raise BayesPruneError(f"{'--out' if args.out == '' else '--resume'} is empty; name a folder")
    return Path(args.resume or args.out)


def _compare(args):
    from bayesprune.pipeline.compare import compare

    out = _grid_folder(args)
    rows = compare(args.config, out, methods=args.methods, sparsities=args.sparsities, seeds=args.seeds, jobs=args.jobs,
                   engine=args.engine, address=args.address, overrides=args.overrides, track=args.track,
                   track_uri=args.track_uri, resume=args.resume is not None)
    print(f"{len(rows)} rows; wrote {out / 'leaderboard.md'}, leaderboard.csv, leaderboard.png")
    return _failed_cells(rows, out / "leaderboard.md")


def _failed_cells(rows, table) -> int:
    """Exit status 1, with one line, when a cell of the grid failed while fitting (its reason is in ``table``)."""
    failed = [row for row in rows if row.get("failed")]
    if failed:
        print(f"bayesprune: {len(failed)} of {len(rows)} rows have a failed cell (reasons in {table}); run the same "
              "grid with --resume to fit them again", file=sys.stderr)
    return 1 if failed else 0


def _sweep(args):
    from bayesprune.pipeline.compare.sweep import sweep

    out = _grid_folder(args)
    if args.resume is None and not (args.config and args.grid):
        raise BayesPruneError("sweep needs a CONFIG and at least one --grid key=v1,v2,... (or --resume DIR)")
    rows = sweep(args.config, args.grid, out, seeds=args.seeds, jobs=args.jobs, engine=args.engine, address=args.address,
                 overrides=args.overrides, track=args.track, track_uri=args.track_uri, resume=args.resume is not None)
    print(f"{len(rows)} grid points; wrote {out / 'summary.md'} and summary.csv")
    return _failed_cells(rows, out / "summary.md")


def _grid_engine_arguments(parser):
    """The flags ``compare`` and ``sweep`` share."""
    parser.add_argument("--out", help="a new folder for the cells and the tables")
    parser.add_argument("--resume", metavar="DIR", help="continue the grid in DIR with its own config (finished cells are "
                                                        "read back, never fitted again; --seeds, compare's --methods and "
                                                        "--sparsities add or drop cells; --jobs, --engine, --address and "
                                                        "--track may change)")
    parser.add_argument("--seeds", type=int, nargs="+", help="fit every cell from each seed")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key for every cell (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="cells fitted at once (local engine; one thread each)")
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help="local process pool (default) or Ray (pip install 'bayesprune[ray]')")
    parser.add_argument("--address", help="the Ray cluster's address (default: a local Ray for this call)")
    parser.add_argument("--track", choices=["mlflow"],
                        help="log each cell (config as params, metrics.json and its pruning curve as metrics, report "
                             "and plots as artifacts; one run per cell, tagged method, sparsity, seed) and the tables "
                             "(a parent run) to MLflow as cells finish; a cell logged before is not logged again "
                             "(pip install 'bayesprune[track]')")
    parser.add_argument("--track-uri", metavar="URI",
                        help="the MLflow store --track logs to: a folder or any tracking URI (default: file:OUT/mlruns; "
                             "read a file store with MLFLOW_ALLOW_FILE_STORE=true set, as MLflow 3 asks)")


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
    run.add_argument("--threads", type=int, help="torch CPU threads (default: the idle cores less one, at least one; "
                                                 "OMP_NUM_THREADS, when set, is kept)")
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
    importance.add_argument("--fdr", type=float, default=0.1,
                            help="bound on the posterior expected false-discovery rate of the selection (default 0.1)")
    importance.set_defaults(handler=_importance)

    exporting = commands.add_parser(
        "export", help="write a fitted run's network, smaller where the method (or --budget) removed units, as a file "
                       "that runs with torch alone and a trainable file; prints its test error beside the run's"
    )
    exporting.add_argument("run_dir")
    exporting.add_argument("--out", required=True, help="file to write (torch.export format, .pt2); the trainable file "
                                                        "FILE_STEM.trainable.pt is written beside it")
    exporting.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE",
                           help="prune further than the method did, by a field of the budget (repeatable): fraction, "
                                "keep or threshold; scope global|layer; level unit|weight; min_keep (defaults level=unit "
                                "min_keep=1); without it the method's own network is exported")
    exporting.add_argument("--repeats", type=int, default=30, help="timed forward passes per batch size (default 30)")
    exporting.add_argument("--json", action="store_true", help="print the measurements as JSON")
    exporting.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    exporting.set_defaults(handler=_export)

    certify = commands.add_parser("certify", help="recompute the PAC-Bayes certificate of a saved pbp run from its training data")
    certify.add_argument("run_dir")
    certify.add_argument("--samples", type=int, help="networks drawn from the posterior (default: the run's pbp.mc_samples)")
    certify.add_argument("--json", action="store_true", help="print the certificate as JSON")
    certify.set_defaults(handler=_certify)

    comparing = commands.add_parser(
        "compare", help="every method and magnitude pruning of the plain network on one network, data and budget; "
                        "a leaderboard of test error, size, MACs and latency per sparsity")
    comparing.add_argument("config", nargs="?", help="comparison config: packaged name or TOML path (default: compare-digits)")
    comparing.add_argument("--methods", nargs="+", help="methods to compare (default: all, and magnitude, which always runs)")
    comparing.add_argument("--sparsities", type=float, nargs="+", help="sparsity budgets, fractions of the weights removed")
    _grid_engine_arguments(comparing)
    comparing.set_defaults(handler=_compare)

    sweeping = commands.add_parser("sweep", help="the cross product of --grid values over a config, each point and seed a run; "
                                                 "a summary over seeds (PBP's union bound counted)")
    sweeping.add_argument("config", nargs="?", help="packaged config name or TOML path")
    sweeping.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                          help="a config key and its values (repeatable: the grid is the cross product)")
    _grid_engine_arguments(sweeping)
    sweeping.set_defaults(handler=_sweep)

    listing = commands.add_parser("list", help="list the packaged configs")
    listing.set_defaults(handler=_list)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    previous = {number: signal.signal(number, _request_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.command != "list":  # list reads no tensor (and imports no torch)
            from bayesprune.pipeline.threads import set_threads

            set_threads(getattr(args, "threads", None))
        with _warnings_after_success():
            status = args.handler(args)
    except (Interrupted, StopNow) as error:
        print(f"bayesprune: interrupted: {one_line(str(error))}", file=sys.stderr)
        return 128 + error.signal
    except BayesPruneError as error:
        for line in getattr(error, "lines", None) or [str(error)]:  # several refusals (compare): one line each
            print(f"bayesprune: error: {one_line(line)}", file=sys.stderr)
        return 2
    except MemoryError as error:  # a size no check foresaw: the same one line, never a traceback
        print(f"bayesprune: error: out of memory{': ' + one_line(str(error)) if str(error) else ''}; "
              "use a smaller network, data set or batch", file=sys.stderr)
        return 2
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        STOP.signal = None
    return status or 0


@contextmanager
def _warnings_after_success():
    """Hold back the warnings a command raises (Pillow's on an odd image, a library's deprecations) and
    show them once it succeeds: a refused command's one line is all it prints."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _request_stop(number, frame):
    """Stop at the end of the training step in progress (a second signal stops at once, with the same
    one line: :class:`~bayesprune.core.errors.StopNow`)."""
    if STOP.signal is not None:
        raise StopNow(number)
    STOP.signal = number


if __name__ == "__main__":
    sys.exit(main())
