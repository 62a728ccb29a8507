"""A run: config → data → net → ``METHODS[config.method].fit`` → Fitted → pruning curve → run directory.

Nothing here knows a particular method: it reads the :class:`~bayesprune.methods.Fitted` a method
hands over (scores, predictions, metrics, state, posterior draws).

Everything a user can get wrong (config, data, output directory) is checked before anything is
written. The run is written to a hidden staging directory beside ``out`` and moved into place when
complete, so ``out`` is never left half-written; after a divergence only the last good checkpoint
and the config are moved there.
"""
import copy
import fcntl
import glob
import json
import math
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bayesprune.pipeline.evaluation import ERROR_MARGIN, ERROR_MARGIN_KEY, first_sparsity_worse_by, metric_name, pruning_curve
from bayesprune.analysis.inference_data import write_posterior
from bayesprune.pipeline.report import SCORES_DIGEST, write_report
from bayesprune.analysis.tables import write_csv
from bayesprune.models import new_net  # lives in models; also importable as runner.new_net

from bayesprune.pipeline.baseline import least_squares_test_rmse, train_plain
from bayesprune.core.checkpoint import CHECKPOINT_DIGEST, read_checkpoint, save_checkpoint, shapes, state_digest, state_mismatch
from bayesprune.pipeline.config import first_difference, load_config
from bayesprune.data import load_dataset, uci_num_splits
from bayesprune.core.early_stopping import hold_out
from bayesprune.core.preprocessing import Preprocessing, preprocessing_of
from bayesprune.core.normalization import has_running_stats
from bayesprune.core.errors import BayesPruneError, ConfigError, Interrupted, StopNow, TrainingDiverged
from bayesprune.core.files import arrays_digest, open_lock, read_npz, replacing, write_text
from bayesprune.core.loop import check_stop, resolve_device
from bayesprune.core.fused import check_compiler
from bayesprune.methods import FitContext, get_method
from bayesprune.core.validation import MAX_ELEMENTS

CHECKPOINT = "checkpoint.pt"
POSTERIOR = "posterior.nc"
#: The folder of a run of several seeds that keeps each finished seed's metrics.
SEEDS = "seeds"
#: What the run's first fit writes into the run directory.
FIRST_FIT_FILES = (CHECKPOINT, "history.csv", "scores.npz", POSTERIOR)


NAME_MAX = 255


def check_output_dir(out: Path, *, force: bool, inputs=()):
    """Refuse, before any work, an output directory whose replacement could lose a user's files.

    Refused: a symbolic link; the current directory or one above it; a directory that is or holds
    one of ``inputs`` (the config file, the data root); a name too long for its staging directory;
    a file; a non-empty directory without ``force``; and, even with ``force``, a non-empty directory
    that is not a bayesprune run (no ``config.toml``): ``--force`` replaces earlier runs only.
    """
    if out.is_symlink():
        raise BayesPruneError(f"--out {out}: is a symbolic link; give the directory it points to")
    resolved, here = out.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise BayesPruneError(f"--out {out}: is the current directory or one above it; give a new directory")
    for path in inputs:
        held = Path(path).resolve()
        if held == resolved or resolved in held.parents:
            raise BayesPruneError(f"--out {out}: holds the input {path}; give a directory outside it")
    if len(f".{out.name}.12345678.partial".encode()) > NAME_MAX:  # the staging directory's name
        raise BayesPruneError(f"--out {out}: name too long (at most {NAME_MAX - 18} bytes)")
    if out.exists() and not out.is_dir():
        raise BayesPruneError(f"--out {out}: exists and is not a directory")
    blocking = next((parent for parent in out.parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise BayesPruneError(f"--out {out}: {blocking} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise BayesPruneError(f"--out {out}: directory is not empty; pass --force to overwrite it")
        if not (out / "config.toml").is_file():
            raise BayesPruneError(f"--out {out}: is not a bayesprune run directory (no config.toml); "
                                  "--force replaces only earlier runs")


def load_datasets(config) -> list:
    """The dataset of the config, or one per split when ``data.splits`` is set (UCI)."""
    data = config.data
    if data.splits is None:
        return [load_dataset(data.dataset, **data.options)]
    options = {key: value for key, value in data.options.items() if key != "split"}
    first = load_dataset(data.dataset, **options)
    splits = range(uci_num_splits(options["root"], options["name"])) if data.splits == "all" else data.splits
    return [first if split == 0 else load_dataset(data.dataset, **options, split=split) for split in splits]


def load_run(run_dir):
    """Restore a saved run: ``(config, dataset, fitted)`` from its ``config.toml`` and ``checkpoint.pt``.

    ``dataset`` is the run's first split, loaded again from the config (and ``data.root``) on the CPU;
    ``fitted`` is the first chain's :class:`~bayesprune.methods.Fitted`, rebuilt in the structure
    the checkpoint records (a network that shrank while training is rebuilt smaller).
    """
    run_dir = Path(run_dir)
    for name in ("config.toml", CHECKPOINT):
        if not (run_dir / name).is_file():
            raise BayesPruneError(f"{run_dir}: not a run directory (no {name})")
    config = load_config(str(run_dir / "config.toml"))
    if config.experiment.name is not None:
        raise BayesPruneError(f"{run_dir}: an experiment's directory has no single fitted network")
    if config.data.splits is not None:
        first = 0 if config.data.splits == "all" else config.data.splits[0]
        config = replace(config, data=replace(config.data, splits=[first]))
    saved = read_checkpoint(run_dir / CHECKPOINT)
    if saved["method"] != config.method:
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: saved by method {saved['method']!r}, but config.toml has {config.method!r}")
    recorded = _recorded_state_digest(run_dir)
    if recorded is not None and recorded != state_digest(saved["state"]):
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: not the fit metrics.json records (one of the two comes from another "
                              "run); put the run's own checkpoint back")
    dataset = load_datasets(config)[0]
    check_size(config, dataset)
    _check_preprocessing(run_dir / CHECKPOINT, saved, dataset)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    built, builds = saved.get("built"), shapes(net)
    if built is not None and built != builds:  # config.toml edited after the fit (a wider network, another one)
        name = next(name for name in [*builds, *built] if builds.get(name) != built.get(name))
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: was fitted from a network whose {name} has shape {built.get(name)}, "
                              f"but config.toml builds {builds.get(name)}")
    structure = saved.get("structure")
    if structure and any(list(param.shape) != structure.get(name) for name, param in net.named_parameters()):
        from bayesprune.core.export import resize

        mismatch = next(name for name, param in net.named_parameters() if list(param.shape) != structure.get(name))
        where = (f"{run_dir / CHECKPOINT}: holds {mismatch} of shape {structure.get(mismatch)}, but config.toml builds "
                 f"{list(dict(net.named_parameters())[mismatch].shape)}")
        try:  # a fit that removed units saved a smaller network; any other difference is another network's
            if set(structure) != {name for name, _ in net.named_parameters()}:
                raise ValueError("other parameters")
            net = resize(net, structure)
        except ValueError as error:
            raise BayesPruneError(f"{where} ({error})") from None
    if "loop" in saved:
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: holds an unfinished fit (stage {saved['metadata'].get('stage')!r}, "
                              f"epoch {saved['metadata'].get('epoch')}); finish it with: bayesprune run --resume {run_dir}")
    ctx = FitContext.from_config(config, dataset, device=torch.device("cpu"))
    try:
        fitted = get_method(config.method).restore(net, dataset, config.method_options, ctx, saved["state"])
    except (KeyError, RuntimeError, TypeError, ValueError, IndexError, AttributeError) as error:
        message = " ".join(str(error).split())[:200] or type(error).__name__
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: does not match config.toml ({message})") from None
    problem = state_mismatch(saved["state"], fitted.state_dict())
    if problem:  # load_state_dict casts what it copies: a tampered dtype would pass unnoticed
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: not the state the method {config.method!r} writes ({problem})")
    # the training part the fit saw (without its validation rows), so masked statistics are the run's own
    part = hold_out(dataset, config.train.validation, seed=config.seed)[0] if config.train.validation > 0 else dataset
    fitted.calibration = config.prune.calibration(part.x_train, batch_size=config.for_data(part.num_train).data.batch_size)
    return config, dataset, fitted


def _check_preprocessing(path: Path, saved: dict, dataset):
    """Refuse a checkpoint whose stored preprocessing is unusable or is not the one the reloaded data
    have (the data files changed since the fit). A checkpoint written before preprocessing was stored
    has none: the data config's, recomputed on loading, is used."""
    if "preprocessing" not in saved:
        return
    try:
        stored = Preprocessing.from_state(saved["preprocessing"], dataset.input_shape)
    except ValueError as error:
        raise BayesPruneError(f"{path}: {error}") from None
    field = stored.differs_from(preprocessing_of(dataset))
    if field:
        raise BayesPruneError(f"{path}: the fit's data had another {field} than the data config.toml loads now "
                              "(the data files changed since the run)")


def run(config, out, *, force: bool = False, progress: bool = False, inputs=(), resumed_from=None) -> dict:
    """Execute ``config`` and write its run directory ``out``; returns the metrics.

    ``inputs`` are further paths ``out`` must not hold (the config file); the data root is one already.
    ``resumed_from`` is the directory of an interrupted run of ``config`` to continue (:func:`resume_run`).
    """
    out = Path(out)
    files = [config.data.options.get(key) for key in ("root", "path", "train", "test")]  # the data's own files
    check_output_dir(out, force=force, inputs=[*inputs, *(path for path in files if isinstance(path, str))])
    if config.experiment.name is not None:
        return _run_experiment(config, out, progress=progress, force=force)
    method = get_method(config.method)
    refuse_unsupported(config, method, resuming=resumed_from is not None)
    datasets = load_datasets(config)
    check_size(config, datasets[0])
    check_validation(config, datasets)
    net = new_net(config, datasets[0].input_shape, datasets[0].output_dim, seed=config.seed)
    check_network(net, datasets[0])
    check_units(config, net, datasets[0])
    method.check(net, datasets[0], config.method_options)
    check_stop("while loading the data")  # before anything is written
    device = resolve_device(config.device)

    with _staged(out, resumed_from=resumed_from, force=force) as staging:
        (staging / "config.toml").write_text(config.to_toml())
        seeds = config.seeds or [config.seed]
        runs = [_seed_run(replace(config, seed=seed), method, datasets, device, staging, out, first=number == 0,
                          several=len(seeds) > 1, progress=progress, resumed_from=resumed_from)
                for number, seed in enumerate(seeds)]
        per_seed = [metrics for metrics, _ in runs]
        before = set(staging.iterdir())
        try:  # a signal while writing the run's files stops it as in training: the checkpoint kept, resumable
            metrics = _with_reference(config, _summarise_seeds(per_seed, config.seeds) if len(runs) > 1 else per_seed[0])
            metrics[SCORES_DIGEST] = arrays_digest(read_npz(staging / "scores.npz"))
            metrics[CHECKPOINT_DIGEST] = _final_state_digest(staging, [final for _, final in runs if final is not None])
            _write_metrics(staging / "metrics.json", metrics)
            write_csv(staging / "pruning_curve.csv", metrics["pruning_curve"], digits=6)
            write_report(staging)
            check_stop("while writing the report")
        except (Interrupted, StopNow) as error:
            for path in set(staging.iterdir()) - before:  # nothing of a report without its run
                path.unlink()
            raise _stopped(error, staging, out, CHECKPOINT) from None
        for _, final in runs:  # the training-loop checkpoint is replaced last, once nothing stops the run
            if final is not None:
                _write_final_checkpoint(staging, *final)
        _move_into_place(staging, out, force=force)
    return metrics


def _seed_run(config, method, datasets, device, staging: Path, out: Path, *, first: bool, several: bool, progress: bool,
              resumed_from=None) -> tuple:
    """The metrics of one seed of the run (``config.seed``), and the fit whose final checkpoint is
    still to write (:func:`_fit_splits`), or ``None``.

    Its first fit checkpoints into ``staging`` (``checkpoint.pt`` for the run's first seed, which keeps
    its fit there; ``checkpoint-seed-<seed>.pt`` for later seeds, removed once they finish). In a run
    of several seeds, a finished seed's metrics are kept in ``seeds/seed-<seed>.json``; resuming from
    ``resumed_from`` takes a finished seed from there (and the first seed's files) instead of fitting
    it again, and continues an unfinished one from its checkpoint.
    """
    record = Path(SEEDS) / f"seed-{config.seed}.json"
    checkpoint = CHECKPOINT if first else f"checkpoint-seed-{config.seed}.pt"
    if resumed_from is not None and (resumed_from / record).is_file():
        (staging / SEEDS).mkdir(exist_ok=True)
        for name in [str(record), *(FIRST_FIT_FILES if first else ())]:
            if (resumed_from / name).is_file():
                shutil.copyfile(resumed_from / name, staging / name)
        return json.loads((resumed_from / record).read_text()), None
    resume = None
    if resumed_from is not None and (resumed_from / checkpoint).is_file():
        saved = read_checkpoint(resumed_from / checkpoint)
        resume = saved if "loop" in saved and saved["method"] == config.method else None
    metrics, final = _fit_splits(config, method, datasets, device, staging, out, first=first, progress=progress,
                                 checkpoint=staging / checkpoint, resume=resume)
    if several:
        if final is not None:  # a finished seed is taken as it is on --resume: its checkpoint first
            _write_final_checkpoint(staging, *final)
            final = None
        (staging / SEEDS).mkdir(exist_ok=True)
        _write_metrics(staging / record, metrics)
        if not first:
            (staging / checkpoint).unlink(missing_ok=True)
    return metrics, final


def _fit_splits(config, method, datasets, device, staging: Path, out: Path, *, first: bool, progress: bool,
                checkpoint: Path, resume=None) -> tuple:
    """Fit and evaluate every split from ``config.seed``; the first fit checkpoints to ``checkpoint``
    (continuing from ``resume``, a checkpoint of that fit, when given), and the run's first writes its
    fit into ``staging``. Returns the metrics and, for the run's first fit, ``(fitted, built, preprocessing)`` for
    :func:`_write_final_checkpoint` (else ``None``): its training-loop checkpoint stays in ``staging``
    until then, so that a run stopped while writing its files resumes from it."""
    per_split, final = [], None
    chains = run_chains(config, datasets[0])
    # A signal while fitting, evaluating (the plain baseline, a certificate) or writing the fit's files keeps its checkpoint.
    try:
        for index, dataset in enumerate(datasets):
            fits = []
            validation = None
            if config.train.validation > 0:
                dataset, *validation = hold_out(dataset, config.train.validation, seed=config.seed + index)
            split_config = config.for_data(dataset.num_train)
            for chain in range(chains if index == 0 else 1):
                seed = config.seed + index + chain
                net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
                baseline_net = copy.deepcopy(net) if chain == 0 else None
                ctx = FitContext.from_config(
                    config, dataset, device=device, seed=seed, progress=progress,
                    validation=None if validation is None else tuple(validation),
                    checkpoint=checkpoint if index == chain == 0 else None,
                    resume=resume if index == chain == 0 else None,
                )
                fitted = method.fit(net, dataset, config.method_options, ctx)
                fitted.calibration = config.prune.calibration(dataset.x_train, batch_size=split_config.data.batch_size)
                if chain == 0:
                    built = shapes(baseline_net)
                    per_split.append({**_evaluate(split_config, dataset, fitted, device, baseline_net, validation, ctx.best_epoch),
                                      **training_cost(ctx)})
                fits.append(fitted)
            if first and index == 0:
                _write_fit(staging, fits[0])
                idata = method.inference_data(fits, dataset, seed=config.seed)
                check_stop("while drawing the posterior")
                if idata is not None:
                    write_posterior(idata, staging / POSTERIOR, method=config.method)
                check_stop("while writing the posterior")
                final = (fits[0], built, preprocessing_of(dataset))
    except (TrainingDiverged, Interrupted, StopNow) as error:
        raise _stopped(error, staging, out, checkpoint.name) from None
    return {**_summarise(per_split), "chains": chains}, final


def resume_run(out, *, progress: bool = False) -> dict:
    """Continue the interrupted run of ``out`` from its last completed epoch, and write the complete
    run there.

    The checkpoint is the newest of ``out``'s own (left by SIGINT, SIGTERM or a divergence) and those
    of staging directories a killed run (SIGKILL, power loss) left beside it; a staging directory
    resumed from is removed once the run is complete. The minibatch order, random draws and
    optimiser state continue where they stopped, so on the same device the metrics equal an
    uninterrupted run's (training time aside). Seeds a run of several seeds had finished are taken as
    they are; other splits and chains of the seed in progress are fitted again from their seeds.
    """
    out = Path(out)
    if (out / "metrics.json").exists():
        raise BayesPruneError(f"--resume {out}: the run is complete (it has metrics.json); nothing to resume")
    candidates = [out, *out.parent.glob(f".{glob.escape(out.name)}.*.partial")]
    candidates = [path for path in candidates if (path / "config.toml").is_file() and _progress_files(path)]
    if not candidates:
        missing = next(name for name in ("config.toml", CHECKPOINT) if not (out / name).is_file())
        raise BayesPruneError(f"--resume {out}: no {missing}; nothing to resume")
    source = max(candidates, key=lambda path: max(file.stat().st_mtime for file in _progress_files(path)))
    config = load_config(str(source / "config.toml"))
    if config.experiment.name is not None:
        raise BayesPruneError(f"--resume {out}: {config.experiment.name} runs do not resume; run them again")
    checkpoints = [read_checkpoint(path) for path in _progress_files(source) if path.suffix == ".pt"]
    if not (source / SEEDS).is_dir() and not any(saved["method"] == config.method and "loop" in saved for saved in checkpoints):
        raise BayesPruneError(f"{source / CHECKPOINT}: holds no training-loop state of a {config.method} fit to resume from")
    for saved in checkpoints:
        _refuse_edited(config, saved.get("metadata", {}).get("config"), source / "config.toml")
    metrics = run(config, out, force=True, progress=progress, resumed_from=source)
    if source != out:
        shutil.rmtree(source)
    return metrics


def _refuse_edited(config, fitted, path: Path):
    """Refuse to resume a fit whose checkpoint was made from another config (``fitted``, TOML layout, as
    the checkpoint keeps it; ``None`` in checkpoints of earlier versions) than ``path`` now holds:
    continuing it would mix two configs (another prior, learning rate, seed or data) in one run."""
    if not isinstance(fitted, dict):
        return
    wanted = config.to_dict()
    if config.seeds and fitted.get("seed") in config.seeds:  # a run of several seeds checkpoints the seed in progress
        wanted["seed"] = fitted["seed"]
    key = first_difference(fitted, wanted)
    if key is not None:
        raise BayesPruneError(f"{path}: {key} was edited after the fit started (its checkpoint was made from another "
                              f"value); undo the edit, or start a new run")


def _progress_files(folder: Path) -> list:
    """The checkpoints and finished seeds an interrupted run left in ``folder``."""
    return [path for path in [folder / CHECKPOINT, *folder.glob("checkpoint-seed-*.pt"), *(folder / SEEDS).glob("*.json")]
            if path.is_file()]


def _run_experiment(config, out: Path, *, progress: bool, force: bool = False) -> dict:
    from bayesprune.pipeline.experiments import get_experiment  # finds the studies by name

    experiment = get_experiment(config)
    experiment.check(config)
    with _staged(out, force=force) as staging:
        (staging / "config.toml").write_text(config.to_toml())
        metrics = experiment.run(config, staging, device=resolve_device(config.device), progress=progress)
        _write_metrics(staging / "metrics.json", metrics)
        _move_into_place(staging, out, force=force)
    return metrics


@contextmanager
def _staged(out: Path, *, resumed_from=None, force: bool = False):
    """A fresh hidden staging directory beside ``out`` while holding ``out``'s lock, removed on exit
    (after a move, nothing is left). A second run into the same ``out`` is refused while the first
    holds the lock; the lock dies with its process, so a killed run never blocks the next one, whose
    staging directory is new and leaves the old one (reported, unless it is ``resumed_from``) in place.

    ``out`` is checked again once the lock is held (:func:`check_output_dir`, under ``force``): a run
    that completed into it while this one was loading its data is refused, never replaced, without ``force``."""
    created = [parent for parent in reversed(out.parents) if not parent.exists()]  # outermost first
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    try:
        lock = open_lock(lock_path)
    except BayesPruneError:
        _remove_empty(created)
        raise
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise BayesPruneError(f"--out {out}: another run is writing it; wait for it or choose another directory") from None
    try:
        check_output_dir(out, force=force)  # what another run wrote there before this one took the lock
    except BayesPruneError:
        lock_path.unlink(missing_ok=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        _remove_empty(created)
        raise
    for left in sorted(set(out.parent.glob(f".{glob.escape(out.name)}.*.partial")) - {resumed_from}):
        print(f"bayesprune: note: {left} is left from an interrupted run", file=sys.stderr)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock_path.unlink(missing_ok=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        if not out.exists():  # refused or failed before anything was moved there: no empty folders left
            _remove_empty(created)


def _remove_empty(folders):
    """Remove the folders of ``folders`` (outermost first) that are still empty, innermost first."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            break


def check_size(config, data):
    """Refuse, before allocating it, a network of more than :data:`~bayesprune.core.validation.MAX_ELEMENTS`
    (2**31) parameters, 8 GiB of float32 weights before any optimiser state or posterior, or ``chains``
    of them above it together: it is built on PyTorch's ``meta`` device (shapes only, no memory) and
    its parameters counted."""
    try:
        with torch.device("meta"):
            net = new_net(config, data.input_shape, data.output_dim, seed=config.seed)
        count = sum(param.numel() for param in net.parameters())
    except Exception:  # noqa: BLE001 - a network that does not build on meta is built (and checked) for real
        return
    if count > MAX_ELEMENTS:
        raise ConfigError(f"model: the network has {count:,} parameters, more than the {MAX_ELEMENTS:,} (2**31) "
                          "bayesprune accepts; make model.hidden (or the architecture) smaller")
    chains = run_chains(config, data)
    if count * chains > MAX_ELEMENTS:  # the run holds every chain's fit until it writes the posterior
        raise ConfigError(f"chains: {chains:,} fits of {count:,} parameters hold more than the {MAX_ELEMENTS:,} (2**31) "
                          "bayesprune accepts; ask for fewer chains")


#: Loaders of the user's own tables, whose runs pool ``Method.table_chains`` restarts under ``chains = "auto"``.
TABLE_LOADERS = ("csv", "npz")


def run_chains(config, data) -> int:
    """The run's number of chains: ``config.chains``, or for ``"auto"`` the method's ``table_chains``
    (restarts its feature importance pools) when ``data`` is the user's own table of 1-D inputs, else 1."""
    if config.chains != "auto":
        return config.chains
    table = config.data.dataset in TABLE_LOADERS and len(data.input_shape) == 1
    return getattr(get_method(config.method), "table_chains", 1) if table else 1


def check_validation(config, datasets):
    """Refuse a ``train.validation`` fraction that would leave no training example of a split."""
    fraction = config.train.validation
    for dataset in datasets if fraction > 0 else ():
        if max(1, round(fraction * dataset.num_train)) >= dataset.num_train:
            raise ConfigError(f"train.validation = {fraction} leaves no training example of {dataset.num_train}")


def check_units(config, net, data):
    """Refuse unit-level pruning (``prune.level = "unit"``, and every method that gates units) of a
    network without hidden units (``model.hidden = []``): there is nothing it could remove."""
    if config.prune.level != "unit":
        return
    from bayesprune.core.structure import unit_groups

    try:
        groups = unit_groups(net, data.input_shape)
    except Exception:  # noqa: BLE001 - a network the graph cannot trace is the method's check to refuse
        return
    if not groups:
        raise ConfigError("prune.level = 'unit': the network has no hidden units to remove (model.hidden = [] or "
                          "an architecture without hidden layers)")


def check_network(net, data):
    """Refuse, before anything is written, a network that does not map two of the data's inputs to
    outputs of the width the data need (``num_classes``, or 1 for regression), or one without a layer to
    prune (a Linear, bilinear or convolution layer)."""
    from bayesprune.core.sites import PRUNABLE

    if not any(isinstance(module, PRUNABLE) for module in net.modules()):
        raise ConfigError("model: the network has no Linear or convolution layer; bayesprune prunes their weights")
    net.eval()
    try:
        with torch.no_grad():
            output = net(data.x_train[:2])
    except Exception as error:  # the user's network, whatever it raises
        message = " ".join(str(error).split())[:200]
        raise ConfigError(f"model: the network does not take inputs of shape {list(data.input_shape)} "
                          f"({type(error).__name__}: {message})") from None
    if not torch.is_tensor(output) or tuple(output.shape) != (2, data.output_dim):
        shape = list(output.shape[1:]) if torch.is_tensor(output) else type(output).__name__
        raise ConfigError(f"model: the network's output per example is {shape}; the data need [{data.output_dim}]")


def refuse_unsupported(config, method, *, resuming: bool = False):
    """Refuse, before anything is written, a config that asks ``method`` for a service or sets a key it
    does not use (:attr:`~bayesprune.methods.Method.unsupported`), in one line naming the key."""
    if config.prune.level not in method.prune_levels:
        raise ConfigError(f"prune.level must be one of {list(method.prune_levels)} for method {method.name!r}, "
                          f"got {config.prune.level!r}")
    services = {"validation": ("train.validation", config.train.validation > 0),
                "checkpoint": ("train.checkpoint_every", config.train.checkpoint_every != 1),
                "resume": ("--resume", resuming)}
    for name, why in method.unsupported_for(config.method_options).items():
        key, asked = services[name] if name in services else (name, _set(config, name))
        if asked:
            raise ConfigError(f"{key} is not supported by method {method.name!r}: {why}")
    if config.train.kernels == "compiled":
        check_compiler(resolve_device(config.device))


def _set(config, key: str) -> bool:
    """Whether ``key`` (``"optim.momentum"``) holds another value than its section's default."""
    section, field = key.split(".")
    values = getattr(config, section)
    return getattr(values, field) != getattr(type(values)(), field)


def training_cost(ctx) -> dict:
    """The fit's training over all its stages: ``train_epochs`` and ``train_steps`` (optimiser steps), so
    that fits of methods with several stages compare by what they cost (``compare``'s leaderboard)."""
    histories = [stage["history"] for stage in ctx._finished]  # noqa: SLF001 - the stages the context ran
    return {"train_epochs": sum(len(history["epoch_losses"]) for history in histories),
            "train_steps": sum(len(history["step_losses"]) for history in histories)}


def _evaluate(config, dataset, fitted, device, baseline_net, validation=None, best_epoch=None) -> dict:
    name = metric_name(dataset.task)
    curve = pruning_curve(fitted, dataset, droprates=sorted({0.0, *config.prune.droprates}), device=device,
                          budget=config.prune.budget, include_biases=config.prune.include_biases)
    metrics = {
        "method": config.method,
        "dataset": dataset.name,
        "task": dataset.task,
        "device": str(device),
        "architecture": config.model.name,
        "n_weights": sum(shape.numel() for shape in fitted.sites.values()),
        "epochs": len(fitted.history.epoch_losses),
        **({} if validation is None else {"n_validation": len(validation[1])}),
        **({} if best_epoch is None else {"best_epoch": best_epoch}),
        "seed": config.seed,
        "train_seconds": round(fitted.seconds, 3),
        "score": fitted.score_name,
        # for a network with batch norms: whether the curve's masked networks had statistics of their own
        **({"recalibrated_statistics": fitted.calibration is not None} if has_running_stats(fitted.net) else {}),
        **{key: value for key, value in curve[0].items() if key.startswith(name)},
        **fitted.metrics(),
        "pruning_curve": curve,
    }
    if config.baseline.enabled:  # a diverged plain network is reported, not allowed to sink the run
        try:
            plain = train_plain(
                baseline_net.to(device), dataset,
                epochs=config.baseline.epochs or config.train.epochs, lr=config.baseline.lr or config.optim.lr,
                batch_size=config.data.batch_size, seed=config.seed, validation=validation, patience=config.train.patience,
                hold=config.baseline.held_out,
            )
            metrics[f"baseline_{name}"] = plain.pop("test")
            metrics.update({f"baseline_{key}": value for key, value in plain.items()})  # its epoch and validation curve
        except TrainingDiverged as error:
            metrics[f"baseline_{name}"], metrics["baseline_diverged"] = None, str(error)
        if dataset.task == "regression":
            metrics[f"baseline_linear_{name}"] = least_squares_test_rmse(dataset)
    return metrics


def _write_metrics(path: Path, metrics: dict):
    """``metrics.json`` as strict JSON: a NaN or infinite number (a mean over a diverged baseline)
    is written as null."""
    def strict(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: strict(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(item) for item in value]
        return value

    write_text(path, json.dumps(strict(metrics), indent=2, allow_nan=False) + "\n")


def _with_reference(config, metrics: dict) -> dict:
    """``metrics`` with, for classification, the sparsity at which the test error is first
    ``ERROR_MARGIN`` points above the full model's (null if never), and the ``[reference]`` numbers
    of this data set under ``reference``."""
    if metrics["task"] == "classification":
        metrics[ERROR_MARGIN_KEY] = first_sparsity_worse_by(metrics["pruning_curve"], "test_error", ERROR_MARGIN)
    rows = config.reference.rows(config.data.options.get("name"))
    if rows:
        metrics["reference"] = {"source": config.reference.source, "rows": rows}
    return metrics


def _mean_and_stderr(values):
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std() / np.sqrt(values.size))


_PER_RUN = ("method", "dataset", "task", "device", "architecture", "n_weights", "epochs", "seed", "score")


def _summarise(per_split: list) -> dict:
    """One split's metrics as they are; several splits as mean and standard error (std / sqrt(n)) of
    every numeric metric, training time summed."""
    if len(per_split) == 1:
        return per_split[0]
    first = per_split[0]
    name = metric_name(first["task"])
    metrics = {key: value for key, value in first.items() if key != "pruning_curve"}
    metrics["splits"] = len(per_split)
    metrics["train_seconds"] = round(sum(m["train_seconds"] for m in per_split), 3)
    for key, value in first.items():
        if key not in _PER_RUN and key != "train_seconds" and isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[key], stderr = _mean_and_stderr([m[key] for m in per_split])
            metrics[f"{key}_mean"], metrics[f"{key}_stderr"] = metrics[key], stderr
    curve = []
    for rows in zip(*(m["pruning_curve"] for m in per_split)):
        row = {key: rows[0][key] for key in ("droprate", "n_weights_kept", "sparsity", "sparsity_weights")}
        for key in rows[0]:
            if key.startswith(name):
                row[key], row[f"{key}_stderr"] = _mean_and_stderr([r[key] for r in rows])
        curve.append(row)
    metrics["pruning_curve"] = curve
    metrics["per_split"] = [{key: m[key] for key in m if key.startswith(name)} for m in per_split]
    return metrics


def _stopped(error, staging: Path, out: Path, checkpoint: str):
    """The error of a fit that diverged or was interrupted, after keeping what can be kept: its last
    checkpoint (named ``checkpoint``) and the seeds already finished move to ``out`` unless ``out``
    holds a complete earlier run, which is never replaced."""
    if (out / "metrics.json").exists():
        where = f"{out} keeps the earlier complete run"
    elif (staging / checkpoint).exists():
        metadata = read_checkpoint(staging / checkpoint)["metadata"]
        stage = f"stage {metadata['stage']!r}, " if metadata.get("stage") else ""
        _move_into_place(staging, out, force=True)  # an interrupted run's files only: the complete run is kept above
        where = f"the checkpoint of {stage}epoch {metadata.get('epoch')} is in {out / checkpoint}"
        if isinstance(error, (Interrupted, StopNow)) and ("loop" in read_checkpoint(out / checkpoint) or (out / SEEDS).is_dir()):
            where += f"; continue with: bayesprune run --resume {out}"
    elif (staging / SEEDS).is_dir():
        _move_into_place(staging, out, force=True)
        where = f"the finished seeds are in {out / SEEDS}"
        if isinstance(error, (Interrupted, StopNow)):
            where += f"; continue with: bayesprune run --resume {out}"
    else:
        where = "no checkpoint was written"
    message = f"{error}; {where}"
    return Interrupted(message, error.signal) if isinstance(error, (Interrupted, StopNow)) else TrainingDiverged(message)


def _summarise_seeds(runs: list, seeds) -> dict:
    """Runs repeated from several seeds: every number, every list of numbers (elementwise) and every
    point of the pruning curve as its mean (under its own name) and standard deviation (``_std``)."""
    first = runs[0]

    def numeric(value):
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def numeric_list(key):
        values = [run.get(key) for run in runs]
        return all(isinstance(v, list) and v and all(numeric(x) for x in v) and len(v) == len(values[0]) for v in values)

    metrics = dict(first)
    for key, value in first.items():
        if key in _PER_RUN or key.endswith("_stderr") or key.endswith("_mean"):
            continue
        if numeric(value) and all(numeric(run.get(key)) for run in runs):
            values = np.array([run[key] for run in runs], dtype=float)
            metrics[key], metrics[f"{key}_std"] = float(values.mean()), float(values.std(ddof=1))
        elif key != "pruning_curve" and numeric_list(key):
            values = np.array([run[key] for run in runs], dtype=float)
            metrics[key], metrics[f"{key}_std"] = values.mean(0).tolist(), values.std(0, ddof=1).tolist()
    curve = []
    for rows in zip(*(run["pruning_curve"] for run in runs)):
        row = dict(rows[0])
        for key in rows[0]:
            if key.startswith(metric_name(first["task"])) and not key.endswith("_stderr"):
                values = np.array([r[key] for r in rows], dtype=float)
                row[key], row[f"{key}_std"] = float(values.mean()), float(values.std(ddof=1))
        curve.append(row)
    metrics["pruning_curve"] = curve
    metrics["seeds"] = list(seeds)
    metrics["per_seed"] = [{key: run[key] for key in run if not isinstance(run[key], (list, dict))} for run in runs]
    return metrics


def _write_fit(folder: Path, fitted):
    """``history.csv`` (training loss per epoch) and ``scores.npz`` (the score of every site)."""
    losses = fitted.history.epoch_losses
    write_csv(folder / "history.csv", [{"epoch": epoch + 1, "loss": f"{loss:.8g}"} for epoch, loss in enumerate(losses)])
    with replacing(folder / "scores.npz") as temporary:
        np.savez(temporary, **{name: score.cpu().numpy() for name, score in fitted.scores().items()})


def _final_state_digest(staging: Path, finals: list) -> str:
    """:func:`state_digest` of the checkpoint the run ends with: the last fit still to write, or the one
    already written in ``staging`` (a run of several seeds writes each as it finishes)."""
    state = finals[-1][0].state_dict() if finals else read_checkpoint(staging / CHECKPOINT)["state"]
    return state_digest(state)


def _recorded_state_digest(run_dir: Path):
    """The :data:`CHECKPOINT_DIGEST` a run's ``metrics.json`` records, or ``None`` (no metrics.json, or one
    written before the digest was: a metrics.json that cannot be read is the report's to refuse)."""
    try:
        recorded = json.loads((run_dir / "metrics.json").read_text()).get(CHECKPOINT_DIGEST)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return recorded if isinstance(recorded, str) else None


def _write_final_checkpoint(folder: Path, fitted, built: dict, preprocessing):
    """The fit's final checkpoint (early stopping may have put an earlier epoch back), in place of its
    training-loop checkpoint: its network's structure, ``built`` (the shapes the config built) and the
    data's ``preprocessing``, which :func:`load_run` checks the reloaded data against."""
    save_checkpoint(folder / CHECKPOINT, fitted, metadata={"epoch": len(fitted.history.epoch_losses)}, built=built,
                    preprocessing=preprocessing)


def _move_into_place(staging: Path, out: Path, *, force: bool = False):
    """Put the finished ``staging`` directory at ``out``, after checking ``out`` once more
    (:func:`check_output_dir`): a directory that is not empty is replaced only under ``force``, and
    only when it is a run."""
    check_output_dir(out, force=force)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
