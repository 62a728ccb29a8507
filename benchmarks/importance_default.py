"""Which selection rule should ``bayesprune importance`` use by default? Known-truth tables that no setting
was chosen on, fitted as a user would fit them, with the user's own networks (issue 49, item 1).

Simulations (500 rows, seeds 100, 101, 102 by default; every run's CSV written with a header x0, x1, ...):

- ``friedman1``: scikit-learn's ``make_friedman1(n_features=25, noise=1)``, y = 10 sin(π x0 x1) +
  20 (x2 − ½)² + 10 x3 + 5 x4 + N(0, 1), inputs x5-x24 uniform noise: 5 relevant of 25.
- ``classification``: ``make_classification(n_features=30, n_informative=5, n_redundant=0,
  shuffle=False)``: x0-x4 informative, x5-x29 noise, two classes. ``n_redundant=0`` (scikit-learn's default
  is 2): a redundant column is an exact linear combination of the informative ones, so it is neither
  relevant nor irrelevant given them, and no truth could score it.

Networks (``model.factory``, :mod:`user_nets`): one hidden layer of 50 units and two of 100. Each run is a
CSV config written by hand (``method = "sbnn"``, the data, the factory; every other key from the packaged
``sbnn-table`` as a CSV run takes them), ``--chains`` restarts. The runs are kept under ``--runs`` and
reused, so every rule is read from the same fits.

For every rule it prints each fit's power and false-discovery proportion and their means over the fits
(the FDR), with the rule's best cut (the highest power of a top-k set of its ranking at FDP ≤ 0.1).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/importance_default.py --runs ../importance-runs
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from importance_validation import scores  # noqa: E402

RELEVANT = 5
NETWORKS = {"one_layer_50": "user_nets:one_layer_50", "two_layers_100": "user_nets:two_layers_100"}


def friedman1(seed: int, rows: int):
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(rows, n_features=25, noise=1.0, random_state=seed)
    return x, y, "regression"


def classification(seed: int, rows: int):
    from sklearn.datasets import make_classification

    x, y = make_classification(
        rows, n_features=30, n_informative=RELEVANT, n_redundant=0, shuffle=False, random_state=seed
    )
    return x, y, "classification"


def correlated(seed: int, rows: int):
    """importance_validation.py's correlated design (30 inputs, AR(1) 0.5, relevant x0, x6, x12, x18, x24),
    its columns reordered so that the relevant ones come first: for choosing settings, not for the verdict."""
    from importance_validation import correlated as design

    x, y, active = design(seed, rows)
    order = np.concatenate([np.flatnonzero(active), np.flatnonzero(~active)])
    return x[:, order], y, "regression"


def table(name: str):
    """scikit-learn's bundled table ``name`` (no truth known): for the reproducibility of a run (``--reproduce``)."""

    def load(seed: int, rows: int):
        import sklearn.datasets

        data = getattr(sklearn.datasets, f"load_{name}")(as_frame=True)
        task = "classification" if name == "breast_cancer" else "regression"
        return data.data, data.target.to_numpy(), task

    return load


SIMULATIONS = {
    "friedman1": friedman1,
    "classification": classification,
    "correlated": correlated,
    "breast_cancer": table("breast_cancer"),
    "diabetes": table("diabetes"),
}


def folder_of(simulation: str, network: str, seed: int, args) -> Path:
    """Where the fit of one table, network and seed lives under ``--runs`` (its run in ``run/``)."""
    return Path(args.runs) / f"{simulation}-{network}-{seed}{args.tag}"


def fit(simulation: str, network: str, seed: int, args) -> Path:
    """The run of one table and network (reused when ``--runs`` holds it)."""
    import pandas as pd

    from bayesprune.pipeline.config import RunConfig, apply_overrides
    from bayesprune.pipeline.runner import run

    folder = folder_of(simulation, network, seed, args)
    if (folder / "run" / "posterior.nc").is_file():
        return folder / "run"
    folder.mkdir(parents=True, exist_ok=True)
    x, y, task = SIMULATIONS[simulation](seed, args.rows)
    path = folder / "table.csv"
    frame = x if isinstance(x, pd.DataFrame) else pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])])
    frame.assign(y=y).to_csv(path, index=False)
    settings = [
        "method='sbnn'",
        "data.dataset='csv'",
        f"data.path='{path}'",
        "data.target='y'",
        f"data.task='{task}'",
        f"model.factory='{NETWORKS[network]}'",
        f"seed={seed}",
        f"chains={args.chains}",
        "baseline.enabled=false",
        "prune.sparsities=[0.0]",
        "device='cpu'",
        *args.set,
    ]
    run(RunConfig.from_dict(apply_overrides({}, settings)), folder / "run", force=True)
    return folder / "run"


def rules(run: Path) -> dict:
    """Every candidate rule's selection (level 0.1) from the run's ``posterior.nc``: name → boolean mask."""
    import arviz as az
    import torch

    from bayesprune.analysis.importance import pooled_importance_of
    from bayesprune.analysis.selection import select_by_empirical_null, select_by_stability

    idata = az.from_netcdf(str(run / "posterior.nc"))
    at_p = idata["variational"]["psi"].transpose("chain", "feature").values
    pooled = pooled_importance_of(idata)

    def null(psi):
        return select_by_empirical_null(torch.log(torch.as_tensor(psi, dtype=torch.float64)), 0.1).numpy()

    own = np.array([null(psi) for psi in at_p])
    return {
        "bayesian-fdr (pooled inclusion)": np.array([row["selected"] for row in pooled]),
        "empirical-null (pooled log psi)": null(at_p.mean(axis=0)),
        "stability 0.5 (empirical null of each restart)": select_by_stability(own, 0.5).numpy(),
        "stability 0.75 (empirical null of each restart)": select_by_stability(own, 0.75).numpy(),
        "pooled empirical-null and stability 0.75": null(at_p.mean(axis=0)) & select_by_stability(own, 0.75).numpy(),
    }


def fitted_runs(args):
    """``(simulation, network, seed, run folder)`` of every fit of ``args``' grid that has its posterior."""
    for simulation in args.simulations:
        for network in args.networks:
            for seed in args.seeds:
                run = folder_of(simulation, network, seed, args) / "run"
                if (run / "posterior.nc").is_file():
                    yield simulation, network, seed, run


def evaluate(args):
    """Power and false-discovery proportion of every rule on every fitted run, and their means."""
    totals = {}
    for simulation, network, seed, run in fitted_runs(args):
        for name, selected in rules(run).items():
            relevant = np.arange(len(selected)) < RELEVANT
            result = scores(selected, selected.astype(float), relevant, 0.1)
            totals.setdefault(name, []).append(result)
            totals.setdefault((name, simulation, network), []).append(result)
            print(
                f"{simulation} {network} seed {seed} {name}: power {result['power']:.2f}, "
                f"FDP {result['fdp']:.2f}, selected {int(selected.sum())}",
                flush=True,
            )
    print("\n| rule | simulation | network | fits | power | FDR (mean FDP) |\n|---|---|---|---|---|---|")
    for key, results in totals.items():
        name, simulation, network = (key, "all", "all") if isinstance(key, str) else key
        power, fdr = (np.mean([result[k] for result in results]) for k in ("power", "fdp"))
        print(f"| {name} | {simulation} | {network} | {len(results)} | {power:.2f} | {fdr:.2f} |")


def reproduce(args):
    """Two runs from different seeds, read from one run of 2k restarts: restarts 0..k-1 (seeds s..s+k-1) against
    k..2k-1 (seeds s+k..), each pooled as ``bayesprune importance`` pools a run of k. Prints the Spearman of
    their pooled group rankings (groups of the run's correlation level on its training rows) and how many
    groups their selections (the default rule, stability) differ by."""
    import arviz as az
    from scipy.stats import spearmanr

    from bayesprune.analysis.groups import correlation_groups, group_names, group_values
    from bayesprune.analysis.importance import stability_selection
    from bayesprune.pipeline.rundir import load_run

    for simulation, network, seed, run in fitted_runs(args):
        _, dataset, _ = load_run(run)
        groups = correlation_groups(dataset.x_train.double().numpy())
        at_p = az.from_netcdf(str(run / "posterior.nc"))["variational"]["psi"].transpose("chain", "feature")
        grouped = group_values(at_p.values, groups)
        half = len(grouped) // 2
        first, second = grouped[:half], grouped[half : 2 * half]
        rho = spearmanr(first.mean(axis=0), second.mean(axis=0))[0]
        chosen = [np.array(stability_selection(part)[0]) for part in (first, second)]
        names = group_names(groups, [str(name) for name in at_p["feature"].values])
        print(
            f"{simulation} {network} seed {seed}: {len(groups)} groups, two runs of {half} restarts: "
            f"Spearman {rho:.3f}, selections differ by {int((chosen[0] != chosen[1]).sum())} groups "
            f"({sum(chosen[0])} and {sum(chosen[1])} selected: "
            f"{[n for n, k in zip(names, chosen[0]) if k]} / {[n for n, k in zip(names, chosen[1]) if k]})",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="folder of the runs (kept and reused)")
    parser.add_argument("--simulations", nargs="+", default=["friedman1", "classification"], choices=list(SIMULATIONS))
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=list(NETWORKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--set", action="append", default=[], help="a config override of every run")
    parser.add_argument("--tag", default="", help="appended to the runs' folder names (settings compared)")
    parser.add_argument("--evaluate", action="store_true", help="only read the runs there are and score the rules")
    parser.add_argument("--reproduce", action="store_true", help="fit, then compare the two halves of the restarts")
    args = parser.parse_args(argv)
    if args.evaluate:
        return evaluate(args)
    import torch

    torch.set_num_threads(1)
    for seed in args.seeds:
        for simulation in args.simulations:
            for network in args.networks:
                print(f"fitted {fit(simulation, network, seed, args)}", flush=True)
    return reproduce(args) if args.reproduce else evaluate(args)


if __name__ == "__main__":
    main()
