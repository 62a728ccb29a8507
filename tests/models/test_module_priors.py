"""Per-module priors (``[[model.priors]]``): which site each table claims, the refusals in one line naming
the key, a layer shrunk as the closed form of its own prior says, and the report's table of priors."""

import math

import pytest
import torch
from torch import nn

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.core.sites import site_names
from bayesprune.methods.sbnn import SBNN
from bayesprune.models.module_priors import assign_tables, module_priors, read_tables
from bayesprune.models.priors import SpikeSlabPrior


def conv_net():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))


def assigned(tables, net=None):
    net = conv_net() if net is None else net
    return assign_tables(net, read_tables(tables), site_names(net))


def test_tables_claim_sites_by_type_module_name_and_glob():
    tables = [
        {"modules": "Conv2d", "prior": "group-spike-slab"},
        {"modules": ["4", "*.nothing"], "prior": "spike-slab"},
    ]
    with pytest.raises(ConfigError, match=r"^model.priors\[1\].modules: '\*.nothing' matches no site"):
        assigned(tables)
    tables[1]["modules"] = ["4.w*", "4.bias"]
    assert assigned(tables) == {"0.weight": 0, "0.bias": 0, "4.weight": 1, "4.bias": 1}
    # the batch norm is no site: a table can claim it only once it is exposed
    with pytest.raises(ConfigError, match=r"^model.priors\[0\].modules: 'BatchNorm2d' matches no site"):
        assigned([{"modules": "BatchNorm2d", "prior": "spike-slab"}])


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (
            [{"modules": "4", "prior": "horseshoe"}],
            r"^model.priors\[0\].prior must be one of \['group-horseshoe', 'group-spike-slab', 'spike-slab'\]",
        ),
        ([{"prior": "spike-slab"}], r"^model.priors\[0\].modules must be a module name"),
        ([{"modules": "4", "prior": "spike-slab", "tau": 1}], r"^unknown config key 'model.priors\[0\].tau'"),
        ([{"modules": "4", "prior": "spike-slab", "pi": 1.5}], r"^model.priors\[0\].pi must lie in \(0, 1\)"),
        ([{"modules": "4", "prior": "spike-slab", "log_tau0": 2.0}], r"^model.priors\[0\].log_tau0 must be below"),
        ([{"modules": "4", "prior": "group-horseshoe", "global_scale": 0}], r"^model.priors\[0\].global_scale must be"),
        ([{"modules": "4", "prior": "group-horseshoe", "pi": 0.5}], r"^unknown config key 'model.priors\[0\].pi'"),
        (
            [{"modules": "Linear", "prior": "spike-slab"}, {"modules": "4.bias", "prior": "group-spike-slab"}],
            r"^model.priors\[1\].modules: '4.bias' claims '4.bias', which model.priors\[0\] claims already",
        ),
    ],
)
def test_a_bad_table_is_refused_in_one_line_naming_its_key(tables, message):
    with pytest.raises(ConfigError, match=message):
        assigned(tables)


def test_unclaimed_sites_keep_the_methods_prior_and_every_site_is_described():
    net = conv_net()
    default = SpikeSlabPrior(pi=0.5, tau0=math.exp(-6), tau1=math.exp(1))
    prior = module_priors(net, default, [{"modules": "4", "prior": "spike-slab", "pi": 0.2}], site_names(net))
    weight = dict(net.named_parameters())["0.weight"]
    assert prior.distribution("0.weight", weight).base_dist.pi[0, 0, 0, 0].item() == pytest.approx(0.5)
    assert prior.describe("4.weight") == "spike-slab (pi=0.2, log_tau0=-6, log_tau1=1), model.priors[0]"
    assert prior.describe("0.weight").endswith("the method's own")


class TwoLayers(nn.Module):
    """y = a(x[:, :2]) + b(x[:, 2:]): two layers that see orthogonal inputs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)

    def forward(self, x):
        return self.a(x[:, :2]) + self.b(x[:, 2:])


def test_each_layer_is_shrunk_as_the_closed_form_of_its_own_prior_says(tmp_path):
    """Linear regression with X'X = n I and noise s: at the optimum of the sBNN objective (eqs. 3.6-3.7) each
    mean is m_j = x_j'y / (n + s² (p_j/τ1² + (1 − p_j)/τ0²)); a tiny slab shrinks layer a, a wide one leaves b
    at least squares."""
    torch.manual_seed(0)
    n, noise = 64, 0.3
    q, _ = torch.linalg.qr(torch.randn(n, 4))
    x = q * math.sqrt(n)
    y = x @ torch.tensor([1.0, -1.0, 0.5, 2.0]) + noise * torch.randn(n)
    taus = {"a": 0.05, "b": 20.0}
    priors = [
        {"modules": name, "prior": "spike-slab", "log_tau1": math.log(tau), "log_tau0": math.log(tau) - 0.01}
        for name, tau in taus.items()
    ]
    fitted = bp.fit_method(
        "sbnn", TwoLayers(), (x, y), epochs=200, batch_size=n, optim={"lr": 0.03}, priors=priors, noise_scale=noise
    )
    means, probs, xy = fitted.guide.mean_params(), fitted.inclusion_probabilities(), x.T @ y
    for (name, tau), columns in zip(taus.items(), ([0, 1], [2, 3])):
        p = probs[f"{name}.weight"].flatten()
        closed = xy[columns] / (n + noise**2 * (p / tau**2 + (1 - p) / (tau * math.exp(-0.01)) ** 2))
        assert means[f"{name}.weight"].flatten() == pytest.approx(closed, abs=0.015)
    assert means["a.weight"].abs().max() < 0.7 * (xy[:2] / n).abs().min()  # shrunk well below least squares
    (section,) = SBNN().report_sections(tmp_path, fitted.metrics())  # the report's table of priors
    assert "| `a.weight` | spike-slab (pi=0.5, log_tau0=-3.00573, log_tau1=-2.99573), model.priors[0] |" in section


def write_config(tmp_path, method: str, modules: str) -> str:
    config = tmp_path / "priors.toml"
    config.write_text(
        f'method = "{method}"\n[data]\ndataset = "digits"\n[model]\narchitecture = "mlp"\nhidden = [16]\n'
        f'[[model.priors]]\nmodules = "{modules}"\nprior = "group-spike-slab"\n'
    )
    return str(config)


@pytest.mark.parametrize(
    ("method", "modules", "message"),
    [
        ("sparse-vd", "1", "model.priors is not supported by method 'sparse-vd': it places no per-module prior"),
        ("sbnn", "classifier", "model.priors[0].modules: 'classifier' matches no site of the network"),
    ],
)
def test_the_command_line_refuses_priors_in_one_line_and_exit_2(tmp_path, capsys, method, modules, message):
    status = main(["run", write_config(tmp_path, method, modules), "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_group_prior_scores_every_weight_of_a_channel_as_its_channel():
    torch.manual_seed(0)
    x = torch.randn(64, 1, 8, 8)
    y = (x.mean((1, 2, 3)) > 0).long()
    net = conv_net()
    priors = [{"modules": "Conv2d", "prior": "group-spike-slab", "pi": 0.3}, {"modules": "4", "prior": "spike-slab"}]
    fitted = bp.fit_method("sbnn", net, (x, y), epochs=2, batch_size=32, priors=priors)
    scores = fitted.scores()["0.weight"].flatten(1)
    assert (scores == scores[:, :1]).all() and scores[:, 0].unique().numel() == 4
    logits = fitted.guide.inclusion_logits()["4.weight"]
    assert logits.unique().numel() == logits.numel()  # the classifier's weights keep one indicator each


class Units(nn.Module):
    """y = Σ_g x_g · w_g: a grouped convolution whose four output channels each read two inputs of their own."""

    def __init__(self):
        super().__init__()
        self.units = nn.Conv1d(8, 4, 1, groups=4, bias=False)

    def forward(self, x):
        return self.units(x.unsqueeze(-1)).sum((1, 2)).unsqueeze(-1)


def test_a_group_horseshoe_ranks_the_units_without_signal_last_and_leaves_the_others_at_least_squares():
    """Simulated regression whose units 2 and 3 have no effect: their unit logits 2 E_q[log z_g s] fall far below
    the others', while the horseshoe leaves the large effects near least squares."""
    torch.manual_seed(0)
    n = 200
    x = torch.randn(n, 8)
    w = torch.tensor([[1.0, -0.5], [0.7, 0.8], [0.0, 0.0], [0.0, 0.0]])
    y = (x.view(n, 4, 2) * w).sum((1, 2)) + 0.5 * torch.randn(n)
    priors = [{"modules": "units", "prior": "group-horseshoe", "global_scale": 1.0}]
    fitted = bp.fit_method(
        "sbnn", Units(), (x, y), epochs=200, batch_size=n, optim={"lr": 0.03}, priors=priors, noise_scale=0.5
    )
    logits = fitted.scores()["units.weight"][:, 0, 0]
    assert (fitted.scores()["units.weight"] == logits[:, None, None]).all()
    assert logits[2:].max() < logits[:2].min() - 3
    least_squares = torch.linalg.lstsq(x, y.unsqueeze(-1)).solution.view(4, 2)
    means = fitted.guide.mean_params()["units.weight"].view(4, 2)
    assert means[:2] == pytest.approx(least_squares[:2], abs=0.05)
    assert fitted.metrics()["site_priors"]["units.weight"] == "group-horseshoe (global_scale=1), model.priors[0]"
