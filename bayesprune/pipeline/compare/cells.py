"""A cell: one fit of a comparison or a sweep, written as its own run directory.

A cell is plain data (a name, a kind, the raw config it runs), so that any engine can ship it to a
worker; :func:`execute` is the one function a worker calls. A finished cell (``metrics.json``
present) is read back, never fitted again.

Three kinds:

* ``"run"``: an ordinary :func:`bayesprune.pipeline.runner.run` of the cell's config (any registered method).
* ``"magnitude"``: the baseline of a comparison: the plain network trained by maximum likelihood
  (:func:`bayesprune.pipeline.baseline.fit_plain`, the same rule as the runner's plain network), then, at each
  sparsity, its weights of smallest magnitude removed and the rest fine-tuned with the mask fixed.
* ``"torch-pruning"``: the baseline of a comparison at unit level: the same plain network, then, at each
  sparsity (a fraction of units), Torch-Pruning's own pruner (:mod:`bayesprune.core.channels`)
  removes that fraction of each layer's channels and the smaller network is fine-tuned.
"""

import copy
import glob
import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from bayesprune.core.checkpoint import read_state_dict
from bayesprune.core.errors import BayesPruneError
from bayesprune.core.files import replacing, write_text
from bayesprune.core.loop import check_stop
from bayesprune.core.tasks import metric_name, network_test_metric
from bayesprune.pipeline.config import first_difference

#: The file a magnitude cell keeps its own description in (a run cell has ``config.toml``).
CELL_FILE = "cell.json"
#: A magnitude cell's plain network (a weights-only state dict), pruned again at a sparsity added later.
PLAIN_FILE = "network-plain.pt"
#: The kinds that train the plain network and prune it at each sparsity (the baselines).
PLAIN_KINDS = ("magnitude", "torch-pruning")


@dataclass(frozen=True)
class Cell:
    """One fit of a grid.

    Attributes:
        name: its directory under ``<out>/cells``.
        kind: ``"run"``, ``"magnitude"`` or ``"torch-pruning"``.
        config: the raw config (TOML layout) it runs; validated by :meth:`run_config`.
        method: the method's name (``"magnitude"`` for the baseline).
        seed: its seed.
        sparsity: the sparsity the method was asked for, or ``None`` for a method whose fit does not
            read one (it is evaluated at every sparsity of ``sparsities``).
        sparsities: where a ``"magnitude"`` cell prunes; the droprates of a run cell are in its config.
        point: the grid point of a sweep cell (key → value).
        finetune_epochs: the magnitude cell's fine-tuning at each sparsity.
        certifies: the methods whose leaderboard rows this PBP cell's certificate fills
            (``compare.certify``): the method its prior was started from.
        row: whether the cell gives leaderboard rows of its own (a certificate-only cell does not).
    """

    name: str
    kind: str
    config: dict
    method: str
    seed: int
    sparsity: float | None = None
    sparsities: tuple = ()
    point: dict = field(default_factory=dict)
    finetune_epochs: int = 0
    certifies: tuple = ()
    row: bool = True

    def run_config(self):
        """The cell's validated :class:`~bayesprune.pipeline.config.RunConfig`."""
        from bayesprune.pipeline.config import RunConfig

        return RunConfig.from_dict(copy.deepcopy(self.config))

    def describe(self) -> dict:
        """What a magnitude cell records in ``cell.json`` (and compares with on a later call)."""
        return {
            "kind": self.kind,
            "method": self.method,
            "seed": self.seed,
            "sparsities": list(self.sparsities),
            "finetune_epochs": self.finetune_epochs,
            "config": self.run_config().to_dict(),
        }


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
    if finished(folder):
        check_metrics(cell, folder / "metrics.json")
        if cell.kind in PLAIN_KINDS:
            check_network_files(folder)


def check_network_files(folder: Path):
    """Refuse, naming the file, a finished plain cell's network file that is not a state dict (read without
    unpickling) or names other parameters than its plain network."""
    files = sorted(folder.glob("network-*.pt"))
    states = {path: read_state_dict(path) for path in files}
    names = set(states.get(folder / PLAIN_FILE, {})) or None
    for path, state in states.items():
        if names is not None and set(state) != names:
            raise BayesPruneError(f"{path}: holds another network than {PLAIN_FILE} (other parameter names)")


def check_metrics(cell: Cell, path: Path) -> dict:
    """A finished cell's ``metrics.json``, refused naming the file where it lacks what the tables read."""
    metrics = read_json(path, keys=("task",))
    name = metric_name(metrics["task"])
    numbers = ["train_seconds"]
    if cell.kind in PLAIN_KINDS:
        numbers, rows, row_keys = [f"baseline_{name}"], "per_sparsity", ("sparsity", name, "train_seconds")
    else:
        rows, row_keys = "pruning_curve", ("droprate", curve_metric(cell, name))
        if cell.sparsity is None and not cell.sparsities:
            numbers.append(name)
    for key in numbers:
        if not _number(metrics.get(key)) and metrics.get(key, 0) is not None:
            raise BayesPruneError(f"{path}: {key!r} is not a number")
    table = metrics.get(rows)
    if not isinstance(table, list) or not all(isinstance(row, dict) for row in table):
        raise BayesPruneError(f"{path}: {rows!r} is not a list of rows")
    for row in table:
        for key in row_keys:
            if not _number(row.get(key)) and row.get(key, 0) is not None:
                raise BayesPruneError(f"{path}: a row of {rows!r} has no number {key!r}")
    if cell.sparsity is not None and missing_sparsities(
        replace(cell, sparsity=None, sparsities=(cell.sparsity,)), metrics
    ):
        raise BayesPruneError(f"{path}: has no row at the cell's sparsity {cell.sparsity:g}")
    missing = missing_sparsities(cell, metrics)
    if missing and cell.kind in PLAIN_KINDS and not (path.parent / PLAIN_FILE).is_file():
        raise BayesPruneError(
            f"{path}: the finished cell {cell.name} was not evaluated at sparsity {missing[0]:g} and "
            f"keeps no {PLAIN_FILE} to prune again (an earlier version); give that sparsity in a new --out"
        )
    if missing and ("per_split" in metrics or "per_seed" in metrics):
        raise BayesPruneError(
            f"{path}: the finished cell {cell.name} (several splits or seeds) was not evaluated at "
            f"sparsity {missing[0]:g}; give that sparsity in a new --out"
        )
    return metrics


def curve_metric(cell: Cell, name: str) -> str:
    """The column of a run cell's pruning curve its leaderboard rows report: ``<name>_finetuned`` where
    its config fine-tunes each pruned network (``prune.finetune_epochs``), else ``name``."""
    return f"{name}_finetuned" if cell.run_config().prune.finetune_epochs else name


def missing_sparsities(cell: Cell, metrics: dict) -> list:
    """The sparsities a finished cell evaluated at every sparsity (magnitude, sBNN, Sparse VD) was not
    evaluated at: ``--resume`` with more ``--sparsities`` evaluates it there, never fitting it again."""
    if cell.kind in PLAIN_KINDS:
        held = {round(row["sparsity"], 6) for row in metrics["per_sparsity"]}
    elif cell.sparsity is None and cell.sparsities:
        held = {round(row["droprate"], 6) for row in metrics["pruning_curve"]}
    else:
        return []
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
    if cell.kind in PLAIN_KINDS:
        if not (folder / CELL_FILE).exists():
            return None if not finished(folder) else f"no {CELL_FILE}"
        held = read_json(folder / CELL_FILE)
        key = first_difference(
            _without(held, "sparsities"), _without(json.loads(json.dumps(cell.describe())), "sparsities")
        )
        return None if key is None else f"its {CELL_FILE} differs at {key}"
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
        held, wanted = (_without(config, "prune.droprates") for config in (held, wanted))
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
    :func:`bayesprune.pipeline.runner.run` makes before fitting (the method's services and keys, the data,
    the network's size, inputs, outputs and units, the method's own :meth:`check`), so that a grid
    refuses every such cell before fitting any. ``datasets`` caches the data by its config."""
    from bayesprune.methods import get_method
    from bayesprune.models import new_net
    from bayesprune.pipeline.runner import (
        check_memory_format,
        check_network,
        check_size,
        check_units,
        check_validation,
        load_datasets,
        refuse_unsupported,
    )

    try:
        config = cell.run_config()
        method = get_method(config.method) if cell.kind == "run" else None
        if method is not None:
            refuse_unsupported(config, method)
        key = repr(config.data)
        if key not in datasets:
            datasets[key] = load_datasets(config)
        data = datasets[key]
        check_size(config, data[0])
        check_validation(config, data)
        check_memory_format(config, data[0])
        net = new_net(config, data[0].input_shape, data[0].output_dim, seed=config.seed)
        check_network(net, data[0])
        if cell.kind == "torch-pruning":
            from bayesprune.core.channels import check_prunable

            check_prunable(net, tuple(data[0].input_shape))
        if method is not None:
            check_units(config, net, data[0])
            method.check(net, data[0], config.method_options)
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
    if finished(folder):
        metrics = json.loads((folder / "metrics.json").read_text())
        if not missing_sparsities(cell, metrics):
            return metrics
        if cell.kind == "run":
            return _evaluate_at_more_sparsities(cell, folder, metrics)
    if cell.kind in PLAIN_KINDS:
        return _magnitude(cell, folder)
    from bayesprune.core.errors import Interrupted
    from bayesprune.pipeline.runner import resume_run, run

    # an earlier attempt of this very config, stopped (its folder) or killed (a staging folder beside it)
    attempts = [folder, *folder.parent.glob(f".{glob.escape(folder.name)}.*.partial")]
    wanted = cell.run_config().to_toml()
    if any((path / "config.toml").is_file() and (path / "config.toml").read_text() == wanted for path in attempts):
        try:
            return resume_run(folder)
        except Interrupted:
            raise
        except BayesPruneError:
            pass
    # force: what an earlier attempt left here (a checkpoint that does not resume) is replaced.
    return run(cell.run_config(), folder, force=True)


def _evaluate_at_more_sparsities(cell: Cell, folder: Path, metrics: dict) -> dict:
    """A finished run cell evaluated at the sparsities it lacks, from its saved fit (:func:`bayesprune.pipeline.runner.load_run`)
    by the runner's own :func:`~bayesprune.pipeline.evaluation.pruning_curve`: its ``pruning_curve``,
    ``pruning_curve.csv`` and ``prune.droprates`` take the new rows; ``metrics.json`` is written last."""
    import tomllib

    import tomli_w

    from bayesprune.analysis.tables import write_csv
    from bayesprune.pipeline.evaluation import pruning_curve
    from bayesprune.pipeline.runner import _finetuned, load_run

    config, dataset, fitted = load_run(folder)
    rows = pruning_curve(
        fitted,
        dataset,
        droprates=missing_sparsities(cell, metrics),
        budget=config.prune.budget,
        include_biases=config.prune.include_biases,
        finetuned=_finetuned(config, dataset, fitted),  # prune.finetune_epochs, as the run's own rows
        predictive=config.prune.predictive_at(fitted.n_weights),
    )
    metrics["pruning_curve"] = sorted([*metrics["pruning_curve"], *rows], key=lambda row: row["droprate"])
    raw = tomllib.loads((folder / "config.toml").read_text())
    raw["prune"]["droprates"] = [row["droprate"] for row in metrics["pruning_curve"]]
    write_text(folder / "config.toml", tomli_w.dumps(raw))
    write_csv(folder / "pruning_curve.csv", metrics["pruning_curve"], digits=6)
    write_text(folder / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def prunable_weights(net, *, include_biases: bool) -> list:
    """The parameters magnitude pruning ranks: the network's sites, biases only if ``include_biases``."""
    from bayesprune.core.pruning import bias_sites
    from bayesprune.core.sites import site_names

    biases = bias_sites(net)
    return [name for name in site_names(net) if include_biases or name not in biases]


def _magnitude(cell: Cell, folder: Path) -> dict:
    """The plain network, then at each sparsity global magnitude pruning (or, for a ``"torch-pruning"``
    cell, Torch-Pruning's structured pruner) and fine-tuning (see the module), on the run's ``device``;
    the networks it writes hold CPU tensors."""
    from bayesprune.core import channels as structured
    from bayesprune.core.checkpoint import on_cpu
    from bayesprune.core.early_stopping import hold_out
    from bayesprune.core.layout import resolve_memory_format
    from bayesprune.core.normalization import changes
    from bayesprune.core.plain import fit_plain
    from bayesprune.core.pruning import Budget, prune
    from bayesprune.models import new_net
    from bayesprune.pipeline.evaluation import metric_name
    from bayesprune.pipeline.finetune import finetune
    from bayesprune.pipeline.runner import load_datasets

    config = cell.run_config()
    device = config.torch_device
    dataset = load_datasets(config)[0]
    validation = None
    if config.train.validation > 0:
        dataset, *validation = hold_out(dataset, config.train.validation, seed=config.seed)
    resolved = config.for_data(dataset.num_train)
    name = metric_name(dataset.task)
    rule = dict(
        epochs=config.baseline.epochs or resolved.train.epochs,
        lr=config.baseline.lr or config.optim.lr,
        batch_size=resolved.data.batch_size,
        seed=config.seed,
        memory_format=resolve_memory_format(config.train.memory_format, dataset.input_shape, device),
    )
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed).to(device)
    plain_rows = dataset
    if validation is None and config.baseline.held_out > 0:  # the runner's plain network's rule (train_plain)
        plain_rows, *validation = hold_out(dataset, config.baseline.held_out, seed=config.seed)
    held = json.loads((folder / "metrics.json").read_text()) if finished(folder) else None
    start = time.perf_counter()
    if held is None:
        fit_plain(
            net,
            plain_rows.x_train.to(device),
            plain_rows.y_train.to(device),
            validation=None if validation is None else tuple(part.to(device) for part in validation),
            patience=config.train.patience,
            **rule,
        )
    else:  # a finished cell asked for more sparsities: its plain network, not trained again
        read_state_dict(folder / PLAIN_FILE, net)
    plain_seconds = time.perf_counter() - start
    epochs = rule["epochs"] + cell.finetune_epochs  # the plain network's and one sparsity's fine-tuning
    metrics = {
        "method": cell.method,
        "dataset": dataset.name,
        "task": dataset.task,
        "seed": config.seed,
        "architecture": config.model.name,
        "plain_seconds": round(plain_seconds, 3),
        "train_epochs": epochs,
        "train_steps": epochs * math.ceil(dataset.num_train / rule["batch_size"]),
        f"baseline_{name}": network_test_metric(net, dataset),
        "finetune_epochs": cell.finetune_epochs,
        "per_sparsity": [],
    }
    if held is not None:
        metrics, plain_seconds = held, held["plain_seconds"]
    sites = prunable_weights(net, include_biases=config.prune.include_biases)
    calibration = config.prune.calibration(dataset.x_train, batch_size=rule["batch_size"])
    folder.mkdir(parents=True, exist_ok=True)
    if held is None:
        with replacing(folder / PLAIN_FILE) as temporary:
            torch.save(on_cpu(net.state_dict()), temporary)
    # every sparsity's fine-tuning reads the training rows on the device: moved there once
    training = replace(dataset, x_train=dataset.x_train.to(device), y_train=dataset.y_train.to(device))
    for sparsity in missing_sparsities(cell, metrics):
        start = time.perf_counter()
        if cell.kind == "torch-pruning":
            pruned = structured.pruned_and_finetuned(
                net,
                training,
                ratio=sparsity,
                importance=cell.method.removeprefix("torch-pruning-"),
                finetune_epochs=cell.finetune_epochs,
                rule=rule,
            )
            if calibration is not None:
                calibration.apply(pruned)  # the smaller network's own batch-norm statistics (prune.recalibrate)
        else:
            pruned = copy.deepcopy(net)
            params = dict(pruned.named_parameters())
            scores = {site: params[site].detach().abs().double() for site in sites}
            masks = prune(scores, Budget(fraction=sparsity, scope=config.prune.scope, min_keep=config.prune.min_keep))
            own = calibration if changes(net, masks) else None  # the masked network's statistics (prune.recalibrate)
            finetune(
                pruned,
                training.x_train,
                training.y_train,
                masks,
                **rule | {"epochs": cell.finetune_epochs},
                calibration=own,
            )
        with replacing(folder / network_file(sparsity)) as temporary:
            torch.save(on_cpu(pruned.state_dict()), temporary)
        metrics["per_sparsity"].append(
            {
                "sparsity": sparsity,
                name: network_test_metric(pruned, dataset),
                "train_seconds": round(plain_seconds + time.perf_counter() - start, 3),
            }
        )
    metrics["per_sparsity"].sort(key=lambda row: row["sparsity"])
    evaluated = [row["sparsity"] for row in metrics["per_sparsity"]]
    write_text(folder / CELL_FILE, json.dumps({**cell.describe(), "sparsities": evaluated}, indent=1) + "\n")
    write_text(
        folder / "metrics.json", json.dumps(metrics, indent=2) + "\n"
    )  # last: the cell is finished only when complete
    return metrics


def network_file(sparsity: float) -> str:
    """A magnitude cell's pruned network at ``sparsity`` (a weights-only state dict)."""
    return f"network-s{sparsity:g}.pt"
