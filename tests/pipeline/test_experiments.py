"""The paper's simulation studies (paper 003, section 4.1) as registered experiments."""

import json

import numpy as np
import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.statistics import pearson, ranks, spearman
from bayesprune.data import load_dataset
from bayesprune.experiments import EXPERIMENTS, get_experiment
from bayesprune.experiments.common import averaged_importance, fit_importance, with_dropout
from bayesprune.experiments.selection import candidate_thresholds
from bayesprune.guides import GUIDES, NormalGuide
from bayesprune.models import BayesianNetwork, build_architecture
from bayesprune.models.likelihoods import Gaussian
from bayesprune.models.priors import PRIORS, GaussianPrior
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import run

SIMULATIONS = ["feature-importance-2var", "feature-importance-many", "feature-selection"]

# Tiny settings: few rows, few epochs, few grid points.
TINY = {
    "feature-importance-2var": [
        "data.n=300",
        "train.epochs=3",
        "experiment.alphas=[0.0, 0.5, 1.0]",
        "experiment.repeats=2",
    ],
    "feature-importance-many": [
        "data.n=300",
        "train.epochs=3",
        "experiment.alphas=[1.0, 4.0]",
        'experiment.functions=["linear"]',
    ],
    "feature-selection": [
        "data.n=300",
        "data.num_features=10",
        "train.epochs=3",
        "experiment.folds=2",
        "experiment.cv_epochs=2",
        "experiment.cv_grid=4",
        "experiment.cv_pis=[0.3]",
    ],
}


@pytest.mark.parametrize("name", SIMULATIONS)
def test_packaged_config_selects_its_registered_experiment(name):
    config = load_config(name)
    assert config.experiment.name == name and name in EXPERIMENTS
    assert config.data.dataset == name
    assert config.model.options["hidden"] == [20, 10]  # the paper's 20-10 network
    experiment = get_experiment(config)
    experiment.check(config)
    assert set(experiment.resolve(config)) == set(experiment.options)


@pytest.mark.parametrize(
    "name, assignment, field",
    [
        ("feature-importance-2var", "experiment.alphas=[0.1, 1.5, 0.3]", "experiment.alphas"),
        ("feature-importance-2var", "experiment.alphas=[0.1, 0.1, 0.3]", "experiment.alphas"),
        ("feature-importance-2var", "experiment.alphas=0.5", "experiment.alphas"),
        ("feature-importance-2var", "experiment.min_spearman=2", "experiment.min_spearman"),
        ("feature-importance-2var", "experiment.nonsense=1", "experiment.nonsense"),
        ("feature-importance-2var", "experiment.repeats=0", "experiment.repeats"),
        ("feature-importance-many", "experiment.alphas=[0.0, 1.0]", "experiment.alphas"),
        ("feature-importance-many", 'experiment.functions=["cubic"]', "experiment.functions"),
        ("feature-selection", "experiment.folds=1", "experiment.folds"),
        ("feature-selection", "experiment.folds=2.5", "experiment.folds"),
        ("feature-selection", 'experiment.cv_fit="forest"', "experiment.cv_fit"),
        ("feature-selection", "experiment.cv_pis=[0.1, 1.2]", "experiment.cv_pis"),
        ("feature-selection", "experiment.quantile=-0.1", "experiment.quantile"),
        ("feature-selection", "experiment.one_standard_error=1", "experiment.one_standard_error"),
        ("feature-selection", 'data.dataset="feature-importance-many"', "data.dataset"),
        ("feature-selection", 'model.architecture="lenet-300-100"', "model.architecture"),
    ],
)
def test_check_rejects_bad_options_naming_the_field(name, assignment, field, tmp_path):
    config = load_config(name, [assignment])
    with pytest.raises(ConfigError, match=rf"^{field} ") as error:
        get_experiment(config).check(config)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError):  # the runner checks before writing anything
        run(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


KEYS = {
    "feature-importance-2var": {"spearman_psi1_alpha", "spearman_psi2_alpha", "table", "criteria"},
    "feature-importance-many": {"importance_correlation", "importance_correlation_min", "table", "criteria"},
    "feature-selection": {"selection_accuracy", "test_mse", "cv_active_proportion", "criteria"},
}
FILES = {
    "feature-importance-2var": {"importance_paths.csv", "psi_vs_alpha.png", "psi_vs_importance.png"},
    "feature-importance-many": {"correlations.csv", "importances.csv", "correlation_vs_alpha.png", "phi_vs_beta.png"},
    "feature-selection": {"test_mse.csv", "cv_sparsity.csv", "cv_curve.csv", "cv_sparsity.png"},
}


@pytest.mark.parametrize("name", SIMULATIONS)
def test_tiny_run_writes_metrics_tables_figures_and_report(name, tmp_path):
    config = load_config(name, TINY[name] + ['device="cpu"'])
    returned = run(config, tmp_path / "out")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert KEYS[name] <= set(metrics) and metrics == json.loads(json.dumps(returned))
    written = {path.name for path in (tmp_path / "out").iterdir()}
    assert FILES[name] | {"report.md", "config.toml", "metrics.json"} <= written
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.count("PASS") + report.count("FAIL") == len(metrics["criteria"])
    if name == "feature-importance-many":
        assert set(metrics["importance_correlation"]["linear"]) == {"1", "4"}
    if name == "feature-selection":
        assert set(metrics["selection_accuracy"]) == {"quantile", "cv"}
        assert {"sbnn_full", "bnn_vs_quantile", "bnn_vs_cv", "nn", "nn_dropout", "linear", "bnn_gaussian"} == set(
            metrics["test_mse"]
        )
        assert all(np.isfinite(value) and value > 0 for value in metrics["test_mse"].values())
        assert set(metrics["cv_active_proportion"]) == {"0.3"}


def test_psi_follows_the_stronger_of_two_features():
    """Experiment 1 oracle: with little noise, ψ2 > ψ1 at α = 0.9 and ψ1 > ψ2 at α = 0.1."""
    config = load_config("feature-importance-2var", ["data.n=600", "data.noise=0.1", "train.epochs=30"])
    for alpha, stronger in ((0.9, 1), (0.1, 0)):
        psi = fit_importance(
            config, load_dataset(config.data.dataset, n=600, noise=0.1, alpha=alpha), device=torch.device("cpu")
        ).psi
        assert psi[stronger] > psi[1 - stronger]


@pytest.mark.parametrize("cv_fit", ["linear", "additive"])
def test_selection_is_perfect_on_a_trivially_separable_design(tmp_path, cv_fit):
    """Experiment 3 oracle: 10 features, linear f, almost no noise: both thresholds find Z exactly."""
    config = load_config(
        "feature-selection",
        [
            "data.n=600",
            "data.num_features=10",
            'data.f="linear"',
            "data.noise=0.01",
            "data.pi=0.2",
            "data.alpha=0.5",
            "train.epochs=40",
            "experiment.folds=3",
            f'experiment.cv_fit="{cv_fit}"',
            "experiment.cv_grid=10",
            "experiment.cv_pis=[0.2]",
            "experiment.quantile=0.8",
        ],
    )
    truth = load_dataset("feature-selection", n=600, num_features=10, f="linear", noise=0.01, alpha=0.5).extras[
        "active"
    ]
    assert int(truth.sum()) == 2  # the top-20% quantile rule can then be exact
    metrics = run(config, tmp_path / "out")
    assert metrics["selection_accuracy"] == {"quantile": 1.0, "cv": 1.0}
    assert metrics["cv_active_proportion"] == {"0.2": 0.2}


def test_averaged_importance_is_the_mean_over_restarts():
    config = load_config("feature-importance-2var", ["data.n=200", "train.epochs=2"])
    dataset = load_dataset(config.data.dataset, n=200)
    cpu = torch.device("cpu")
    averaged = averaged_importance(config, dataset, device=cpu, repeats=2)
    first, second = (fit_importance(config, dataset, device=cpu, seed=seed).psi for seed in (0, 1))
    assert not torch.equal(first, second)
    assert torch.allclose(averaged.psi, (first + second) / 2)
    assert torch.allclose(averaged.phi, (averaged.psi - averaged.psi.min()) / (averaged.psi.max() - averaged.psi.min()))


def test_candidate_thresholds_keep_nested_top_fractions():
    phi = torch.tensor([0.3, 0.9, 0.1, 0.5, 0.0, 1.0, 0.7, 0.2])
    thresholds = candidate_thresholds(phi, 4)
    assert [int((phi >= t).sum()) for t in thresholds] == [2, 4, 6, 8]


def test_correlations_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    generator = np.random.default_rng(0)
    x = generator.normal(size=30)
    y = x + generator.normal(size=30)
    tied = np.round(y, 0)  # many ties: average ranks
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, tied) == pytest.approx(stats.spearmanr(x, tied)[0])
    assert np.array_equal(ranks([3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0])
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


def test_dropout_net_is_active_only_while_training():
    net = with_dropout(build_architecture("mlp", (4,), 1, hidden=[8, 8]), 0.5)
    assert sum(isinstance(layer, torch.nn.Dropout) for layer in net) == 2
    x = torch.randn(5, 4)
    net.eval()
    assert torch.equal(net(x), net(x))


def test_gaussian_prior_and_normal_guide_are_registered_and_give_the_normal_kl():
    assert PRIORS["gaussian"] is GaussianPrior and GUIDES["normal"] is NormalGuide
    with pytest.raises(ConfigError, match="^prior.scale "):
        GaussianPrior(scale=0.0)
    net = build_architecture("mlp", (3,), 1, hidden=[4])
    model = BayesianNetwork(net, GaussianPrior(scale=2.0), Gaussian(10, scale=1.0))
    guide = NormalGuide(model, init_scale=0.1)
    x, y = torch.randn(10, 3), torch.randn(10)
    objective = AnalyticKLELBO()
    torch.manual_seed(0)
    loss = objective.differentiable_loss(model, guide, x, y)
    # KL of N(m, 0.1²) from N(0, 2²), summed over all weights, in closed form
    m = guide.loc.detach()
    kl = (np.log(2.0 / 0.1) + (0.1**2 + m**2) / (2 * 2.0**2) - 0.5).sum()
    torch.manual_seed(0)
    params = guide.sample_params()
    nll = -torch.distributions.Normal(model.network(params, x).squeeze(-1), 1.0).log_prob(y).sum()
    assert loss.item() == pytest.approx((nll + kl).item(), rel=1e-4)


def test_command_line_runs_an_experiment_and_refuses_to_overwrite_it(tmp_path, capsys):
    out = tmp_path / "out"
    settings = [arg for assignment in TINY["feature-importance-2var"] for arg in ("--set", assignment)]
    assert main(["run", "feature-importance-2var", "--out", str(out), "--quiet", *settings]) == 0
    assert f"results in {out}" in capsys.readouterr().out
    assert main(["run", "feature-importance-2var", "--out", str(out), "--quiet", *settings]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["report", str(out)]) == 2  # an experiment writes its own report; nothing to regenerate from
