"""Which posterior does the sBNN objective prefer on UCI: the dense one the packaged ``uci`` rule finds,
or a sparse one whose pruning curve stays flat as in paper 003's Table 2?

On one split of each set, with a tenth of its training rows standing in for the test split (the real
test split is never read), fits the packaged ``uci`` config with the starting network's weights and
biases multiplied by each ``--shrink`` factor (1 is the packaged fit; a smaller start puts more
weights near the spike of width τ0, where the data lets them stay), and reports per fit: the ELBO (−J
of eq. 3.6 on the training part, 32 draws of W), the share of weights with p* < 1/2, and the held-out
RMSE with 0, 25, 50 and 75% of the weights removed (lowest inclusion logit first)::

    python benchmarks/uci_sparse_basin.py --data-root ../shared/data/uci --sets bostonHousing energy [--split 0]
        [--shrink 1 0.4 0.2 0.1] [--set key=value ...]

Each fit prints one JSON line.
"""

import argparse
import json
from pathlib import Path

import pyro
import torch

from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import fit_posterior
from bayesprune.models import new_net
from bayesprune.pipeline.evaluation import pruning_curve
from uci_objective import ELBO_DRAWS, held_out_split

SPARSITIES = [0.0, 0.25, 0.5, 0.75]


def fit(data_root: Path, name: str, split: int, shrink: float, overrides=()) -> dict:
    config, dataset, validation = held_out_split(data_root, name, split, overrides)
    pyro.set_rng_seed(config.seed)
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed)
    with torch.no_grad():
        for param in net.parameters():
            param.mul_(shrink)
    ctx = FitContext.from_config(config, dataset, device=torch.device("cpu"), validation=tuple(validation))
    fitted = fit_posterior(net, dataset, config.method_options, ctx)
    elbo = -AnalyticKLELBO(num_particles=ELBO_DRAWS).loss(fitted.model, fitted.guide, dataset.x_train, dataset.y_train)
    logits = torch.cat([value.flatten() for value in fitted.guide.inclusion_logits().values()])
    curve = pruning_curve(fitted, dataset, sparsities=SPARSITIES)
    return {
        "set": name,
        "split": split,
        "shrink": shrink,
        "elbo": round(elbo, 1),
        "spike_share": round(float((logits < 0).double().mean()), 3),
        "held_out_rmse": dict(zip(map(str, SPARSITIES), (round(row["test_rmse"], 3) for row in curve))),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--sets", nargs="+", default=["bostonHousing", "energy"])
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--shrink", type=float, nargs="+", default=[1.0, 0.4, 0.2, 0.1])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.sets:
        for shrink in args.shrink:
            print(json.dumps(fit(args.data_root, name, args.split, shrink, args.overrides)), flush=True)


if __name__ == "__main__":
    main()
