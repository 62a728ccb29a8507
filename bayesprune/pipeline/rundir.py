"""The run directory: refusing an output directory that could lose a user's files, writing a run in a
hidden staging directory under a lock and moving it into place when complete, finding what an
interrupted run left to resume, and loading a saved run back (:func:`load_run`)."""

import fcntl
import glob
import json
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

from bayesprune.core.checkpoint import CHECKPOINT_DIGEST, read_checkpoint, shapes, state_digest, state_mismatch
from bayesprune.core.early_stopping import hold_out
from bayesprune.core.errors import BayesPruneError
from bayesprune.core.files import open_lock
from bayesprune.core.preprocessing import Preprocessing, preprocessing_of
from bayesprune.methods import FitContext, get_method
from bayesprune.models import new_net
from bayesprune.pipeline.checks import check_size, load_datasets
from bayesprune.pipeline.config import first_difference, load_config

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
            raise BayesPruneError(
                f"--out {out}: is not a bayesprune run directory (no config.toml); --force replaces only earlier runs"
            )


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
    saved = read_run_checkpoint(run_dir, config.method)
    dataset = load_datasets(config)[0]
    check_size(config, dataset)
    _check_columns(config, saved, dataset)
    _check_preprocessing(run_dir / CHECKPOINT, saved, dataset)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed, weights=False)
    built, builds = saved.get("built"), shapes(net)
    if built is not None and built != builds:  # config.toml edited after the fit (a wider network, another one)
        name = next(name for name in [*builds, *built] if builds.get(name) != built.get(name))
        raise BayesPruneError(
            f"{run_dir / CHECKPOINT}: was fitted from a network whose {name} has shape {built.get(name)}, "
            f"but config.toml builds {builds.get(name)}"
        )
    structure = saved.get("structure")
    if structure and any(list(param.shape) != structure.get(name) for name, param in net.named_parameters()):
        from bayesprune.core.export import resize

        mismatch = next(name for name, param in net.named_parameters() if list(param.shape) != structure.get(name))
        where = (
            f"{run_dir / CHECKPOINT}: holds {mismatch} of shape {structure.get(mismatch)}, but config.toml builds "
            f"{list(dict(net.named_parameters())[mismatch].shape)}"
        )
        try:  # a fit that removed units saved a smaller network; any other difference is another network's
            if set(structure) != {name for name, _ in net.named_parameters()}:
                raise ValueError("other parameters")
            net = resize(net, structure)
        except ValueError as error:
            raise BayesPruneError(f"{where} ({error})") from None
    if "loop" in saved:
        raise BayesPruneError(
            f"{run_dir / CHECKPOINT}: holds an unfinished fit (stage {saved['metadata'].get('stage')!r}, "
            f"epoch {saved['metadata'].get('epoch')}); finish it with: bayesprune run --resume {run_dir}"
        )
    # the training part the fit saw (without its validation rows), so masked statistics are the run's own
    part = hold_out(dataset, config.train.validation, seed=config.seed)[0] if config.train.validation > 0 else dataset
    calibration = config.prune.calibration(part.x_train, batch_size=config.for_data(part.num_train).data.batch_size)
    ctx = FitContext.from_config(config, dataset, device=torch.device("cpu"), calibration=calibration)
    try:
        fitted = get_method(config.method).restore(net, dataset, config.method_options, ctx, saved["state"])
    except (KeyError, RuntimeError, TypeError, ValueError, IndexError, AttributeError) as error:
        message = " ".join(str(error).split())[:200] or type(error).__name__
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: does not match config.toml ({message})") from None
    problem = state_mismatch(saved["state"], fitted.state_dict())
    if problem:  # load_state_dict casts what it copies: a tampered dtype would pass unnoticed
        raise BayesPruneError(f"{run_dir / CHECKPOINT}: not the state the method {config.method!r} writes ({problem})")
    return config, dataset, fitted


def _check_columns(config, saved: dict, dataset):
    """Refuse a table whose feature columns are not the fit's (recorded in its checkpoint), naming the data
    file and the first column added or gone: the file changed since the run, not the checkpoint."""
    fitted = saved.get("metadata", {}).get("feature_names")
    if not isinstance(fitted, list) or dataset.feature_names is None or list(dataset.feature_names) == fitted:
        return
    now = list(dataset.feature_names)
    added, gone = [c for c in now if c not in fitted], [c for c in fitted if c not in now]
    change = f"column {added[0]!r} added" if added else f"column {gone[0]!r} gone" if gone else "columns reordered"
    option = next((key for key in ("path", "train", "root") if key in config.data.options), None)
    source = "the data" if option is None else f"data.{option}: {config.data.options[option]}"
    raise BayesPruneError(
        f"{source}: {change} since the fit (its feature columns: "
        f"{', '.join(fitted)}); give the run the data it was fitted on"
    )


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
        raise BayesPruneError(
            f"{path}: the fit's data had another {field} than the data config.toml loads now "
            "(the data files changed since the run)"
        )


def read_run_checkpoint(run_dir: Path, method: str) -> dict:
    """``run_dir``'s checkpoint (read weights-only), refused in one line naming it where it is not this run's:
    saved by another method than ``method`` (its ``config.toml``'s), or not the fit its ``metrics.json``
    records (another run's, or edited)."""
    saved = read_checkpoint(run_dir / CHECKPOINT)
    if saved["method"] != method:
        raise BayesPruneError(
            f"{run_dir / CHECKPOINT}: saved by method {saved['method']!r}, but config.toml has {method!r}"
        )
    recorded = _recorded_state_digest(run_dir)
    if recorded is not None and recorded != state_digest(saved["state"]):
        raise BayesPruneError(
            f"{run_dir / CHECKPOINT}: not the fit metrics.json records (one of the two comes from another "
            "run); put the run's own checkpoint back"
        )
    return saved


def _recorded_state_digest(run_dir: Path):
    """The :data:`CHECKPOINT_DIGEST` a run's ``metrics.json`` records, or ``None`` (no metrics.json, or one
    written before the digest was: a metrics.json that cannot be read is the report's to refuse)."""
    try:
        recorded = json.loads((run_dir / "metrics.json").read_text()).get(CHECKPOINT_DIGEST)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return recorded if isinstance(recorded, str) else None


@contextmanager
def out_lock(out: Path):
    """Hold ``out``'s lock (``.<out>.lock`` beside it) for the block: one writer per ``--out``, whether a
    run, a comparison or a sweep; a second is refused in one line while the first holds it. The lock
    dies with its process, so a killed writer never blocks the next. Folders created for the lock are
    removed again when nothing was written to ``out``."""
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
        raise BayesPruneError(
            f"--out {out}: another run is writing it (a run, a comparison or a sweep); wait for it or choose another directory"
        ) from None
    try:
        yield
    finally:
        lock_path.unlink(missing_ok=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        if not out.exists():  # refused or failed before anything was moved there: no empty folders left
            _remove_empty(created)


@contextmanager
def staged(out: Path, *, resumed_from=None, force: bool = False):
    """A fresh hidden staging directory beside ``out`` while holding ``out``'s lock (:func:`out_lock`),
    removed on exit (after a move, nothing is left). A killed run's staging directory is left in place
    and reported (unless it is ``resumed_from``); the next run stages in a new one.

    ``out`` is checked again once the lock is held (:func:`check_output_dir`, under ``force``): a run
    that completed into it while this one was loading its data is refused, never replaced, without ``force``."""
    with out_lock(out):
        check_output_dir(out, force=force)  # what another run wrote there before this one took the lock
        for left in sorted(set(out.parent.glob(f".{glob.escape(out.name)}.*.partial")) - {resumed_from}):
            print(f"bayesprune: note: {left} is left from an interrupted run", file=sys.stderr)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _remove_empty(folders):
    """Remove the folders of ``folders`` (outermost first) that are still empty, innermost first."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            break


def move_into_place(staging: Path, out: Path, *, force: bool = False):
    """Put the finished ``staging`` directory at ``out``, after checking ``out`` once more
    (:func:`check_output_dir`): a directory that is not empty is replaced only under ``force``, and
    only when it is a run."""
    check_output_dir(out, force=force)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)


def resumable(out: Path) -> tuple:
    """``(source, config)`` of the interrupted run of ``out``: the folder holding its newest checkpoint
    (``out`` itself, or a staging directory a killed run left beside it) and its config, refused in one
    line when there is nothing to resume or the config was edited since the fit started."""
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
    for path in _progress_files(source):
        if path.suffix == ".json":
            finished_seed(path, int(path.stem.removeprefix("seed-")) if path.stem[5:].isdigit() else -1)
    checkpoints = [read_checkpoint(path) for path in _progress_files(source) if path.suffix == ".pt"]
    if not (source / SEEDS).is_dir() and not any(
        saved["method"] == config.method and "loop" in saved for saved in checkpoints
    ):
        raise BayesPruneError(
            f"{source / CHECKPOINT}: holds no training-loop state of a {config.method} fit to resume from"
        )
    for saved in checkpoints:
        _refuse_edited(config, saved.get("metadata", {}).get("config"), source / "config.toml")
    return source, config


def finished_seed(path: Path, seed: int) -> dict:
    """The metrics a run of several seeds kept for its finished ``seed`` (``seeds/seed-<seed>.json``), refused
    in one line naming the file when it, or its folder, is a link, or it is not the record a seed's fit
    writes (method, task, seed, test metric and pruning curve): a run's files are read back, never trusted."""
    if path.is_symlink() or path.parent.is_symlink() or not path.is_file():
        raise BayesPruneError(f"{path}: is a link or not a regular file; a run's files are never followed")
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise BayesPruneError(f"{path}: not valid JSON ({' '.join(str(error).split())[:120]})") from None
    if not isinstance(metrics, dict):
        raise BayesPruneError(f"{path}: not a JSON object")
    name = {"classification": "test_error", "regression": "test_rmse"}.get(metrics.get("task"))
    curve = metrics.get("pruning_curve")
    checks = (
        (name is not None, "its 'task' is not classification or regression"),
        (type(metrics.get("seed")) is int and metrics["seed"] == seed, f"its 'seed' is not {seed}"),
        (type(metrics.get(name)) in (int, float), f"its {name!r} is not a number"),
        (isinstance(curve, list) and curve and all(isinstance(row, dict) for row in curve), "no 'pruning_curve' rows"),
    )
    problem = next((why for ok, why in checks if not ok), None)
    if problem is not None:
        raise BayesPruneError(f"{path}: not the record of a finished seed ({problem})")
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
        raise BayesPruneError(
            f"{path}: {key} was edited after the fit started (its checkpoint was made from another "
            f"value); undo the edit, or start a new run"
        )


def _progress_files(folder: Path) -> list:
    """The checkpoints and finished seeds an interrupted run left in ``folder``."""
    return [
        path
        for path in [folder / CHECKPOINT, *folder.glob("checkpoint-seed-*.pt"), *(folder / SEEDS).glob("*.json")]
        if path.is_file()
    ]
