"""Do restarts of the sBNN agree on feature importance? scikit-learn's breast-cancer and diabetes tables
as CSV files, a small MLP, ``chains`` restarts pooled (issue 38, item 1).

For every setting (``--set`` overrides, several settings separated by ``--setting``) it fits the
restarts and prints, from the run's ``posterior.nc`` (:func:`~bayesprune.analysis.importance.pooled_importance_of`):

- the lowest Spearman rank correlation of ψ(p_c) between any two restarts;
- the most inputs by which two restarts' selection lists differ (each restart's selection read from its
  own draws alone, the same rule as the pooled list), and the same for ``--selection empirical-null``
  (each restart's log ψ(p_c)) with the size of the pooled empirical-null list;
- how many features' pooled interval (``psi_low``-``psi_high`` of ``importance.csv`` and the report)
  covers all restarts' ψ(p_c);
- the largest R-hat; the held-out error (%) or RMSE;
- with more than 4 restarts (``--set chains=8``), the share of the sets of 4 of them whose lowest
  Spearman is 0.9 or more: how often a run of 4 would meet the target;
- whether issue 38's first done-when holds: lowest Spearman >= 0.9, selections differ by at most one
  input, every interval covers every restart.

Settings are compared on HELD-OUT TRAINING ROWS: the table's training part (80%, ``--split-seed``) is
cut again into a fitting part and a validation part (a quarter), which the run sees as its "test"
split; the real test rows are never read unless ``--final`` is given, which fits on the whole
training part and scores on the test part (for the numbers quoted in the docs, after choosing).
Without ``--config`` the run is a CSV config written by hand, which takes ``sbnn-table``'s settings for
every key it leaves out.

    OMP_NUM_THREADS=1 python benchmarks/importance_restarts.py --data diabetes --split-seed 1 --set chains=8 \
        --set "sbnn.starts=[1.0]" --setting --set chains=8   # sbnn-table's comments
    OMP_NUM_THREADS=1 python benchmarks/importance_restarts.py --data diabetes --split-seed 1 --set chains=16 \
        --set optim.lr=0.001 --set sbnn.init_scale=0.05   # the setting not taken (sbnn-table's comments)
    OMP_NUM_THREADS=1 python benchmarks/importance_restarts.py --final   # docs/reproductions.md
"""

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bayesprune.analysis.importance import agreed_tiers, pooled_importance, pooled_importance_of, tiers_text
from bayesprune.pipeline.config import RunConfig, apply_overrides, read_config
from bayesprune.pipeline.importance import empirical_null_record
from bayesprune.pipeline.runner import run

TARGET = "target"
TASKS = {"breast_cancer": "classification", "diabetes": "regression", "friedman1": "regression"}
#: Friedman's first function (make_friedman1): y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 + noise,
#: inputs 5-19 pure noise; 500 rows.
RELEVANT = {"friedman1": ["x0", "x1", "x2", "x3", "x4"]}


def write_tables(name: str, folder: Path, *, split_seed: int, final: bool) -> tuple:
    """The table as CSV files (fit, score): the training part and the test part (``final``), or a
    fitting part and a validation part of the training rows."""
    import sklearn.datasets

    if name == "friedman1":
        import pandas as pd

        x, y = sklearn.datasets.make_friedman1(500, n_features=20, noise=1.0, random_state=split_seed)
        frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(20)]).assign(target=y)
    else:
        frame = getattr(sklearn.datasets, f"load_{name}")(as_frame=True).frame
    rows = np.random.default_rng(split_seed).permutation(len(frame))
    train, test = rows[: int(0.8 * len(rows))], rows[int(0.8 * len(rows)) :]
    if not final:
        train, test = train[: int(0.75 * len(train))], train[int(0.75 * len(train)) :]
    paths = folder / f"{name}-fit.csv", folder / f"{name}-score.csv"
    frame.iloc[train].to_csv(paths[0], index=False)
    frame.iloc[test].to_csv(paths[1], index=False)
    return paths


def empirical_null_selection(psi) -> np.ndarray:
    """Which inputs ``bayesprune importance --selection empirical-null`` (level 0.1) selects on one ψ."""
    rows = [{"feature": j, "psi": float(value)} for j, value in enumerate(psi)]
    chosen = set(empirical_null_record(rows, fdr=0.1, restarts=1)["selected"])
    return np.array([j in chosen for j in range(len(psi))])


def agreement(idata, relevant=None) -> dict:
    """Restart agreement of one run's posterior (see the module docstring), and where the relevant
    inputs are known, the pooled selection's power and false-discovery proportion."""
    pooled = pooled_importance_of(idata)
    draws = idata.posterior["psi"].transpose("chain", "draw", "feature").values
    at_p = idata["variational"]["psi"].transpose("chain", "feature").values
    chains = range(len(at_p))
    selections = [
        np.array([row["selected"] for row in pooled_importance(draws[c : c + 1], at_p[c : c + 1])]) for c in chains
    ]
    nulls = [empirical_null_selection(at_p[c]) for c in chains]
    pairs = list(itertools.combinations(chains, 2))
    rho = {pair: spearmanr(at_p[pair[0]], at_p[pair[1]])[0] for pair in pairs}
    fours = list(itertools.combinations(chains, 4))
    truth = (
        {}
        if relevant is None
        else {
            "power": sum(row["selected"] for row in pooled if row["feature"] in relevant) / len(relevant),
            "fdp": sum(row["selected"] and row["feature"] not in relevant for row in pooled)
            / max(1, sum(row["selected"] for row in pooled)),
            "top_k_correct": len({row["feature"] for row in pooled if row["rank"] <= len(relevant)} & set(relevant)),
        }
    )
    return {
        **truth,
        "min_spearman": min(rho.values(), default=float("nan")),
        # With more than 4 restarts: how often 4 of them would meet the Spearman target (every set of 4).
        "fours_agreeing": sum(min(rho[pair] for pair in itertools.combinations(four, 2)) >= 0.9 for four in fours)
        / max(1, len(fours)),
        "max_selection_difference": max((int((selections[a] != selections[b]).sum()) for a, b in pairs), default=0),
        "selected": int(sum(row["selected"] for row in pooled)),
        "max_empirical_null_difference": max((int((nulls[a] != nulls[b]).sum()) for a, b in pairs), default=0),
        "empirical_null_selected": len(empirical_null_record(pooled, fdr=0.1, restarts=len(at_p))["selected"]),
        "covered": sum(
            row["psi_low"] <= row["restart_low"] and row["restart_high"] <= row["psi_high"] for row in pooled
        ),
        "features": len(pooled),
        "max_r_hat": max(row["r_hat"] for row in pooled),
        "psi_range": (min(row["psi"] for row in pooled), max(row["psi"] for row in pooled)),
        "tiers": tiers_text(agreed_tiers(pooled)),
    }


def met(result: dict) -> bool:
    """Issue 38's first done-when on one table: the restarts' ψ ranks agree (lowest Spearman >= 0.9), their
    selection lists differ by at most one input, and every feature's interval covers every restart."""
    return (
        result["min_spearman"] >= 0.9
        and result["max_selection_difference"] <= 1
        and result["covered"] == result["features"]
    )


def measure(name: str, overrides: list, folder: Path, *, split_seed: int, final: bool, hidden: str, base=None) -> dict:
    import arviz as az

    fit, score = write_tables(name, folder, split_seed=split_seed, final=final)
    start = {} if base is None else read_config(base)  # {}: a user's own config, every other key at its default
    config = RunConfig.from_dict(
        apply_overrides(
            start,
            [
                "method='sbnn'",
                "data.dataset='csv'",
                f"data.train='{fit}'",
                f"data.test='{score}'",
                f"data.target='{TARGET}'",
                f"data.task='{TASKS[name]}'",
                *([f"model.hidden={hidden}"] if hidden else []),
                "baseline.enabled=false",
                "prune.sparsities=[0.0]",
                "device='cpu'",
                *overrides,
            ],
        )
    )
    out = folder / f"run-{name}"
    start = time.perf_counter()
    metrics = run(config, out, force=True)
    seconds = time.perf_counter() - start
    metric = "test_error" if TASKS[name] == "classification" else "test_rmse"
    return {
        **agreement(az.from_netcdf(str(out / "posterior.nc")), RELEVANT.get(name)),
        "held_out": metrics[metric],
        "chains": metrics["chains"],
        "seconds": seconds,
    }


def settings(argv: list) -> list:
    """``--set`` lists of every ``--setting``-separated group (one empty group: the defaults)."""
    groups, current = [], []
    for argument in argv + ["--setting"]:
        if argument == "--setting":
            groups.append(current)
            current = []
        else:
            current.append(argument)
    return [[value for flag, value in zip(group[::2], group[1::2]) if flag == "--set"] for group in groups]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--set") if "--set" in argv else (argv.index("--setting") if "--setting" in argv else len(argv))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["breast_cancer", "diabetes"], choices=list(TASKS))
    parser.add_argument(
        "--hidden", default=None, help="widths of the MLP's hidden layers, e.g. [16] (default: the config's)"
    )
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--final", action="store_true", help="fit on the training part, score on the test part")
    parser.add_argument(
        "--config",
        default=None,
        help="a packaged config or TOML file to start from (default: none, "
        "every key at its default as in a config written by hand)",
    )
    args = parser.parse_args(argv[:split])
    for overrides in settings(argv[split:]):
        for name in args.data:
            with tempfile.TemporaryDirectory() as folder:
                result = measure(
                    name,
                    overrides,
                    Path(folder),
                    split_seed=args.split_seed,
                    final=args.final,
                    hidden=args.hidden,
                    base=args.config,
                )
            low, high = result["psi_range"]
            print(
                f"{name:14s} {' '.join(overrides) or '(defaults)'}: chains {result['chains']}, "
                f"min Spearman {result['min_spearman']:.3f}, selections differ by <= {result['max_selection_difference']} "
                f"({result['selected']} selected; empirical null: <= {result['max_empirical_null_difference']}, "
                f"{result['empirical_null_selected']} selected), intervals covering all {result['chains']} restarts: "
                f"{result['covered']} of {result['features']}, "
                f"max R-hat {result['max_r_hat']:.3f}, psi {low:.3f}-{high:.3f}, held-out {result['held_out']:.4g}, "
                + (
                    f"sets of 4 restarts at Spearman >= 0.9: {result['fours_agreeing']:.0%}, "
                    if result["chains"] > 4
                    else ""
                )
                + f"{result['seconds']:.0f} s"
                + (
                    f", power {result['power']:.2f}, FDP {result['fdp']:.2f}, relevant in the top 5: {result['top_k_correct']}"
                    if "power" in result
                    else ""
                )
                + f"; done-when met: {'yes' if met(result) else 'no'}; tiers the restarts agree on: {result['tiers']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
