"""PFT and PBP end to end on scikit-learn's digits (paper 000): masks, fine-tuning, certificate, certify."""

import dataclasses
import json
import shutil

import arviz as az
import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.methods import pbp
from bayesprune.methods.pbp.bounds import certificate
from bayesprune.models import new_net
from bayesprune.pipeline.config import RunConfig, load_config
from bayesprune.pipeline.runner import load_run, run
from helpers import OneWeightDecides

SMALL = {
    "data": {"dataset": "digits", "batch_size": 64},
    "model": {"architecture": "mlp", "hidden": [32]},
    "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "train": {"epochs": 3},
    "baseline": {"enabled": False},
}


def config(method: str, options: dict, **sections) -> RunConfig:
    return RunConfig.from_dict({"method": method, **SMALL, method: options, **sections})


@pytest.fixture(scope="module")
def pft_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pft") / "run"
    options = {
        "start_masks": ["magnitude", "random"],
        "sparsities": [0.8, 0.9],
        "pretrain_epochs": 5,
        "finetune_epochs": 2,
        "perturbation_draws": 1,
    }
    return out, run(config("pft", options, prune={"sparsities": [0.0, 0.8], "include_biases": False}), out)


def test_pft_reports_every_start_mask_and_sparsity(pft_run):
    _, metrics = pft_run
    assert metrics["grid"] == [["magnitude", 0.8], ["magnitude", 0.9], ["random", 0.8], ["random", 0.9]]
    for key in (
        "osp_test_error",
        "pft_test_error",
        "osp_equal_epochs_test_error",
        "mask_overlap",
        "pft_expected_sparsity",
    ):
        assert len(metrics[key]) == 4
    assert all(0 <= overlap <= 1 for overlap in metrics["mask_overlap"])
    assert sum(metrics["keep_probability_histogram"]) == metrics["n_weights"] - 32 - 10  # every weight, no bias
    assert len(metrics["perturbation_increase_pft"]) == len(metrics["perturbation_scales"])


def test_pft_network_keeps_exactly_its_sparsity_and_its_pruned_weights_stay_zero(pft_run):
    """After fine-tuning, the first pair's network has exactly ⌊0.8·D⌋ of its D weights at zero, and a
    budget at 0.8 over its scores keeps exactly the non-zero weights."""
    out, metrics = pft_run
    _, _, fitted = load_run(out)
    weights = {name: p for name, p in fitted.net.named_parameters() if name.endswith("weight")}
    total = sum(p.numel() for p in weights.values())
    zeros = sum(int((p == 0).sum()) for p in weights.values())
    assert zeros == int(0.8 * total)
    point = next(row for row in metrics["pruning_curve"] if row["droprate"] == 0.8)
    assert point["test_error"] == pytest.approx(metrics["test_error"])
    assert point["sparsity_weights"] == pytest.approx(zeros / total, abs=1e-6)


def test_pft_on_frozen_random_weights_trains_masks_only(tmp_path):
    """Appendix E.3: the kept weights are the untouched initial weights."""
    cfg = config(
        "pft", {"start_masks": ["magnitude"], "sparsities": [0.5], "masks_only": True, "perturbation_draws": 0}
    )
    run(cfg, tmp_path / "run")
    _, dataset, fitted = load_run(tmp_path / "run")
    initial = dict(new_net(cfg, dataset.input_shape, dataset.output_dim, seed=cfg.seed).named_parameters())
    for name, param in fitted.net.named_parameters():
        kept = param != 0
        torch.testing.assert_close(param[kept], initial[name].detach()[kept])


def toy_pft_mask(options, optim, *, seed: int) -> list:
    """PFT's mask stage (λ alone, the weights frozen at 0.03) on y = 0.03·(x₀ + x₁) with four standard
    normal features, from the start mask {x₂, x₃} at 50% sparsity: the best mask of two weights is
    {x₀, x₁} (x₂ and x₃ only add noise), and the derivative of the mean loss in one λ is about 1e-3
    (about 1e-4 on MNIST's LeNet-300-100). The mask PFT ends with, as a list of 0/1."""
    from torch import nn

    from bayesprune.core.gates import StochasticMasks, block_isotropic
    from bayesprune.core.loop import TensorBatches
    from bayesprune.core.pruning import Budget, prune
    from bayesprune.methods.context import FitContext
    from bayesprune.methods.pft import train_masks

    torch.manual_seed(seed)
    x = torch.randn(640, 4)
    y = 0.03 * (x[:, 0] + x[:, 1])
    net = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(0.03)
    scores = {"weight": torch.tensor([[1.0, 2.0, 3.0, 4.0]])}
    assert prune(scores, Budget(sparsity=0.5))["weight"].int().tolist() == [[0, 0, 1, 1]]
    masks = StochasticMasks(
        block_isotropic(scores, 0.5, options.epsilon),
        parameterization=options.parameterization,
        temperature=options.temperature,
    )
    ctx = FitContext(epochs=50, batch_size=64, optim=optim, seed=seed)
    train_masks(
        ctx,
        "masks",
        net,
        masks,
        TensorBatches(x, y, batch_size=64, seed=seed),
        epochs=50,
        loss=lambda out, target: (out.squeeze(-1) - target).pow(2).mean(),
        weights=False,
        mask_lr=options.mask_lr,
    )
    return prune(masks.ranks({"weight": net.weight.abs()}), Budget(sparsity=0.5))["weight"].int().tolist()


def test_pft_at_the_packaged_lambda_rate_moves_a_wrong_start_mask_to_the_best_one():
    """Issue 27: at the weights' rate of 0.01 (paper 000, appendix D.3) the keep-probabilities of a
    wrong start mask travel less than 0.2 in 500 steps and the mask stays; at the packaged MNIST
    config's λ rate PFT ends at the best mask on every seed."""
    config = load_config("pft-lenet300")
    assert config.method_options.mask_lr is not None and config.method_options.mask_lr > config.optim.lr
    paper = dataclasses.replace(config.method_options, mask_lr=None)
    for seed in range(2):
        assert toy_pft_mask(config.method_options, config.optim, seed=seed) == [[1, 1, 0, 0]]
        assert toy_pft_mask(paper, config.optim, seed=seed) == [[0, 0, 1, 1]]


PBP_OPTIONS = {"prior_epochs": 10, "prior_mask_epochs": 2, "sparsity": 0.7, "mc_samples": 20, "prior_samples": 5}


@pytest.fixture(scope="module")
def pbp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pbp") / "run"
    return out, run(
        config(
            "pbp",
            PBP_OPTIONS,
            prune={"sparsities": [0.0, 0.7], "include_biases": False},
            train={"epochs": 3, "validation": 0.2},
        ),
        out,
    )


def test_pbp_certificate_bounds_the_measured_errors_and_matches_the_bounds_module(pbp_run):
    _, metrics = pbp_run
    assert metrics["n_bound"] == 1150 - 1150 // 2  # of the 1,437 - 287 rows train.validation leaves
    assert (
        metrics["empirical_risk"]
        <= metrics["empirical_risk_bound"]
        <= metrics["bound_kl_inverse"]
        <= metrics["bound"]
        < 1
    )
    assert metrics["posterior_test_error"] / 100 <= metrics["bound"]
    expected = certificate(
        mean_risk=metrics["empirical_risk"], samples=20, kl=metrics["kl"], n=metrics["n_bound"], delta=0.05
    )
    assert metrics["bound"] == pytest.approx(float(expected.bound))
    assert metrics["sparsity"] == pytest.approx(0.7, abs=0.05) and metrics["prior_expected_sparsity"] == pytest.approx(
        0.7, abs=0.01
    )


def test_certify_recomputes_the_saved_runs_certificate(pbp_run, capsys):
    out, metrics = pbp_run
    assert main(["certify", str(out), "--samples", "20", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["kl"] == pytest.approx(metrics["kl"], rel=1e-6)
    assert again["n_bound"] == metrics["n_bound"]
    assert abs(again["empirical_risk"] - metrics["empirical_risk"]) < 0.03


def test_certify_measures_the_risk_on_the_fits_own_s_minus_s_p_when_validation_holds_rows_out(
    pbp_run, tmp_path, capsys, monkeypatch
):
    """train.validation = 0.2 holds 287 of digits' 1,437 training rows out and the fit splits the 1,150
    left: certify scores Q on exactly the fit's 575 rows of S \\ S_P (the oracle: the hold-out's and
    the split's permutations from seed 0), none a validation row or a row of S_P, the prior's; they come
    from the checkpoint, so an edited config.toml changes nothing, and changed data is refused."""
    from bayesprune.data import load_dataset

    out, metrics = pbp_run
    full = load_dataset("digits")
    order = torch.randperm(1437, generator=torch.Generator().manual_seed(0))  # hold_out at the run's seed
    held, rest = order[:287], order[287:].sort().values
    split = torch.randperm(1150, generator=torch.Generator().manual_seed(0))  # split_rows at the fit's seed
    prior_rows, bound_rows = rest[split[:575]], rest[split[575:]]
    assert metrics["n_bound"] == 575

    scored = []
    real = pbp.gibbs_errors
    monkeypatch.setattr(
        pbp.method,
        "gibbs_errors",
        lambda model, guide, x, y, **options: scored.append(x) or real(model, guide, x, y, **options),
    )
    edited = tmp_path / "run"
    shutil.copytree(out, edited)
    (edited / "config.toml").write_text(
        (edited / "config.toml").read_text().replace("validation = 0.2", "validation = 0.0")
    )
    assert main(["certify", str(edited), "--samples", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_bound"] == 575
    assert torch.equal(scored[0], full.x_train[bound_rows])
    certified = set(load_run(edited)[2].bound_rows.tolist())
    assert certified == set(bound_rows.tolist()) and not certified & (set(held.tolist()) | set(prior_rows.tolist()))

    (edited / "config.toml").write_text(
        (edited / "config.toml").read_text().replace('dataset = "digits"', 'dataset = "digits"\nseed = 1')
    )
    assert main(["certify", str(edited), "--samples", "2"]) == 2  # digits' train/test split drawn from another seed
    assert "does not hold the 575 examples of S \\ S_P" in capsys.readouterr().err


def test_gibbs_errors_per_example_draw_a_network_for_every_example_and_estimate_the_gibbs_risk():
    toy, n = OneWeightDecides(), 4000
    x, y = torch.ones(n, 1), torch.zeros(n, dtype=torch.long)
    per_example = pbp.gibbs_errors(toy, toy, x, y, samples=2, sampling="examples")
    assert per_example.shape == (2 * n,) and set(per_example.unique().tolist()) == {0.0, 1.0}
    assert abs(float(per_example.mean()) - 0.7) < 4 * (0.21 / (2 * n)) ** 0.5  # exact Gibbs risk 0.7
    assert 0 < float(per_example[:100].mean()) < 1  # draws differ within a chunk: not one network per chunk
    per_network = pbp.gibbs_errors(toy, toy, x, y, samples=30)
    assert per_network.shape == (30,) and set(per_network.unique().tolist()) <= {0.0, 1.0}


def test_a_per_example_certificate_counts_every_draw_and_bounds_the_measured_errors(tmp_path, capsys):
    metrics = run(config("pbp", {**PBP_OPTIONS, "sampling": "examples", "mc_samples": 2}), tmp_path / "run")
    assert main(["certify", str(tmp_path / "run"), "--samples", "101"]) == 2  # each draw: a network per example
    assert "--samples: at most 100 draws per example" in capsys.readouterr().err
    assert metrics["risk_draws"] == 2 * metrics["n_bound"]
    expected = certificate(
        mean_risk=metrics["empirical_risk"],
        samples=2 * metrics["n_bound"],
        kl=metrics["kl"],
        n=metrics["n_bound"],
        delta=0.05,
    )
    assert metrics["bound"] == pytest.approx(float(expected.bound))
    assert metrics["empirical_risk"] <= metrics["empirical_risk_bound"] <= metrics["bound"] < 1
    assert metrics["posterior_test_error"] / 100 <= metrics["bound"]


def test_pbp_trains_its_prior_on_s_p_only_and_the_posterior_on_s_minus_s_p(monkeypatch):
    """Stages 1 and 2 (the network and the prior P) see exactly the ⌊α·N⌋ rows of S_P, stage 3 the
    others: a prior trained on all of S would have seen the rows its bound is measured on."""
    from bayesprune.data import load_dataset
    from bayesprune.methods import FitContext, get_method
    from bayesprune.methods.pbp import split_rows

    seen = {}

    def recording(real):  # train(stage, step, batches, ...) and train_network(stage, net, batches, ...)
        def method(self, stage, *args, **kwargs):
            seen[stage.split(":")[0]] = args[1]
            return real(self, stage, *args, **kwargs)

        return method

    for name in ("train", "train_network"):
        monkeypatch.setattr(FitContext, name, recording(getattr(FitContext, name)))
    cfg = config(
        "pbp",
        {"prior_epochs": 1, "prior_mask_epochs": 1, "mc_samples": 1, "prior_samples": 1},
        model={"architecture": "mlp", "hidden": [8]},
        train={"epochs": 1},
    )
    digits = load_dataset("digits")
    data = dataclasses.replace(
        digits,
        x_train=digits.x_train[:200],
        y_train=digits.y_train[:200],
        x_test=digits.x_test[:50],
        y_test=digits.y_test[:50],
    )
    ctx = FitContext.from_config(cfg, data, device=torch.device("cpu"))
    get_method("pbp").fit(new_net(cfg, data.input_shape, data.output_dim, seed=0), data, cfg.method_options, ctx)
    prior_rows, bound_rows = split_rows(200, 0.5, cfg.seed)
    for stage, rows in (("stage 1", prior_rows), ("stage 2", prior_rows), ("stage 3", bound_rows)):
        torch.testing.assert_close(seen[stage].x, data.x_train[rows], msg=stage)


def test_certify_refuses_a_method_without_a_certificate(pft_run, capsys):
    out, _ = pft_run
    assert main(["certify", str(out)]) == 2
    assert "has no certificate" in capsys.readouterr().err


def test_pbp_posterior_nc_holds_q_and_the_prior_of_every_parameter(pbp_run):
    out, _ = pbp_run
    idata = az.from_netcdf(out / "posterior.nc")
    _, _, fitted = load_run(out)
    for name, param in fitted.net.named_parameters():
        assert idata.posterior[name].shape[-param.dim() :] == tuple(param.shape)
        for key in ("keep", "loc", "scale", "prior_keep", "prior_loc", "prior_scale"):
            assert f"{name}.{key}" in idata["variational"]
    keep = torch.from_numpy(idata["variational"]["1.weight.keep"].values[0])
    torch.testing.assert_close(keep, fitted.guide.masks.probabilities()["1.weight"].detach())
    draws = idata.posterior["1.weight"].values
    assert ((draws == 0).mean() - (1 - keep.mean().item())) == pytest.approx(0, abs=0.02)


def test_pbp_refuses_regression(tmp_path):
    cfg = RunConfig.from_dict(
        {"method": "pbp", "data": {"dataset": "linear-regression"}, "baseline": {"enabled": False}}
    )
    with pytest.raises(ConfigError, match="pbp certifies the 0-1 error"):
        run(cfg, tmp_path / "run")


@pytest.mark.parametrize("key, value", [("start_masks", ["magnitude", "magnitude"]), ("sparsities", [0.9, 0.9])])
def test_a_start_mask_or_sparsity_given_twice_is_refused_naming_it(key, value):
    """A repeated grid entry would fit the same pair twice and list it twice in metrics.json."""
    from bayesprune.core.errors import ConfigError
    from bayesprune.pipeline.config import load_config

    with pytest.raises(ConfigError, match=f"^pft.{key} must .*without repeats"):
        load_config("pft-digits", [f"pft.{key}={value}"])
