"""Architectures and the Bayesian network wrapper: shapes, site names, parameter counts from the literature."""

import math

import pyro
import pytest
import torch

import bayesprune as bp
from bayesprune.core.errors import ConfigError
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import BayesianNetwork, Categorical, Gaussian, build_architecture


@pytest.mark.parametrize(
    "name, input_shape, expected",
    [
        # LeNet-300-100: 784·300+300 + 300·100+100 + 100·10+10 (LeCun et al., 1998).
        ("lenet-300-100", (1, 28, 28), 266_610),
        # LeNet-5 (Caffe): 20·1·25+20 + 50·20·25+50 + 800·500+500 + 500·10+10.
        ("lenet-5-caffe", (1, 28, 28), 431_080),
        ("lenet-5", (1, 28, 28), 431_080),  # its earlier name
        # The classic LeNet-5 (paper 004, section 7): 44,190 weights, and 6+16+120+84+10 biases.
        ("lenet-5-classic", (1, 28, 28), 44_190 + 236),
    ],
)
def test_parameter_counts_match_the_published_architectures(name, input_shape, expected):
    net = build_architecture(name, input_shape, 10)
    assert sum(p.numel() for p in net.parameters()) == expected


def test_leaky_relu_has_paper_004s_slope_and_small_images_are_refused_by_name():
    net = build_architecture("lenet-5-classic", (1, 28, 28), 10, activation="leaky-relu")
    x = -torch.ones(3)
    assert torch.allclose(net[1](x), -1e-3 * torch.ones(3))
    build_architecture("lenet-5-classic", (1, 16, 16), 10)  # one position left after the second pool
    with pytest.raises(ConfigError, match="lenet-5-classic' needs image inputs of at least 16x16"):
        build_architecture("lenet-5-classic", (1, 15, 15), 10)


@pytest.mark.parametrize("local_reparameterization", [False, True])
def test_lenet5_bnn_takes_a_finite_svi_step_with_one_site_per_tensor(local_reparameterization):
    net = build_architecture("lenet-5", (1, 28, 28), 10)
    model = BayesianNetwork(net, bp.SpikeSlabPrior(pi=0.5, tau0=math.exp(-5), tau1=1.0), Categorical(dataset_size=1000))
    guide = SpikeSlabGuide(model)
    x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    trace = pyro.poutine.trace(guide).get_trace(x, y)
    sites = [name for name, site in trace.nodes.items() if site["type"] == "sample"]
    assert sites == [name for name, _ in net.named_parameters()]
    svi = pyro.infer.SVI(
        model,
        guide,
        pyro.optim.Adam({"lr": 1e-3}),
        bp.AnalyticKLELBO(local_reparameterization=local_reparameterization),
    )
    before = guide.loc.detach().clone()
    if local_reparameterization:  # not exact for convolutions: refused
        with pytest.raises(ValueError, match="not exact for conv2d"):
            svi.step(x, y)
        return
    assert math.isfinite(svi.step(x, y))
    assert not torch.equal(before, guide.loc.detach())


def test_learned_gaussian_noise_is_a_parameter_and_fixed_noise_is_not():
    learned, fixed = Gaussian(10), Gaussian(10, scale=0.5)
    assert fixed.distribution(torch.zeros(3, 1)).scale.eq(0.5).all()
    with pyro.poutine.trace(param_only=True) as capture:
        learned(torch.zeros(3, 1), torch.zeros(3))
    assert "scale" in capture.trace.nodes


def test_bad_architecture_options_name_the_field():
    with pytest.raises(ConfigError, match="model.hidden"):
        build_architecture("mlp", (4,), 1, hidden=[0])
    with pytest.raises(ConfigError, match="lenet-5"):
        build_architecture("lenet-5", (1, 8, 8), 10)
