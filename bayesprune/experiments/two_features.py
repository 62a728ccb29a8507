"""Experiment 1 of paper 003 (section 4.1): the importance ψ of two features of shifting influence.

For every α of a grid, y = (1 − α)x₁ + αx₂ + ε is simulated (``feature-importance-2var``), the sBNN is
fitted and ψ₁, ψ₂ (eq. 3.18) are set against α and against the actual relevance
I = 1 − Σ(yᵢ − αx_{i2})² / Σyᵢ² of x₂. Done when ψ₂ rises and ψ₁ falls with α: Spearman's ρ of
ψ₂ with α at least ``min_spearman`` and that of ψ₁ at most −``min_spearman``.
"""

from bayesprune.analysis.tables import markdown_table, write_csv
from bayesprune.core.statistics import spearman
from bayesprune.experiments.common import (
    Experiment,
    Stopwatch,
    averaged_importance,
    criterion,
    load,
    number,
    number_list,
    plot_series,
    write_report,
)
from bayesprune.pipeline.experiments import register_experiment

PAPER_ALPHAS = [round(0.05 * k, 2) for k in range(21)]


@register_experiment("feature-importance-2var")
class TwoFeatureImportance(Experiment):
    """ψ₁, ψ₂ and φ₁, φ₂ along the paper's α grid {0, 0.05, …, 1}.

    Options (``[experiment]``):
        alphas: the α grid, numbers in [0, 1] (at least 3; default the paper's 21 values).
        min_spearman: the done-when bound on |ρ| (default 0.9).
        repeats: sBNN fits per α (seeds ``seed``, ``seed + 1``, …) whose ψ is averaged (default 1,
            the paper's single fit).
    """

    dataset = "feature-importance-2var"
    options = {
        "alphas": (PAPER_ALPHAS, number_list(0.0, 1.0, min_length=3)),
        "min_spearman": (0.9, number(0.0, 1.0)),
        "repeats": (1, number(1, 100, integer=True)),
    }

    def run(self, config, folder, *, device, progress=False):
        options = self.resolve(config)
        watch = Stopwatch()
        rows = []
        for alpha in sorted(options["alphas"]):
            dataset = load(config, alpha=alpha)
            result = averaged_importance(config, dataset, device=device, repeats=options["repeats"])
            psi, phi = result.psi.tolist(), result.phi.tolist()
            rows.append(
                {
                    "alpha": alpha,
                    "importance": dataset.extras["importance"],
                    "psi1": psi[0],
                    "psi2": psi[1],
                    "phi1": phi[0],
                    "phi2": phi[1],
                    "train_seconds": round(result.seconds, 3),
                }
            )
            if progress:
                print(f"alpha={alpha:.2f}: psi=({psi[0]:.4f}, {psi[1]:.4f})", flush=True)
        alphas = [row["alpha"] for row in rows]
        metrics = {
            "spearman_psi1_alpha": spearman([row["psi1"] for row in rows], alphas),
            "spearman_psi2_alpha": spearman([row["psi2"] for row in rows], alphas),
            "spearman_psi1_importance": spearman([row["psi1"] for row in rows], [row["importance"] for row in rows]),
            "spearman_psi2_importance": spearman([row["psi2"] for row in rows], [row["importance"] for row in rows]),
            "table": rows,
        }
        bound = options["min_spearman"]
        metrics["criteria"] = {
            "psi2_rises": metrics["spearman_psi2_alpha"] >= bound,
            "psi1_falls": metrics["spearman_psi1_alpha"] <= -bound,
        }
        metrics["seconds"] = round(float(watch), 1)
        write_csv(folder / "importance_paths.csv", rows, digits=8)
        plot_series(
            folder / "psi_vs_importance.png",
            [row["importance"] for row in rows],
            {"ψ1": [row["psi1"] for row in rows], "ψ2": [row["psi2"] for row in rows]},
            xlabel="actual relevance I of x2",
            ylabel="ψ (eq. 3.18)",
            title="Experiment 1: I vs ψ1, ψ2",
        )
        plot_series(
            folder / "psi_vs_alpha.png",
            alphas,
            {"ψ1": [row["psi1"] for row in rows], "ψ2": [row["psi2"] for row in rows]},
            xlabel="α",
            ylabel="ψ (eq. 3.18)",
            title="Experiment 1: ψ paths vs α",
        )
        write_report(
            folder,
            "Experiment 1: relationship between influence and ψ (paper 003, section 4.1)",
            [
                f"y = (1 − α)x1 + αx2 + ε, {len(rows)} values of α, sBNN {config.model.options.get('hidden')} "
                f"fitted for {config.train.epochs} epochs, ψ averaged over {options['repeats']} fit(s) per α; {metrics['seconds']} s in all.",
                "## Done when\n\n"
                + "\n".join(
                    [
                        criterion(
                            f"ψ2 rises with α: Spearman ρ = {metrics['spearman_psi2_alpha']:.3f} ≥ {bound}",
                            metrics["criteria"]["psi2_rises"],
                        ),
                        criterion(
                            f"ψ1 falls with α: Spearman ρ = {metrics['spearman_psi1_alpha']:.3f} ≤ −{bound}",
                            metrics["criteria"]["psi1_falls"],
                        ),
                    ]
                ),
                f"Spearman ρ against I: ψ1 {metrics['spearman_psi1_importance']:.3f}, "
                f"ψ2 {metrics['spearman_psi2_importance']:.3f}.",
                "## Importance paths\n\n"
                + markdown_table(rows, ["alpha", "importance", "psi1", "psi2", "phi1", "phi2"]),
                "![I vs psi](psi_vs_importance.png)\n\n![psi vs alpha](psi_vs_alpha.png)",
            ],
        )
        return metrics
