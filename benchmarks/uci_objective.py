"""Why the sBNN of the packaged ``uci`` config does not beat the plain network: the objective or the optimiser?

On one split of each UCI set, with a tenth of its training rows standing in for the test split (the
real test split is never read), fits three networks of the packaged config's shape under its rule
(steps, rate, minibatches, early stopping on another tenth):

- the plain network (maximum likelihood);
- the sBNN from the same random initialisation, as the packaged config runs it;
- the sBNN started from the plain network's trained weights (m = the plain weights).

and reports the held-out RMSE of each (at the epoch early stopping keeps), with the objective of both
sBNN fits: the ELBO (−J of eq. 3.6) on the whole training part at the kept epoch, estimated with 32
draws of W, and at the last epoch (the mean of its minibatch estimates, the rate annealed to zero).
Where the warm start ends with the better RMSE but the lower last-epoch ELBO, the objective itself
prefers the less accurate posterior; where it ends with the higher ELBO, the fit from scratch had not
reached the objective's optimum::

    python benchmarks/uci_objective.py --data-root ../shared/data/uci [--sets energy ...] [--split 0] [--set key=value ...]
"""

import argparse
import copy
import json
from dataclasses import replace
from pathlib import Path

import torch

from bayesprune.core.early_stopping import hold_out
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.predict import metric
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import fit_posterior
from bayesprune.models import new_net
from bayesprune.pipeline.baseline import train_plain
from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import load_config

ELBO_DRAWS = 32


def held_out_split(data_root: Path, name: str, split: int, overrides=()) -> tuple:
    """``(config, dataset, validation)`` of the packaged ``uci`` config on ``split`` of set ``name``, with a
    tenth of the training rows as the test split (the real one is never read) and ``train.validation``'s
    rows held out of the rest."""
    config = load_config(
        "uci",
        [
            f"data.root={json.dumps(str(data_root))}",
            f"data.name={json.dumps(name)}",
            f"data.splits=[{split}]",
            *overrides,
        ],
    )
    dataset = load_datasets(config)[0]
    dataset, x_held, y_held = hold_out(dataset, 0.1, seed=1000 + split)
    dataset = replace(dataset, x_test=x_held, y_test=y_held)
    dataset, *validation = hold_out(dataset, config.train.validation, seed=config.seed)
    return config.for_data(dataset.num_train), dataset, validation


def compare(data_root: Path, name: str, split: int, overrides=()) -> dict:
    """Held-out RMSE of the plain network and of both sBNN fits, and the ELBO of the sBNN fits."""
    config, dataset, validation = held_out_split(data_root, name, split, overrides)
    device = torch.device("cpu")

    def sbnn(net):
        ctx = FitContext.from_config(config, dataset, device=device, validation=tuple(validation))
        fitted = fit_posterior(net, dataset, config.method_options, ctx)
        elbo = -AnalyticKLELBO(num_particles=ELBO_DRAWS).loss(
            fitted.model, fitted.guide, dataset.x_train, dataset.y_train
        )
        rmse = metric("regression", fitted.predict(dataset.x_test), dataset.y_test, target_std=dataset.target_std)
        return {"rmse": rmse, "elbo": elbo, "final_elbo": fitted.history.elbo[-1]}

    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    plain = copy.deepcopy(net)
    plain_rmse = train_plain(
        plain,
        dataset,
        epochs=config.train.epochs,
        lr=config.optim.lr,
        batch_size=config.data.batch_size,
        seed=config.seed,
        validation=validation,
        patience=config.train.patience,
    )
    return {"plain": plain_rmse, "scratch": sbnn(net), "warm": sbnn(copy.deepcopy(plain).train())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--sets", nargs="+", help="data set folders (default: every folder with a data.txt)")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.sets or sorted(path.name for path in args.data_root.iterdir() if (path / "data.txt").exists())
    print(
        "| data set | plain | sBNN from scratch | ELBO (kept, last epoch) | sBNN from the plain weights "
        "| ELBO (kept, last epoch) | objective prefers |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        result = compare(args.data_root, name, args.split, args.overrides)
        scratch, warm = result["scratch"], result["warm"]
        preferred = "warm start" if warm["final_elbo"] > scratch["final_elbo"] else "scratch"
        print(
            f"| {name} | {result['plain']:.4g} | {scratch['rmse']:.4g} | {scratch['elbo']:.0f}, {scratch['final_elbo']:.0f} "
            f"| {warm['rmse']:.4g} | {warm['elbo']:.0f}, {warm['final_elbo']:.0f} | {preferred} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
