"""The ``bayesprune`` command line: ``run`` a config; ``report``, ``importance``, ``export`` and ``certify`` of a saved run; ``compare`` methods and ``sweep`` grids; ``list`` configs.

User errors (bad config values, bad data, an occupied output directory, a diverged fit) print one
line on stderr and exit with status 2, without a traceback.
"""

import argparse
import json
import signal
import sys
from pathlib import Path

from bayesprune.core.errors import BayesPruneError, Interrupted, StopNow, memory_error, one_line, warnings_after_success
from bayesprune.core.loop import STOP
from bayesprune.core.process_exit import exit_without_collection
from bayesprune.pipeline.config import packaged_configs


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"bayesprune: error: {one_line(message)}\n")


def _run(args):
    from bayesprune.pipeline.processes import on_processes  # heavy imports (torch, pyro) only when needed

    return on_processes(args.processes, args.argv, lambda: _run_here(args))


def _run_here(args) -> str:
    """Run or resume in this process; the line to print."""
    from bayesprune.pipeline.config import load_config
    from bayesprune.pipeline.runner import resume_run, run_file
    from bayesprune.pipeline.summary import result_line

    if args.resume is not None:
        values = (args.config, args.out, args.overrides, args.data_root, args.force)
        given = [flag for flag, value in zip(("a config", "--out", "--set", "--data-root", "--force"), values) if value]
        if given:
            raise BayesPruneError(f"--resume continues the run with its own config.toml; drop {', '.join(given)}")
        metrics = resume_run(args.resume, progress=not args.quiet)
        return result_line(metrics, args.resume, load_config(str(Path(args.resume) / "config.toml")))
    if args.out is None:
        raise BayesPruneError("run needs --out DIR (or --resume DIR)")
    options = {"overrides": args.overrides, "data_root": args.data_root, "force": args.force}
    config, metrics = run_file(args.config, args.out, progress=not args.quiet, **options)
    if config.experiment.name is None:
        return result_line(metrics, args.out, config)
    return f"experiment {config.experiment.name}: results in {args.out}"


def _report(args):
    from bayesprune.pipeline.report import report

    print(f"wrote {report(args.run_dir)}")


def _importance(args):
    from bayesprune.pipeline.importance import importance

    options = {"top": args.top, "fdr": args.fdr, "selection": args.selection, "copies": args.copies}
    print("\n".join(importance(args.run_dir, force=args.force, **options).summary()))


def _export(args):
    from bayesprune.pipeline.export import budget_of, check_export_arguments, export_run

    options = {"repeats": args.repeats, "force": args.force, "formats": args.format}
    check_export_arguments(args.out, **options)  # before the budget and the run are read
    budget = budget_of(args.budget) if args.budget else None
    exported = export_run(args.run_dir, out=args.out, budget=budget, finetune_epochs=args.finetune_epochs, **options)
    print(json.dumps(exported.report, indent=2) if args.json else "\n".join(exported.summary()))


def _certify(args):
    from bayesprune.pipeline.certify import certify

    result = certify(args.run_dir, samples=args.samples)
    lines = [f"{k:<24}{v:.6g}" if isinstance(v, float) else f"{k:<24}{v}" for k, v in result.items()]
    print(json.dumps(result, indent=2) if args.json else "\n".join(lines))


def _grid(args):
    """``compare`` or ``sweep``: the grid fitted and its tables written; exit 1 when a cell failed fitting."""
    from bayesprune.pipeline.compare.grid import exit_status, grid_folder

    name = args.command
    out = grid_folder(name, args.out, args.resume)  # a new grid, or one to continue
    flags = ("seeds", "jobs", "alone", "engine", "address", "overrides", "track", "track_uri")
    engine = {k: getattr(args, k) for k in flags} | {"resume": args.resume is not None}
    engine["status"] = (lambda line: None) if args.quiet else None
    if name == "compare":
        from bayesprune.pipeline.compare import compare

        rows = compare(args.config, out, methods=args.methods, sparsities=args.sparsities, **engine)
        table = out / "leaderboard.md"
        macs = ", leaderboard-macs.md" if (out / "leaderboard-macs.md").is_file() else ""
        print(f"{len(rows)} rows; wrote {table}, leaderboard.csv, leaderboard.png{macs}")
    else:
        from bayesprune.pipeline.compare.sweep import sweep

        if args.resume is None and not (args.config and args.grid):
            raise BayesPruneError("sweep needs a CONFIG and at least one --grid key=v1,v2,... (or --resume DIR)")
        rows = sweep(args.config, args.grid, out, **engine)
        table = out / "summary.md"
        print(f"{len(rows)} grid points; wrote {table} and summary.csv")
    return exit_status(rows, table)


def _list(args):
    configs = packaged_configs()
    width = max(map(len, configs))
    for name, description in configs.items():
        print(f"{name:<{width}}  {description}")


#: The help of each command, and of the options whose help does not fit beside them (``bayesprune COMMAND --help``).
HELP = {
    "run": "fit a config and write its run directory",
    "report": "regenerate report.md and its plots from a run directory",
    "importance": "feature importance ψ, φ (paper 003, eqs. 3.18-3.19) and node importance of a run",
    "export": "write a fitted run's network, smaller where the method (or --budget) removed units, as a file that runs with torch alone and a trainable file; prints its test error beside the run's",
    "certify": "recompute the PAC-Bayes certificate of a saved pbp run from its training data",
    "compare": "every method and magnitude pruning of the plain network on one network, data and budget; a leaderboard of test error, size, MACs and latency per sparsity",
    "sweep": "the cross product of --grid values over a config, each point and seed a run; a summary over seeds (PBP's union bound counted)",
    "list": "list the packaged configs",
    "run config": "packaged config name or TOML path (default: the embedded default)",
    "run --threads": "torch CPU threads (default: the idle cores less one, at least one; OMP_NUM_THREADS, when set, is kept)",
    "run --processes": "fit on N processes of this machine, each its share of every minibatch, gradients averaged (PyTorch distributed: gloo on CPU, NCCL on CUDA, one GPU per process); the run directory is written once; under torchrun, leave it out",
    "importance --top": "features shown in the bar plot importance.png (default 30); image inputs get a heat map of every pixel",
    "importance --fdr": "bound on the false-discovery rate of the selection (default 0.1): posterior expected "
    "(bayesian-fdr) or frequentist (empirical-null, knockoff)",
    "importance --selection": "selection of groups of inputs (default: the run's importance.selection, empirical-null): "
    "empirical-null (log psi against the other groups', Benjamini-Hochberg), bayesian-fdr (posterior inclusion "
    "probabilities) or knockoff (model-X knockoffs, knockpy's MVR; refits beside copies, tables only)",
    "importance --copies": "knockoff copies of every input (default 2): one copy selects nothing below 1/fdr inputs",
    "export --out": "file to write (torch.export format, .pt2; with --format onnx a name ending .onnx names the ONNX file, the .pt2 beside it); the trainable file FILE_STEM.trainable.pt is written beside it",
    "export --budget": "prune further than the method did, by a field of the budget (repeatable): sparsity (the fraction removed), keep, threshold or macs (the fraction of the fitted network's MACs kept); scope global|layer; level unit|weight; min_keep (default level=unit, min_keep a tenth of each layer's units, at least 1); without it the method's own network is exported",
    "export --finetune-epochs": "fine-tune the exported network N epochs (prune.finetune_epochs's fine-tuning: the run's optimiser rate and minibatches, removed weights held at zero, batch-norm statistics estimated again) in place of the run's prune.finetune_epochs; 0: none",
    "export --format": "pt2 (always written) and onnx: FILE_STEM.onnx beside it, run by ONNX Runtime on the test split (pip install 'bayesprune[onnx]')",
    "certify --samples": "networks drawn from the posterior (default: the run's pbp.mc_samples)",
    "compare config": "comparison config: packaged name or TOML path (default: compare-digits)",
    "compare --sparsities": "sparsity budgets: fractions of the weights removed (of the units at prune.level = 'unit')",
    "compare --methods": "methods to compare (default: all, and magnitude, which always runs)",
    "sweep --grid": "a config key and its values (repeatable: the grid is the cross product)",
    "grid --seeds": "fit every cell from each seed (compare.cases: narrow every case to them)",
    "grid --resume": "continue the grid in DIR with its own config (finished cells are read back, never fitted again; --seeds, compare's --methods and --sparsities add or drop cells; --jobs, --alone, --engine, --address and --track may change)",
    "grid --alone": "fit every cell alone, each with its own checkpoint (default: a method's cells that differ only in their seed train together as one stacked model where the method can)",
    "grid --engine": "local process pool (default) or Ray (pip install 'bayesprune[ray]')",
    "grid --track": "log each cell (config as params, metrics.json and its pruning curve as metrics, report and plots as artifacts; one run per cell, tagged method, sparsity, seed) and the tables (a parent run) to MLflow as cells finish; a cell logged before is not logged again (pip install 'bayesprune[track]')",
    "grid --track-uri": "the MLflow store --track logs to: a folder or any tracking URI (default: file:OUT/mlruns; read a file store with MLFLOW_ALLOW_FILE_STORE=true set, as MLflow 3 asks)",
}


def build_parser():
    parser = _Parser(prog="bayesprune", description="Bayesian and probabilistic pruning of neural networks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name, handler, *positional):
        sub = commands.add_parser(name, help=HELP[name])
        sub.set_defaults(handler=handler)
        for argument in positional:
            sub.add_argument(argument)
        return sub

    def overrides(sub, help):
        sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)

    run = command("run", _run)
    run.add_argument("config", nargs="?", help=HELP["run config"])
    run.add_argument("--out", help="run directory to create")
    run.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR from its last checkpoint")
    overrides(run, "override a config key, e.g. --set sbnn.pi=0.3 (repeatable)")
    run.add_argument("--data-root", help="directory holding the data (sets data.root)")
    run.add_argument("--force", action="store_true", help="overwrite a non-empty --out directory")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--threads", type=int, help=HELP["run --threads"])
    run.add_argument("--processes", type=int, metavar="N", help=HELP["run --processes"])

    command("report", _report, "run_dir")

    importance = command("importance", _importance, "run_dir")
    importance.add_argument("--top", type=int, default=30, help=HELP["importance --top"])
    importance.add_argument("--force", action="store_true", help="overwrite existing importance files")
    importance.add_argument("--fdr", type=float, default=0.1, help=HELP["importance --fdr"])
    importance.add_argument("--selection", default=None, help=HELP["importance --selection"])
    importance.add_argument("--copies", type=int, default=2, help=HELP["importance --copies"])

    exporting = command("export", _export, "run_dir")
    exporting.add_argument("--out", required=True, help=HELP["export --out"])
    exporting.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE", help=HELP["export --budget"])
    exporting.add_argument("--repeats", type=int, default=30, help="timed forward passes per batch size (default 30)")
    exporting.add_argument("--format", nargs="+", default=["pt2"], help=HELP["export --format"])
    exporting.add_argument("--finetune-epochs", type=int, metavar="N", help=HELP["export --finetune-epochs"])
    exporting.add_argument("--json", action="store_true", help="print the measurements as JSON")
    exporting.add_argument("--force", action="store_true", help="overwrite an existing --out file")

    certify = command("certify", _certify, "run_dir")
    certify.add_argument("--samples", type=int, help=HELP["certify --samples"])
    certify.add_argument("--json", action="store_true", help="print the certificate as JSON")

    comparing = command("compare", _grid)
    comparing.add_argument("config", nargs="?", help=HELP["compare config"])
    comparing.add_argument("--methods", nargs="+", help=HELP["compare --methods"])
    comparing.add_argument("--sparsities", type=float, nargs="+", help=HELP["compare --sparsities"])
    sweeping = command("sweep", _grid)
    sweeping.add_argument("config", nargs="?", help="packaged config name or TOML path")
    sweeping.add_argument("--grid", action="append", metavar="KEY=V1,V2", help=HELP["sweep --grid"])
    for grid in (comparing, sweeping):  # the flags compare and sweep share
        grid.add_argument("--out", help="a new folder for the cells and the tables")
        grid.add_argument("--resume", metavar="DIR", help=HELP["grid --resume"])
        grid.add_argument("--seeds", type=int, nargs="+", help=HELP["grid --seeds"])
        overrides(grid, "override a config key for every cell (repeatable)")
        grid.add_argument("--jobs", type=int, default=1, help="cells fitted at once (local engine; one thread each)")
        grid.add_argument("--alone", action="store_true", help=HELP["grid --alone"])
        grid.add_argument("--engine", choices=["local", "ray"], default="local", help=HELP["grid --engine"])
        grid.add_argument("--address", help="the Ray cluster's address (default: a local Ray for this call)")
        grid.add_argument("--track", choices=["mlflow"], help=HELP["grid --track"])
        grid.add_argument("--track-uri", metavar="URI", help=HELP["grid --track-uri"])
        grid.add_argument("--quiet", action="store_true", help="no progress lines (errors and the summary still)")

    command("list", _list)
    return parser


def main(argv=None):
    exit_without_collection()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a launch of several processes passes on
    previous = {number: signal.signal(number, STOP.request) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.command != "list":  # list reads no tensor (and imports no torch)
            from bayesprune.pipeline.threads import set_threads

            set_threads(getattr(args, "threads", None))
        with warnings_after_success():
            status = args.handler(args)
    except (Interrupted, StopNow) as error:
        print(f"bayesprune: interrupted: {one_line(str(error))}", file=sys.stderr)
        return 128 + error.signal
    except BayesPruneError as error:
        for line in getattr(error, "lines", None) or [str(error)]:  # several refusals (compare): one line each
            print(f"bayesprune: error: {one_line(line)}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:  # a size no check foresaw: one line, never a traceback
        if (message := memory_error(error)) is None:
            raise
        print(f"bayesprune: error: {message}", file=sys.stderr)
        return 2
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        STOP.signal = None
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
