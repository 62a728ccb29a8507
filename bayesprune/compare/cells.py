"""A cell: one fit of a comparison or a sweep, written as its own run directory.

A cell is plain data (a name, a kind, the raw config it runs), so that any engine can ship it to a
worker; :func:`execute` is the one function a worker calls. A finished cell (``metrics.json``
present) is read back, never fitted again.

Two kinds:

* ``"run"``: an ordinary :func:`bayesprune.runner.run` of the cell's config (any registered method).
* ``"magnitude"``: the baseline of a comparison: the plain network trained by maximum likelihood
  (:func:`bayesprune.baseline.fit_plain`, the same rule as the runner's plain network), then, at each
  sparsity, its weights of smallest magnitude removed and the rest fine-tuned with the mask fixed.
"""
import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bayesprune.errors import BayesPruneError
from bayesprune.files import replacing, write_text

#: The file a magnitude cell keeps its own description in (a run cell has ``config.toml``).
CELL_FILE = "cell.json"


@dataclass(frozen=True)
class Cell:
    """One fit of a grid.

    Attributes:
        name: its directory under ``<out>/cells``.
        kind: ``"run"`` or ``"magnitude"``.
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
        """The cell's validated :class:`~bayesprune.config.RunConfig`."""
        from bayesprune.config import RunConfig

        return RunConfig.from_dict(copy.deepcopy(self.config))

    def describe(self) -> dict:
        """What a magnitude cell records in ``cell.json`` (and compares with on a later call)."""
        return {"kind": self.kind, "method": self.method, "seed": self.seed, "sparsities": list(self.sparsities),
                "finetune_epochs": self.finetune_epochs, "config": self.run_config().to_dict()}


def finished(folder: Path) -> bool:
    return (Path(folder) / "metrics.json").is_file()


def stale(cell: Cell, folder: Path) -> str | None:
    """Why the existing ``folder`` holds another fit than ``cell`` (``None`` when it is the same or empty).

    A finished cell is reused as it is, so a folder left by another config must not pass for it."""
    from bayesprune.config import load_config

    folder = Path(folder)
    if not folder.exists() or not any(folder.iterdir()):
        return None
    if cell.kind == "magnitude":
        if not (folder / CELL_FILE).is_file():
            return None if not finished(folder) else f"no {CELL_FILE}"
        same = json.loads((folder / CELL_FILE).read_text()) == json.loads(json.dumps(cell.describe()))
        return None if same else f"its {CELL_FILE} differs"
    if not (folder / "config.toml").is_file():
        return None if not finished(folder) else "no config.toml"
    try:
        held = load_config(str(folder / "config.toml")).to_dict()
    except BayesPruneError as error:
        return f"its config.toml does not load ({error})"
    return None if held == cell.run_config().to_dict() else "its config.toml differs"


def execute(cell: Cell, folder: str, threads: int = 1) -> dict:
    """Fit ``cell`` into ``folder`` (or read it back when finished) and return its metrics; what a
    worker of any engine runs, with ``threads`` torch threads."""
    folder = Path(folder)
    if finished(folder):
        return json.loads((folder / "metrics.json").read_text())
    torch.set_num_threads(threads)
    if cell.kind == "magnitude":
        return _magnitude(cell, folder)
    from bayesprune.errors import Interrupted
    from bayesprune.runner import resume_run, run

    if (folder / "checkpoint.pt").is_file():  # an interrupted earlier attempt: continue it where it can be
        try:
            return resume_run(folder)
        except Interrupted:
            raise
        except BayesPruneError:
            pass
    # force: what an earlier attempt left here (a checkpoint that does not resume) is replaced.
    return run(cell.run_config(), folder, force=True)


def _test_metric(net, dataset) -> float:
    from bayesprune.predict import metric

    net.eval()
    with torch.no_grad():
        output = net(dataset.x_test)
    prediction = torch.softmax(output, -1) if dataset.task == "classification" else output.squeeze(-1)
    return metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std)


def prunable_weights(net, *, include_biases: bool) -> list:
    """The parameters magnitude pruning ranks: the network's sites, biases only if ``include_biases``."""
    from bayesprune.pruning import bias_sites
    from bayesprune.sites import site_names

    biases = bias_sites(net)
    return [name for name in site_names(net) if include_biases or name not in biases]


def _magnitude(cell: Cell, folder: Path) -> dict:
    """The plain network, then global magnitude pruning and fine-tuning at each sparsity (see the module)."""
    from bayesprune.analysis.evaluation import metric_name
    from bayesprune.baseline import fit_plain
    from bayesprune.early_stopping import hold_out
    from bayesprune.export import mask_parameters, unmask_parameters
    from bayesprune.models import new_net
    from bayesprune.pruning import Budget, prune
    from bayesprune.runner import load_datasets

    config = cell.run_config()
    dataset = load_datasets(config)[0]
    validation = None
    if config.train.validation > 0:
        dataset, *validation = hold_out(dataset, config.train.validation, seed=config.seed)
    resolved = config.for_data(dataset.num_train)
    name = metric_name(dataset.task)
    rule = dict(epochs=config.baseline.epochs or resolved.train.epochs, lr=config.baseline.lr or config.optim.lr,
                batch_size=resolved.data.batch_size, seed=config.seed)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    start = time.perf_counter()
    fit_plain(net, dataset.x_train, dataset.y_train, validation=validation, patience=config.train.patience, **rule)
    plain_seconds = time.perf_counter() - start
    metrics = {"method": cell.method, "dataset": dataset.name, "task": dataset.task, "seed": config.seed,
               "architecture": config.model.name, "plain_seconds": round(plain_seconds, 3),
               f"baseline_{name}": _test_metric(net, dataset), "finetune_epochs": cell.finetune_epochs, "per_sparsity": []}
    sites = prunable_weights(net, include_biases=config.prune.include_biases)
    folder.mkdir(parents=True, exist_ok=True)
    for sparsity in cell.sparsities:
        start = time.perf_counter()
        pruned = copy.deepcopy(net)
        params = dict(pruned.named_parameters())
        scores = {site: params[site].detach().abs().double() for site in sites}
        masks = prune(scores, Budget(fraction=sparsity, scope=config.prune.scope, min_keep=config.prune.min_keep))
        mask_parameters(pruned, masks)
        if cell.finetune_epochs:
            fit_plain(pruned, dataset.x_train, dataset.y_train, **{**rule, "epochs": cell.finetune_epochs})
        unmask_parameters(pruned).eval()
        with replacing(folder / network_file(sparsity)) as temporary:
            torch.save(pruned.state_dict(), temporary)
        metrics["per_sparsity"].append({"sparsity": sparsity, name: _test_metric(pruned, dataset),
                                        "train_seconds": round(plain_seconds + time.perf_counter() - start, 3)})
    write_text(folder / CELL_FILE, json.dumps(cell.describe(), indent=1) + "\n")
    write_text(folder / "metrics.json", json.dumps(metrics, indent=2) + "\n")  # last: the cell is finished only when complete
    return metrics


def network_file(sparsity: float) -> str:
    """A magnitude cell's pruned network at ``sparsity`` (a weights-only state dict)."""
    return f"network-s{sparsity:g}.pt"
