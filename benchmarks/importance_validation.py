"""Selection against known truth (issue 38, item 4): Friedman's first function with 5 relevant inputs
of 20 (y = 10 sin(π x0 x1) + 20 (x2 − ½)² + 10 x3 + 5 x4 + N(0, 1), inputs 5-19 noise; scikit-learn's
``make_friedman1``), a few hundred rows, several seeds. For each seed it prints the power and the
false-discovery proportion of

- the sBNN's selection (every restart of ``chains = "auto"`` pooled, the Bayesian FDR rule at 0.1,
  :func:`~bayesprune.analysis.importance.pooled_importance_of`), fitted from a CSV by ``bayesprune run``;
- permutation importance (scikit-learn) of the plain network of the same shape (``MLPRegressor``,
  ``--hidden`` units), on held-out training rows, an input selected when its mean importance is
  above zero by more than twice its standard error over the repeats (the one-sided 0.05 reading);
- the lasso (``LassoCV``, 5-fold): the inputs of non-zero coefficient;
- a random forest's permutation importance, thresholded as the network's;

and for each, how many of the 5 relevant inputs its 5 highest-ranked inputs hold.

    OMP_NUM_THREADS=1 python benchmarks/importance_validation.py --seeds 0 1 2 3 4 --rows 500
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from importance_restarts import TARGET  # noqa: E402

RELEVANT = 5


def simulate(seed: int, rows: int, features: int):
    from sklearn.datasets import make_friedman1

    return make_friedman1(rows, n_features=features, noise=1.0, random_state=seed)


def scores(selected: np.ndarray, ranking: np.ndarray) -> dict:
    """Power, false-discovery proportion and relevant inputs among the top 5 (inputs 0-4 relevant)."""
    relevant = np.arange(len(selected)) < RELEVANT
    return {
        "power": selected[relevant].mean(),
        "fdp": (selected & ~relevant).sum() / max(1, selected.sum()),
        "top5": int(relevant[np.argsort(-ranking, kind="stable")[:RELEVANT]].sum()),
    }


def sbnn_selection(x, y, folder: Path, overrides: list) -> tuple:
    import arviz as az
    import pandas as pd

    from bayesprune.analysis.importance import pooled_importance_of
    from bayesprune.pipeline.config import RunConfig, apply_overrides
    from bayesprune.pipeline.runner import run

    path = folder / "table.csv"
    pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])]).assign(**{TARGET: y}).to_csv(path, index=False)
    config = RunConfig.from_dict(
        apply_overrides(
            {},
            [
                "method='sbnn'",
                "data.dataset='csv'",
                f"data.path='{path}'",
                f"data.target='{TARGET}'",
                "data.task='regression'",
                "baseline.enabled=false",
                "prune.droprates=[0.0]",
                "device='cpu'",
                *overrides,
            ],
        )
    )
    run(config, folder / "run", force=True)
    rows = pooled_importance_of(az.from_netcdf(str(folder / "run" / "posterior.nc")))
    return np.array([row["selected"] for row in rows]), np.array([row["psi"] for row in rows])


def permutation_selection(model, x, y, seed: int) -> tuple:
    """Fit on 80% of the rows, permute on the other 20%; selected when mean > 2 standard errors."""
    from sklearn.inspection import permutation_importance
    from sklearn.model_selection import train_test_split

    x_fit, x_held, y_fit, y_held = train_test_split(x, y, test_size=0.2, random_state=seed)
    model.fit(x_fit, y_fit)
    result = permutation_importance(model, x_held, y_held, n_repeats=20, random_state=seed)
    standard_error = result.importances_std / np.sqrt(result.importances.shape[1])
    return result.importances_mean > 2 * standard_error, result.importances_mean


def lasso_selection(x, y, seed: int) -> tuple:
    from sklearn.linear_model import LassoCV
    from sklearn.preprocessing import StandardScaler

    coefficients = LassoCV(cv=5, random_state=seed).fit(StandardScaler().fit_transform(x), y).coef_
    return coefficients != 0, np.abs(coefficients)


def main(argv=None):
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=100, help="hidden units of both networks (default 100)")
    parser.add_argument("--set", action="append", default=[], help="config override of the sBNN run (repeatable)")
    args = parser.parse_args(argv)
    totals = {}
    for seed in args.seeds:
        x, y = simulate(seed, args.rows, args.features)
        with tempfile.TemporaryDirectory() as folder:
            results = {
                "sbnn": sbnn_selection(x, y, Path(folder), [f"model.hidden=[{args.hidden}]", f"seed={seed}", *args.set])
            }
        network = make_pipeline(
            StandardScaler(),
            MLPRegressor(hidden_layer_sizes=(args.hidden,), max_iter=2000, early_stopping=True, random_state=seed),
        )
        results["network permutation"] = permutation_selection(network, x, y, seed)
        results["lasso"] = lasso_selection(x, y, seed)
        results["forest permutation"] = permutation_selection(
            RandomForestRegressor(300, random_state=seed, n_jobs=1), x, y, seed
        )
        for name, (selected, ranking) in results.items():
            result = scores(selected, ranking)
            totals.setdefault(name, []).append(result)
            print(
                f"seed {seed} {name:20s} selected {int(selected.sum()):2d}, power {result['power']:.2f}, "
                f"FDP {result['fdp']:.2f}, relevant in the top 5: {result['top5']}",
                flush=True,
            )
    for name, results in totals.items():
        mean = {key: np.mean([r[key] for r in results]) for key in results[0]}
        print(
            f"mean over {len(args.seeds)} seeds, {name:20s}: power {mean['power']:.2f}, FDR {mean['fdp']:.2f}, "
            f"relevant in the top 5: {mean['top5']:.1f}"
        )


if __name__ == "__main__":
    main()
