"""The sBNN's UCI pruning curve (paper 003, Tables 2-3) with several starts, one kept by a rule that reads no
test data (``sbnn.starts``, ``sbnn.keep``).

On each split of each set, fits the packaged ``uci`` config as the runner does (the split's seed, a tenth
of its training rows held out for early stopping) once per start of ``--starts`` (the network's initial
weights and biases multiplied by the factor; 1 is the packaged fit), and prints one JSON line per fit:
its ELBO (−J of eq. 3.6 on the training rows, :func:`bayesprune.methods.sbnn.elbo`), its RMSE on the
held-out training rows, the share of weights with p* < 1/2, and its RMSE at each sparsity of the config on
the held-out training rows (``validation_rmse_*``, what a ranking is chosen on) and on the test split
(``test_rmse_*``) for every ranking: the weights of lowest score removed over the whole network
(``prune.scope = "global"``) or the same fraction in each layer (``"layer"``), scored by inclusion logit
(``sbnn.score = "inclusion"``, paper 003's ranking) or by path (``"path"``). The test split scores every
fit but chooses none. The closing table shows per set and ranking the mean test curve of the packaged
fit (start 1), of the fit of highest ELBO (``keep = "elbo"``) and of lowest held-out training RMSE
(``keep = "validation"``), beside the paper's Table 2 (mean over splits)::

    python benchmarks/uci_starts.py --data-root ../shared/data/uci --sets bostonHousing energy [--splits 2]
        [--starts 1 0.4 0.2 0.1] [--set key=value ...]
"""

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from bayesprune.core.early_stopping import hold_out
from bayesprune.core.predict import metric
from bayesprune.core.pruning import Budget
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import SCORES, elbo, fit_starts
from bayesprune.models import new_net
from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.evaluation import pruning_curve

#: ``prune.scope``: the weights of lowest score removed over the whole network (the paper's ranking) or
#: the same fraction in each layer.
SCOPES = ("global", "layer")
#: Every ranking compared: ``sbnn.score`` and ``prune.scope``.
RANKINGS = [f"{score}-{scope}" for score in SCORES for scope in SCOPES]


def fit_split(config, dataset, index: int) -> list:
    """One record per start of ``config``'s ``sbnn.starts`` on split ``index`` (``dataset``), as the runner fits it."""
    dataset, *validation = hold_out(dataset, config.train.validation, seed=config.seed + index)
    seed = config.seed + index
    split_config = config.for_data(dataset.num_train)
    options = config.method_options
    net = new_net(config, dataset.input_shape, dataset.output_dim, seed=seed)
    ctx = FitContext.from_config(config, dataset, device=torch.device("cpu"), seed=seed, validation=tuple(validation))
    held_out = replace(dataset, x_test=validation[0], y_test=validation[1])
    records = []
    for factor, fitted in zip(options.starts, fit_starts(net, dataset, options, ctx)):
        curves = {}
        for ranking in RANKINGS:
            fitted.score, scope = ranking.split("-")
            for part, rows in (("validation", held_out), ("test", dataset)):
                curves[f"{part}_rmse_{ranking}"] = pruning_curve(
                    fitted,
                    rows,
                    sparsities=split_config.prune.sparsities,
                    budget=lambda sparsity, scope=scope: Budget(sparsity=sparsity, scope=scope),
                    include_biases=config.prune.include_biases,
                )
        probs = torch.cat([p.flatten() for p in fitted.inclusion_probabilities().values()])
        records.append(
            {
                "split": index,
                "start": factor,
                "elbo": round(elbo(fitted, dataset, options, seed=ctx.seed), 1),
                "validation_rmse": round(
                    metric("regression", fitted.predict(validation[0]), validation[1], target_std=dataset.target_std), 4
                ),
                "spike_share": round(float((probs < 0.5).double().mean()), 3),
                **{key: [round(row["test_rmse"], 4) for row in curve] for key, curve in curves.items()},
            }
        )
    return records


def kept(records: list, rule: str) -> dict:
    """The record ``sbnn.keep = rule`` keeps of one split's starts (it reads no test RMSE)."""
    if rule == "elbo":
        return max(records, key=lambda record: record["elbo"])
    return min(records, key=lambda record: record["validation_rmse"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--sets", nargs="+", default=["bostonHousing", "energy"])
    parser.add_argument("--splits", type=int, default=2, help="the first K splits of each set")
    parser.add_argument("--starts", type=float, nargs="+", default=[1.0, 0.4, 0.2, 0.1])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lines = []
    for name in args.sets:
        config = load_config(
            "uci",
            [
                f"data.root={json.dumps(str(args.data_root.resolve()))}",
                f"data.name={json.dumps(name)}",
                f"data.splits={list(range(args.splits))}",
                f"sbnn.starts={list(args.starts)}",
                *args.overrides,
            ],
        )
        by_split = []
        for index, dataset in enumerate(load_datasets(config)):
            records = fit_split(config, dataset, index)
            for record in records:
                print(json.dumps({"set": name, **record}), flush=True)
            by_split.append(records)
        sparsities = config.prune.sparsities
        paper = config.reference.values.get(name)
        rows = {
            "packaged (start 1)": [next(r for r in records if r["start"] == 1.0) for records in by_split],
            "keep = elbo": [kept(records, "elbo") for records in by_split],
            "keep = validation": [kept(records, "validation") for records in by_split],
        }
        if not lines:
            lines += [
                "| set | fit | starts kept | " + " | ".join(f"{d:g}" for d in sparsities) + " |",
                "|---|---|---|" + "---|" * len(sparsities),
            ]
        for ranking in RANKINGS:
            for label, chosen in rows.items():
                key = f"test_rmse_{ranking}"
                means = [statistics.mean(record[key][i] for record in chosen) for i in range(len(sparsities))]
                starts = ", ".join(f"{record['start']:g}" for record in chosen)
                lines.append(
                    f"| {name} | {label}, {ranking} | {starts} | " + " | ".join(f"{m:.3g}" for m in means) + " |"
                )
        if paper:
            lines.append(f"| {name} | paper 003 | | " + " | ".join(f"{v:.2f}" for v in paper) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
