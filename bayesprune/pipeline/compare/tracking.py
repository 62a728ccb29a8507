"""Tracking, optional: ``--track mlflow`` logs every cell of a comparison or a sweep to an MLflow store.

One MLflow experiment per grid folder (named after its absolute path), one run per cell named after
the cell and tagged ``method``, ``sparsity`` and ``seed``, nested under a parent run of the folder
that holds the tables (``leaderboard.*`` or ``summary.*``) as artifacts. A cell's run holds:

* params: its resolved config (``config.toml``) flattened to ``section.key``, each value written as in TOML/JSON (``0.5``, ``true``, ``[0.0, 0.5]``);
* metrics: every number of its ``metrics.json``, and each curve in it (``pruning_curve``) as stepped metrics ``<curve>.<key>`` whose step is the sparsity
  (or sparsity) in basis points: step 5000 is sparsity 0.5;
* artifacts: ``metrics.json``, its config, ``report.md``, the plots and the small tables.

A cell is logged in the calling process when its engine reports it finished, so every engine logs
the same way. Its run id is kept in ``<cell>/mlflow_run_id``: a later call that finds that run
finished in the store does not log the cell again (a run left unfinished by a crash is deleted and
logged anew). The parent run's id is kept in ``<out>/mlflow_run_id`` the same way.

The store is ``file:<out>/mlruns`` unless ``--track-uri`` names another (a path or any MLflow
tracking URI). MLflow 3 keeps its file store behind ``MLFLOW_ALLOW_FILE_STORE=true``: it is set while
bayesprune logs, and a reader of the store sets it too (``MlflowClient(tracking_uri=...)``, ``mlflow
ui``). MLflow's usage telemetry is off while bayesprune logs, unless ``MLFLOW_DISABLE_TELEMETRY`` is
set otherwise: logging to a local store sends nothing anywhere.
"""

import json
import os
import tomllib
from contextlib import contextmanager
from pathlib import Path

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.files import write_text

#: The trackers ``--track`` accepts.
TRACKERS = ("mlflow",)
#: Where a cell folder (and the grid folder, for its parent run) keeps its MLflow run id.
RUN_ID_FILE = "mlflow_run_id"
#: The files of a cell logged as artifacts (besides its plots).
CELL_ARTIFACTS = ("metrics.json", "config.toml", "cell.json", "report.md", "history.csv", "pruning_curve.csv")
#: The environment MLflow reads while bayesprune logs (a value the user set is kept): a tracking server
#: that does not answer is given up after one try of 10 s, not MLflow's retries for minutes.
ENVIRONMENT = {
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
#: Tracking URIs MLflow reads without a colon (a Databricks workspace): never a folder of that name.
SCHEMELESS = ("databricks", "databricks-uc", "uc")
#: What MLflow takes in one ``log_batch``.
_BATCH = {"params": 100, "metrics": 1000}


@contextmanager
def mlflow_environment():
    """Set :data:`ENVIRONMENT` where the user has not, and put it back as it was after."""
    added = [key for key in ENVIRONMENT if key not in os.environ]
    os.environ.update({key: ENVIRONMENT[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def store_uri(out, uri=None) -> str:
    """The tracking URI: ``uri`` as given when it has a scheme (``file:``, ``sqlite:``, ``http:`` …) or is one
    of :data:`SCHEMELESS`, a path made a ``file:`` URI, and ``file:<out>/mlruns`` by default."""
    if uri is None:
        return (Path(out).resolve() / "mlruns").as_uri()
    if uri in SCHEMELESS:
        return uri
    scheme, sep, _ = uri.partition(":")
    if sep and len(scheme) > 1 and scheme.replace("+", "").isalnum():  # not a Windows drive letter
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def _databricks_configured() -> bool:
    """Whether a Databricks workspace is configured (environment or ``~/.databrickscfg``): without one, MLflow
    tries every way of authenticating it knows, over the network, before it fails."""
    return bool(os.environ.get("DATABRICKS_HOST")) or (Path.home() / ".databrickscfg").is_file()


def _local_path(uri: str):
    if uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(uri).path))
    return None


def open_tracker(track, uri, out, *, kind: str):
    """The tracker of a grid folder ``out`` (``kind``: ``"compare"`` or ``"sweep"``), or ``None`` when
    ``track`` is ``None``. Refuses, before anything is written, an unknown tracker, a ``uri`` without
    ``track`` or an empty one, a file store that is a file, a missing MLflow (naming the extra to
    install), and a store that is not a folder and cannot be reached now (one try, :data:`ENVIRONMENT`)."""
    if track is None:
        if uri is not None:
            raise BayesPruneError("--track-uri names where --track logs; give it with --track mlflow")
        return None
    if track not in TRACKERS:
        raise BayesPruneError(f"--track must be one of {list(TRACKERS)}, got {track!r}")
    if uri is not None and not uri.strip():
        raise BayesPruneError("--track-uri is empty; name a folder or a tracking URI")
    resolved = store_uri(out, uri)
    if resolved.partition(":")[0] in SCHEMELESS and not _databricks_configured():
        raise BayesPruneError(
            f"--track-uri {uri}: no Databricks credentials (DATABRICKS_HOST and DATABRICKS_TOKEN, or "
            "~/.databrickscfg); for a folder of that name give ./" + uri
        )
    path = _local_path(resolved)
    if path is not None and (path.is_symlink() or (path.exists() and not path.is_dir())):
        raise BayesPruneError(f"--track-uri {uri or resolved}: exists and is not a directory")
    with mlflow_environment():
        try:
            from mlflow.tracking import MlflowClient  # noqa: F401
        except ImportError:
            raise BayesPruneError("--track mlflow needs MLflow: pip install 'bayesprune[track]'") from None
    tracker = MlflowTracker(resolved, Path(out), kind=kind)
    if path is None:  # a server or a database: reached now, before any cell is fitted
        tracker._call("reaching the store", lambda: tracker.client.search_experiments(max_results=1))
    return tracker


def flatten(table: dict, prefix: str = "") -> dict:
    """``{"train": {"epochs": 1}, "seed": 0}`` → ``{"train.epochs": "1", "seed": "0"}``: the leaves of a
    config as MLflow params (strings as they are, anything else as JSON: ``0.5``, ``true``, ``[0.0, 0.5]``)."""
    from bayesprune.pipeline.config import leaves

    return {
        name: value if isinstance(value, str) else json.dumps(value) for name, value in leaves(table, prefix).items()
    }


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def basis_points(fraction: float) -> int:
    """A sparsity (a curve's ``droprate`` or ``sparsity``) as a metric step: 0.5 → 5000."""
    return round(1e4 * fraction)


def cell_metrics(metrics: dict) -> list:
    """``(key, value, step)`` of every number of a cell's ``metrics.json`` (step 0) and of each curve in
    it: a list of rows with a ``droprate`` or ``sparsity``, each other number of a row logged as
    ``<curve>.<key>`` at that point's step (:func:`basis_points`)."""
    found = []
    for key, value in metrics.items():
        if _number(value):
            found.append((key, float(value), 0))
        elif isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
            axis = next(
                (name for name in ("droprate", "sparsity") if all(_number(row.get(name)) for row in value)), None
            )
            if axis is None:
                continue
            for row in value:
                step = basis_points(row[axis])
                found.extend(
                    (f"{key}.{name}", float(number), step)
                    for name, number in row.items()
                    if name != axis and _number(number)
                )
    return found


def cell_params(folder: Path) -> dict:
    """The cell's resolved config, flattened (:func:`flatten`)."""
    if (folder / "config.toml").is_file():
        return flatten(tomllib.loads((folder / "config.toml").read_text(encoding="utf-8")))
    return {}


def sparsity_tag(cell) -> str:
    """The cell's ``sparsity`` tag: its target, the sparsities it is evaluated at (``0.5,0.9``), the
    method's sparsity option in its config (a sweep), or ``learned`` for a method that sets its own width."""
    if cell.sparsity is not None:
        return f"{cell.sparsity:g}"
    if cell.sparsities:
        return ",".join(f"{s:g}" for s in cell.sparsities)
    table = cell.config.get(cell.method, {}) if isinstance(cell.config.get(cell.method), dict) else {}
    for option in ("sparsity", "sparsities"):
        if option in table:
            value = table[option]
            return ",".join(f"{s:g}" for s in value) if isinstance(value, list) else f"{value:g}"
    sparsities = [d for d in cell.config.get("prune", {}).get("sparsities", ()) if d]
    return ",".join(f"{d:g}" for d in sparsities) if sparsities else "learned"


class MlflowTracker:
    """Logs the cells of one grid folder to one MLflow store (see the module). Nothing is written, not
    even the store, before the first cell is logged."""

    def __init__(self, uri: str, out: Path, *, kind: str):
        self.uri, self.out, self.kind = uri, out, kind
        self._client = None
        self._experiment = None
        self._parent = None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            with mlflow_environment():
                self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _call(self, what: str, function, *args, **kwargs):
        """Call the client with its environment; an MLflow error becomes one line."""
        from mlflow.exceptions import MlflowException

        with mlflow_environment():
            try:
                return function(*args, **kwargs)
            except (MlflowException, OSError, ImportError) as error:  # ImportError: a store's driver missing
                message = " ".join(str(error).split())[:300]
                raise BayesPruneError(f"--track mlflow ({self.uri}): {what}: {message}") from None

    def experiment(self) -> str:
        """The id of the folder's experiment (created on first use)."""
        if self._experiment is None:
            name = str(self.out.resolve())
            found = self._call("reading the experiment", self.client.get_experiment_by_name, name)
            if found is not None and found.lifecycle_stage != "active":
                raise BayesPruneError(
                    f"--track mlflow ({self.uri}): the experiment {name!r} is deleted; restore it "
                    "or give another --track-uri"
                )
            self._experiment = (
                found.experiment_id
                if found is not None
                else self._call(
                    "creating the experiment", self.client.create_experiment, name, tags={"bayesprune.kind": self.kind}
                )
            )
        return self._experiment

    def _held(self, folder: Path):
        """``(run id, finished)`` of the run whose id ``folder`` keeps, if the store holds it; a run the
        store holds unfinished (a crash while logging) is deleted."""
        from mlflow.exceptions import MlflowException

        path = folder / RUN_ID_FILE
        if not path.is_file():
            return None, False
        run_id = path.read_text().strip()
        try:
            with mlflow_environment():
                run = self.client.get_run(run_id)
        except MlflowException:
            return None, False
        if run.info.lifecycle_stage != "active" or run.info.experiment_id != self.experiment():
            return None, False
        return run_id, run.info.status == "FINISHED"

    def parent(self) -> str:
        """The folder's parent run (reused across calls)."""
        if self._parent is None:
            run_id, _ = self._held(self.out)
            if run_id is None:
                run = self._call(
                    "creating the parent run",
                    self.client.create_run,
                    self.experiment(),
                    run_name=self.out.resolve().name,
                    tags={"bayesprune.kind": self.kind},
                )
                run_id = run.info.run_id
                write_text(self.out / RUN_ID_FILE, run_id + "\n")
            self._parent = run_id
        return self._parent

    def log_cell(self, cell, folder) -> str:
        """Log a finished cell once; returns its run id (the existing one when it was logged before)."""
        from mlflow.entities import Metric, Param

        folder = Path(folder)
        run_id, finished = self._held(folder)
        if finished:
            return run_id
        if run_id is not None:
            self._call("deleting an unfinished run", self.client.delete_run, run_id)
        metrics = json.loads((folder / "metrics.json").read_text())
        tags = {
            "method": cell.label,
            "sparsity": sparsity_tag(cell),
            "seed": str(cell.seed),
            "bayesprune.cell": cell.name,
            "bayesprune.method": cell.method,
            "mlflow.parentRunId": self.parent(),
            **{
                f"grid.{key}": value if isinstance(value, str) else json.dumps(value)
                for key, value in cell.point.items()
            },
        }
        run = self._call(
            f"creating the run of {cell.name}", self.client.create_run, self.experiment(), run_name=cell.name, tags=tags
        )
        run_id = run.info.run_id
        params = [Param(key, value) for key, value in cell_params(folder).items()]
        stamp = int(1000 * (folder / "metrics.json").stat().st_mtime)
        numbers = [Metric(key, value, stamp, step) for key, value, step in cell_metrics(metrics)]
        for start in range(0, len(params), _BATCH["params"]):
            self._call(
                f"logging the params of {cell.name}",
                self.client.log_batch,
                run_id,
                params=params[start : start + _BATCH["params"]],
            )
        for start in range(0, len(numbers), _BATCH["metrics"]):
            self._call(
                f"logging the metrics of {cell.name}",
                self.client.log_batch,
                run_id,
                metrics=numbers[start : start + _BATCH["metrics"]],
            )
        files = [folder / name for name in CELL_ARTIFACTS] + sorted(folder.glob("*.png"))
        for path in files:
            if path.is_file() and not path.is_symlink():
                self._call(f"logging {path.name} of {cell.name}", self.client.log_artifact, run_id, str(path))
        self._call(f"finishing the run of {cell.name}", self.client.set_terminated, run_id, "FINISHED")
        write_text(folder / RUN_ID_FILE, run_id + "\n")  # last: the cell counts as logged only when complete
        return run_id

    def reporter(self, report):
        """``report`` (an engine's callback) that first logs the cell it is told of."""

        def logged(cell, metrics, done, total):
            self.log_cell(cell, self.out / "cells" / cell.name)
            report(cell, metrics, done, total)

        return logged

    def finish(self, names):
        """Log the folder's files ``names`` (tables, plot, config) as the parent run's artifacts and finish it."""
        run_id = self.parent()
        for name in names:
            path = self.out / name
            if path.is_file() and not path.is_symlink():
                self._call(f"logging {name}", self.client.log_artifact, run_id, str(path))
        self._call("finishing the parent run", self.client.set_terminated, run_id, "FINISHED")
