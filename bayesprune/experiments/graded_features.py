"""Experiment 2 of paper 003 (section 4.1): φ against the effect sizes of many features.

For every link f and α of a grid, y = Σⱼ f(xⱼ)βⱼ + ε with βⱼ = j/α is simulated
(``feature-importance-many``), the sBNN is fitted and the Pearson correlation of φⱼ (eq. 3.19) with
βⱼ is recorded. Done when the correlation is at least ``min_correlation_linear`` for the linear f at
every α and at least ``min_correlation_nonlinear`` for the non-linear f (paper: 0.9–0.95).
"""

from bayesprune.analysis.plots import plt, save_figure
from bayesprune.analysis.tables import markdown_table, write_csv
from bayesprune.core.statistics import pearson, spearman
from bayesprune.experiments.common import (
    Experiment,
    Stopwatch,
    averaged_importance,
    choice_list,
    criterion,
    load,
    number,
    number_list,
    plot_series,
    write_report,
)
from bayesprune.pipeline.experiments import register_experiment

LINKS = ("linear", "nonlinear")


@register_experiment("feature-importance-many")
class GradedFeatureImportance(Experiment):
    """corr(φ, β) over links f and the paper's α grid {1, …, 10}.

    Options (``[experiment]``):
        alphas: α values, positive numbers (default 1, 2, …, 10).
        functions: links, a list of ``"linear"``, ``"nonlinear"`` (default both).
        min_correlation_linear, min_correlation_nonlinear: done-when bounds (default 0.9, 0.85).
        repeats: sBNN fits per (f, α) whose ψ is averaged before scaling to φ (default 1).
    """

    dataset = "feature-importance-many"
    options = {
        "alphas": ([float(a) for a in range(1, 11)], number_list(0.0, open_low=True)),
        "functions": (list(LINKS), choice_list(LINKS)),
        "min_correlation_linear": (0.9, number(-1.0, 1.0)),
        "min_correlation_nonlinear": (0.85, number(-1.0, 1.0)),
        "repeats": (1, number(1, 100, integer=True)),
    }

    def run(self, config, folder, *, device, progress=False):
        options = self.resolve(config)
        watch = Stopwatch()
        rows, features = [], []
        for link in options["functions"]:
            for alpha in sorted(options["alphas"]):
                dataset = load(config, alpha=alpha, f=link)
                result = averaged_importance(config, dataset, device=device, repeats=options["repeats"])
                beta = dataset.extras["beta"].tolist()
                phi = result.phi.tolist()
                rows.append(
                    {
                        "f": link,
                        "alpha": alpha,
                        "pearson_phi_beta": pearson(phi, beta),
                        "spearman_phi_beta": spearman(phi, beta),
                        "train_seconds": round(result.seconds, 3),
                    }
                )
                features += [
                    {"f": link, "alpha": alpha, "feature": j + 1, "beta": b, "psi": s, "phi": p}
                    for j, (b, s, p) in enumerate(zip(beta, result.psi.tolist(), phi))
                ]
                if progress:
                    print(f"f={link} alpha={alpha:g}: corr(phi, beta)={rows[-1]['pearson_phi_beta']:.3f}", flush=True)
        correlation = {
            link: {f"{row['alpha']:g}": row["pearson_phi_beta"] for row in rows if row["f"] == link}
            for link in options["functions"]
        }
        minimum = {link: min(values.values()) for link, values in correlation.items()}
        bounds = {link: options[f"min_correlation_{link}"] for link in options["functions"]}
        metrics = {
            "importance_correlation": correlation,
            "importance_correlation_min": minimum,
            "importance_spearman": {
                link: {f"{row['alpha']:g}": row["spearman_phi_beta"] for row in rows if row["f"] == link}
                for link in options["functions"]
            },
            "criteria": {link: minimum[link] >= bounds[link] for link in options["functions"]},
            "table": rows,
        }
        metrics["seconds"] = round(float(watch), 1)
        write_csv(folder / "correlations.csv", rows, digits=8)
        write_csv(folder / "importances.csv", features, digits=8)
        alphas = sorted(options["alphas"])
        plot_series(
            folder / "correlation_vs_alpha.png",
            alphas,
            {link: [correlation[link][f"{a:g}"] for a in alphas] for link in options["functions"]},
            xlabel="α (β_j = j / α)",
            ylabel="Pearson corr(φ, β)",
            title="Experiment 2: corr(φ_j, β_j)",
        )
        _plot_phi_against_beta(folder / "phi_vs_beta.png", features, options["functions"], [alphas[0], alphas[-1]])
        write_report(
            folder,
            "Experiment 2: many features of graded importance (paper 003, section 4.1)",
            [
                f"y = Σ f(x_j) β_j + ε, β_j = j/α, D = {len(features) // max(len(rows), 1)} features, "
                f"{len(rows)} settings × {options['repeats']} fit(s) of {config.train.epochs} epochs; {metrics['seconds']} s in all.",
                "## Done when\n\n"
                + "\n".join(
                    criterion(
                        f"{link} f: min over α of corr(φ, β) = {minimum[link]:.3f} ≥ {bounds[link]}",
                        metrics["criteria"][link],
                    )
                    for link in options["functions"]
                ),
                "## Correlations\n\n" + markdown_table(rows, ["f", "alpha", "pearson_phi_beta", "spearman_phi_beta"]),
                "![correlation vs alpha](correlation_vs_alpha.png)\n\n![phi vs beta](phi_vs_beta.png)",
            ],
        )
        return metrics


def _plot_phi_against_beta(path, features, links, alphas):
    """φ_j against j for the smallest and largest α of each link (the paper's Figure 3)."""
    figure, axes = plt.subplots(1, len(links), figsize=(5 * len(links), 3.8), squeeze=False)
    for axis, link in zip(axes[0], links):
        for alpha in alphas:
            chosen = [row for row in features if row["f"] == link and row["alpha"] == alpha]
            axis.plot([row["feature"] for row in chosen], [row["phi"] for row in chosen], "o-", label=f"α = {alpha:g}")
        axis.set(xlabel="feature j (β_j = j / α)", ylabel="φ_j (eq. 3.19)", title=f"f {link}")
        axis.legend()
    save_figure(figure, path)
