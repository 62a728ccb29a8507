"""The network every fit of a run starts from: the config's network (its builder's initialisation, or the
user's trained weights, ``model.weights``), trained densely for ``model.pretrain_epochs`` first where asked;
for a comparison, that network trained once per seed and shared by every row (:func:`shared_starts`).
"""

import copy
import time
from dataclasses import replace
from pathlib import Path

import torch

from bayesprune.core.files import replacing
from bayesprune.core.loop import resolve_device
from bayesprune.core.tasks import mean_loss
from bayesprune.methods import FitContext
from bayesprune.models import new_net
from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import RunConfig


def start_network(config, dataset, *, device, seed: int):
    """The config's network for ``dataset`` built from ``seed`` (with ``model.weights`` where given), on
    ``device``, after ``model.pretrain_epochs`` of plain training by maximum likelihood with the run's
    optimiser, schedule (``model.pretrain_schedule`` where given), minibatches (seeded with ``seed``), precision
    and augmentation (none: as built). It is handed over in training mode, as a freshly built network is."""
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
    epochs = config.model.pretrain_epochs
    if not epochs:
        return net
    ctx = FitContext.from_config(config, dataset, device=device, seed=seed)
    if config.model.pretrain_schedule is not None:
        ctx = replace(ctx, optim=replace(config.optim, schedule=config.model.pretrain_schedule))
    net = net.to(device)
    ctx.train_network(
        "pretrain", net, ctx.batches(dataset.x_train, dataset.y_train), epochs=epochs, loss=mean_loss(dataset.task)
    )
    return net.train()


#: The folder of a comparison that holds the trained network each seed's rows start from.
STARTS = "starts"


def shared_starts(
    cells: list, out: Path, base: dict, *, train: bool = True, key: str = "", status=None, case=""
) -> list:
    """``cells`` of a comparison in ``out`` made to start from one trained network per seed: where ``base``
    (the comparison's config, TOML layout) asks for ``model.pretrain_epochs``, the network of each seed is
    trained once (:func:`start_network` with the comparison's own ``[optim]``, ``[data]`` and ``[train]``,
    not a method's), written to ``out/starts/seed-<seed>.pt`` (kept: ``--resume`` reads it again), and every
    cell of that seed gets it as ``model.weights`` with ``pretrain_epochs = 0``. Without pre-training the
    cells are returned as they are (each builds the same network from its seed, or ``model.weights``).
    ``train = False`` trains nothing: the cells as they will be where their seed's network is trained already
    (as they are where not), for checking finished cell folders against before any network is trained.
    ``key``: what else the network depends on (a comparison case's own network or data,
    :func:`~bayesprune.pipeline.compare.cases.start_key`), its files ``seed-<seed>-<key>.pt``. ``status(line)``
    is told when a network's training starts and ends (``case``: the comparison case it is for)."""
    model = base.get("model", {})
    if not isinstance(model, dict) or not model.get("pretrain_epochs"):
        return cells
    files = {}
    for seed in sorted({cell.seed for cell in cells}):
        path = out / STARTS / f"seed-{seed}{f'-{key}' if key else ''}.pt"
        if train and not path.is_file():
            (out / STARTS).mkdir(exist_ok=True)
            config = _start_config(cells, base, seed)
            dataset = load_datasets(config)[0]
            which = f"the start network of seed {seed}{f' ({case})' if case else ''}"
            say = status or (lambda line: None)
            epochs = config.model.pretrain_epochs
            say(f"bayesprune: training {which}, {epochs} epoch{'s' * (epochs != 1)}, before its cells")
            began = time.perf_counter()
            net = start_network(config, dataset, device=resolve_device(config.device), seed=seed)
            with replacing(path) as temporary:
                torch.save({name: value.detach().cpu() for name, value in net.state_dict().items()}, temporary)
            say(f"bayesprune: {which} trained ({(time.perf_counter() - began) / 60:.1f} min)")
        files[seed] = str(path.resolve())
    started = []
    for cell in cells:
        if not Path(files[cell.seed]).is_file():  # train = False, a seed not yet started: no folder of it is done
            started.append(cell)
            continue
        config = copy.deepcopy(cell.config)
        config["model"] = {**config.get("model", {}), "weights": files[cell.seed], "pretrain_epochs": 0}
        started.append(replace(cell, config=config))
    return started


def _start_config(cells: list, base: dict, seed: int):
    """The run config a seed's shared network is trained by: a cell's config of that seed with the
    comparison's own ``[optim]`` (a method's packaged one left out) and no method table."""
    cell = next(cell for cell in cells if cell.seed == seed)
    raw = {key: value for key, value in copy.deepcopy(cell.config).items() if key != cell.config.get("method")}
    raw["optim"] = copy.deepcopy(base.get("optim", {}))
    raw.pop("method", None)
    return RunConfig.from_dict({**raw, "seed": seed})
