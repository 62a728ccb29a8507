"""A cell: one fit of a comparison or a sweep, an ordinary run (:func:`bayesprune.pipeline.runner.run`) of a
registered method, written as its own run directory.

A cell is plain data (a name, the raw config it runs, the rows it gives), so that any engine can ship it
to a worker; :func:`execute` is the one function a worker calls. A finished cell (``metrics.json``
present) is read back, never fitted again; one asked for sparsities it was not evaluated at is evaluated
there from its saved fit (:func:`bayesprune.pipeline.runner.extend_curve`).
"""

import copy
import glob
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.loop import check_stop
from bayesprune.core.tasks import metric_name
from bayesprune.pipeline.config import first_difference


@dataclass(frozen=True)
class Cell:
    """One fit of a grid.

    Attributes:
        name: its directory under ``<out>/cells``.
        config: the raw config (TOML layout) it runs; validated by :meth:`run_config`.
        method: the registered method it runs.
        seed: its seed.
        label: the leaderboard rows' name (default the method's; ``<method>-<value>`` for a variant).
        sparsity: the sparsity the method was asked for, or ``None`` for a method whose fit does not
            read one (it is evaluated at every sparsity of ``sparsities``).
        sparsities: where a fit that reads no sparsity is pruned, one row each (its config's sparsities).
        as_fitted: its rows are the network as its method left it (sparsity 0): a method that removes
            units in its fit, at its sparsity or at the width it learned.
        point: the grid point of a sweep cell (key → value).
        certifies: the rows whose ``bound`` this cell's certificate fills (``compare.certify``).
        row: whether the cell gives leaderboard rows of its own (a certificate-only cell does not).
        case: the comparison case it belongs to (``compare.cases``; ``""``: none).
    """

    name: str
    config: dict
    method: str
    seed: int
    label: str = ""
    sparsity: float | None = None
    sparsities: tuple = ()
    as_fitted: bool = False
    point: dict = field(default_factory=dict)
    certifies: tuple = ()
    row: bool = True
    case: str = ""

    def __post_init__(self):
        if not self.label:
            object.__setattr__(self, "label", self.method)

    def run_config(self):
        """The cell's validated :class:`~bayesprune.pipeline.config.RunConfig`."""
        from bayesprune.pipeline.config import RunConfig

        return RunConfig.from_dict(copy.deepcopy(self.config))

    def entries(self) -> list:
        """``(target sparsity, curve point)`` of each leaderboard row: its target, and the sparsity of the point of
        its pruning curve the row reads (0: the network as fitted; a target of ``None``: the width it learned)."""
        if self.as_fitted:
            return [(self.sparsity, 0.0)]
        targets = [self.sparsity] if self.sparsity is not None else list(self.sparsities)
        return [(target, target) for target in targets] if targets else [(None, 0.0)]


def finished(folder: Path) -> bool:
    return (Path(folder) / "metrics.json").is_file()


def read_json(path: Path, *, keys=()) -> dict:
    """The JSON object in ``path``, refusing in one line naming the file one that is a link, does not
    parse, is not an object or lacks one of ``keys``: a cell's files are read back on ``--resume``,
    never trusted."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise BayesPruneError(f"{path}: is not a regular file")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise BayesPruneError(f"{path}: not valid JSON ({' '.join(str(error).split())[:120]})") from None
    if not isinstance(value, dict):
        raise BayesPruneError(f"{path}: holds {type(value).__name__}, not a JSON object")
    missing = next((key for key in keys if key not in value), None)
    if missing is not None:
        raise BayesPruneError(f"{path}: has no {missing!r}")
    return value


def check_folder(cell: Cell, folder: Path):
    """Refuse a cell folder that is a link or a file, or a finished cell whose files do not read back
    as this cell's (tampered, another fit): one line naming the file, before anything is fitted."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise BayesPruneError(f"{folder}: is not a directory (a link or a file); a cell folder is never followed")
    why = stale(cell, folder)
    if why:
        raise BayesPruneError(f"{folder}: holds another fit than this config asks ({why}); give a new --out")
    if finished(folder) and missing_sparsities(cell, check_metrics(cell, folder / "metrics.json")):
        from bayesprune.pipeline.rundir import read_run_checkpoint

        read_run_checkpoint(folder, cell.run_config().method)  # its saved fit, evaluated again: read before any fit


def check_metrics(cell: Cell, path: Path) -> dict:
    """A finished cell's ``metrics.json``, refused naming the file where it lacks what the tables read."""
    metrics = read_json(path, keys=("task",))
    name = metric_name(metrics["task"])
    for key in ("train_seconds", *((name,) if cell.as_fitted or not cell.sparsities else ())):
        if not _number(metrics.get(key)) and metrics.get(key, 0) is not None:
            raise BayesPruneError(f"{path}: {key!r} is not a number")
    table = metrics.get("pruning_curve")
    if not isinstance(table, list) or not all(isinstance(row, dict) for row in table):
        raise BayesPruneError(f"{path}: 'pruning_curve' is not a list of rows")
    for row in table:
        for key in ("droprate", curve_metric(cell, name)):
            if not _number(row.get(key)) and row.get(key, 0) is not None:
                raise BayesPruneError(f"{path}: a row of 'pruning_curve' has no number {key!r}")
    held = {round(row["droprate"], 6) for row in table}
    if cell.sparsity is not None and not cell.as_fitted and round(cell.sparsity, 6) not in held:
        raise BayesPruneError(f"{path}: has no row at the cell's sparsity {cell.sparsity:g}")
    missing = missing_sparsities(cell, metrics)
    if missing and ("per_split" in metrics or "per_seed" in metrics):
        raise BayesPruneError(
            f"{path}: the finished cell {cell.name} (several splits or seeds) was not evaluated at "
            f"sparsity {missing[0]:g}; give that sparsity in a new --out"
        )
    return metrics


def curve_metric(cell: Cell, name: str) -> str:
    """The column of a cell's pruning curve its leaderboard rows report: ``<name>_finetuned`` where its
    config fine-tunes each pruned network (``prune.finetune_epochs``), else ``name``."""
    return f"{name}_finetuned" if cell.run_config().prune.finetune_epochs else name


def missing_sparsities(cell: Cell, metrics: dict) -> list:
    """The sparsities a finished cell evaluated at every sparsity (magnitude, sBNN, Sparse VD) was not
    evaluated at: ``--resume`` with more ``--sparsities`` evaluates it there, never fitting it again."""
    if cell.sparsity is not None or cell.as_fitted:
        return []
    held = {round(row["droprate"], 6) for row in metrics["pruning_curve"]}
    return [sparsity for sparsity in cell.sparsities if round(sparsity, 6) not in held]


def complete(cell: Cell, folder: Path) -> bool:
    """Whether the cell is finished and evaluated at every sparsity it is asked for."""
    return finished(folder) and not missing_sparsities(cell, json.loads((Path(folder) / "metrics.json").read_text()))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def stale(cell: Cell, folder: Path) -> str | None:
    """Why the existing ``folder`` holds another fit than ``cell`` (``None`` when it is the same or empty).

    A finished cell is reused as it is, so a folder left by another config must not pass for it."""
    from bayesprune.pipeline.config import load_config

    folder = Path(folder)
    if not folder.exists() or not any(folder.iterdir()):
        return None
    if not (folder / "config.toml").exists():
        return None if not finished(folder) else "no config.toml"
    if (folder / "config.toml").is_symlink():
        return "its config.toml is a link"
    try:
        held = load_config(str(folder / "config.toml")).to_dict()
    except BayesPruneError as error:
        return f"its config.toml does not load ({error})"
    wanted = cell.run_config().to_dict()
    if cell.sparsity is None and cell.sparsities:  # evaluated at every sparsity: which ones does not change the fit
        held, wanted = (_without(config, "prune.sparsities") for config in (held, wanted))
    key = first_difference(held, wanted)
    return None if key is None else f"its config.toml differs at {key}"


def _without(config: dict, key: str) -> dict:
    """``config`` without the dotted ``key``."""
    config = copy.deepcopy(config)
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict):
        node.pop(last, None)
    return config


def refusal(cell: Cell, datasets: dict) -> str | None:
    """Why the cell would be refused before its fit (``None``: it would not): the checks
    :func:`bayesprune.pipeline.runner.run` makes before fitting (:func:`~bayesprune.pipeline.checks.check_before_fit`),
    so that a grid refuses every such cell before fitting any. ``datasets`` caches the data by its config."""
    from bayesprune.pipeline.checks import check_before_fit, load_datasets

    try:
        config = cell.run_config()
        key = repr(config.data)
        if key not in datasets:
            datasets[key] = load_datasets(config)
        check_before_fit(config, datasets=datasets[key])
    except BayesPruneError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - the user's network factory, whatever it raises
        return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    return None


def execute(cell: Cell, folder: str, threads: int = 1) -> dict:
    """Fit ``cell`` into ``folder`` (or read it back when finished) and return its metrics; what a
    worker of any engine runs, with ``threads`` torch threads. A worker signalled while it started stops
    here, before the cell's imports, data and network (seconds each)."""
    check_stop("before the cell started")
    folder = Path(folder)
    torch.set_num_threads(threads)
    from bayesprune.core.errors import Interrupted
    from bayesprune.pipeline.runner import extend_curve, resume_run, run

    if finished(folder):
        metrics = json.loads((folder / "metrics.json").read_text())
        missing = missing_sparsities(cell, metrics)
        return extend_curve(folder, missing) if missing else metrics
    if _attempted(cell, folder):
        try:
            return resume_run(folder)
        except Interrupted:
            raise
        except BayesPruneError:
            pass
    # force: what an earlier attempt left here (a checkpoint that does not resume) is replaced.
    return run(cell.run_config(), folder, force=True)


def _attempted(cell: Cell, folder: Path) -> bool:
    """Whether an earlier attempt of this very config was stopped (its folder) or killed (a staging folder
    beside it), leaving a run to continue."""
    attempts = [folder, *folder.parent.glob(f".{glob.escape(folder.name)}.*.partial")]
    wanted = cell.run_config().to_toml()
    return any((path / "config.toml").is_file() and (path / "config.toml").read_text() == wanted for path in attempts)


def together_key(cell: Cell, folder) -> str | None:
    """What the cells that train together with ``cell`` share (its config but the seed), or ``None`` for a
    cell fitted alone: one of a method that does not fit several together
    (:attr:`~bayesprune.methods.Method.fits_together`), or one begun or finished earlier (it continues, or
    is read back)."""
    from bayesprune.methods import get_method

    folder = Path(folder)
    if not get_method(cell.method).fits_together or finished(folder) or _attempted(cell, folder):
        return None
    return replace(cell.run_config(), seed=0).to_toml()


def execute_together(cells: list, folders: list, threads: int = 1) -> list | None:
    """Fit ``cells`` (one :func:`together_key` each, the same) into ``folders`` as one stacked model
    (:func:`bayesprune.pipeline.fits.fit_runs_together`), each written as :func:`execute` writes it alone;
    returns their metrics (a cell whose evaluation fails: :func:`failure`), or ``None`` when they cannot train
    together or their stacked fit fails (nothing written: each is then fitted alone, where it fails alone
    and keeps its checkpoint). Cells stopped while training together keep no checkpoint."""
    check_stop("before the cells started")
    torch.set_num_threads(threads)
    from bayesprune.core.errors import Interrupted
    from bayesprune.pipeline.fits import fit_runs_together
    from bayesprune.pipeline.runner import run

    configs = [cell.run_config() for cell in cells]
    try:
        fits = fit_runs_together(configs)
    except Interrupted:
        raise
    except Exception:  # noqa: BLE001 - the cells fitted alone say why, each in its own row
        return None
    if fits is None:
        return None
    results = []
    for config, folder, fit in zip(configs, folders, fits):
        try:
            results.append(run(config, Path(folder), force=True, fitted=fit))
        except Interrupted:
            raise
        except Exception as error:  # noqa: BLE001 - a cell's own failure is recorded, the others go on
            results.append(failure(error))
    return results


def failure(error: BaseException) -> dict:
    """The result of a cell whose fit failed: the reason in one line."""
    message = " ".join(str(error).split())[:300]
    return {"failed": f"{type(error).__name__}: {message}" if not isinstance(error, BayesPruneError) else message}


def variant_tables(table: dict) -> list:
    """``(label suffix, options)`` of each variant of one method's ``compare.variants`` table: every
    combination of its options' values (the first option's slowest), named by the values joined with
    ``-``; ``[("", {})]`` for none."""
    combinations = [("", {})]
    for option, values in table.items():
        combinations = [(f"{name}-{value}", {**own, option: value}) for name, own in combinations for value in values]
    return [(name.lstrip("-"), own) for name, own in combinations]
