"""Mixed precision of training (``train.precision``, bayesprune.core.precision): the network's forward
passes in bfloat16, what the objective sums and the evaluation in float32, for every method."""

from contextlib import contextmanager

import numpy as np
import pyro
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import bayesprune as bp
from bayesprune.core.errors import ConfigError
from bayesprune.core.loop import TensorBatches, optimizer_step, svi_step, train
from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.core.precision import training_precision
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods import available_methods
from bayesprune.models import BayesianNetwork, Gaussian, mlp
from bayesprune.models.priors import SpikeSlabPrior
from bayesprune.pipeline.config import load_config


@contextmanager
def linear_output_dtypes():
    """The dtypes of every ``nn.Linear`` output computed in the block, in order."""
    seen = []

    def hook(module, inputs, output):
        if isinstance(module, nn.Linear):
            seen.append(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


#: The dtype a layer computes in under each precision: what the tests expect, written out.
PRECISION_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def one_svi_step(precision):
    """One SVI step of a small spike-and-slab regression network from a fixed state and draw: its loss, the
    gradients of q's parameters, and the dtypes of the network's layer outputs."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    model = BayesianNetwork(
        mlp((3,), 1, hidden=[8]), SpikeSlabPrior(pi=0.5, tau0=0.05, tau1=1.0), Gaussian(64, scale=0.5)
    )
    guide = SpikeSlabGuide(model, init_scale=0.05)
    x, y = torch.randn(64, 3), torch.randn(64)
    guide(x, y)  # the parameters exist before the step reads their gradients
    params = dict(pyro.get_param_store().named_parameters())
    gradients = {}
    step = svi_step(
        model,
        guide,
        objective=AnalyticKLELBO(),
        optim=lambda ps: gradients.update({name: p.grad.clone() for name, p in params.items() if p.grad is not None}),
    )
    with training_precision(precision), linear_output_dtypes() as dtypes:
        loss = step(x, y, 0, 1)
    return loss, gradients, dtypes


def test_bfloat16_svi_step_runs_the_network_in_bfloat16_and_the_objective_in_float32():
    """The oracle is the float32 step from the same state and draw: the bfloat16 step's loss (likelihood and
    KL summed in float32) and gradients agree to bfloat16's rounding of the layer outputs, not exactly."""
    loss32, grads32, dtypes32 = one_svi_step("float32")
    loss16, grads16, dtypes16 = one_svi_step("bfloat16")
    assert set(dtypes32) == {torch.float32} and set(dtypes16) == {torch.bfloat16}
    assert loss16.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads16.values())
    assert grads16.keys() == grads32.keys() and grads32
    assert loss16.item() == pytest.approx(loss32.item(), rel=2e-2)
    assert loss16.item() != loss32.item()  # the forward pass did run in bfloat16
    for name in grads32:
        scale = grads32[name].abs().max().item()
        assert (grads16[name] - grads32[name]).abs().max().item() < 0.05 * scale, name


def test_bfloat16_gradient_descent_still_reaches_the_least_squares_solution():
    """Full-batch gradient descent under bfloat16 autocast on a float32 linear model ends at numpy's lstsq
    solution to bfloat16's precision of the products (8 bits of mantissa); the same run at float32 to 1e-5."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(200, 4, generator=generator)
    y = x @ torch.tensor([0.5, -1.0, 2.0, 0.0]) + 0.2 * torch.randn(200, generator=generator)
    expected = np.linalg.lstsq(x.double().numpy(), y.double().numpy(), rcond=None)[0]
    for precision, tolerance in (("float32", 1e-5), ("bfloat16", 1e-2)):
        torch.manual_seed(0)
        net = nn.Linear(4, 1, bias=False)
        step = optimizer_step(
            lambda xb, yb, net=net: F.mse_loss(net(xb).squeeze(-1), yb), torch.optim.SGD(net.parameters(), lr=0.2)
        )
        with training_precision(precision), linear_output_dtypes() as dtypes:
            train(step, TensorBatches(x, y, batch_size=200), epochs=100)
        assert set(dtypes) == {PRECISION_DTYPES[precision]}
        assert net.weight.dtype == torch.float32
        np.testing.assert_allclose(net.weight.detach().numpy()[0], expected, atol=tolerance)


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_every_method_trains_in_bfloat16_and_predicts_in_float32(method):
    """``precision="bfloat16"`` reaches every method's training (its layers' outputs are bfloat16 there) and
    none of its evaluation: the fitted network predicts in float32, finite."""
    from test_any_network import SHORT

    options, optim = {
        **SHORT,
        "unit-gates": ({"finetune_epochs": 1}, {"lr": 1e-3}),
    }.get(method, ({}, {"lr": 1e-3}))  # a method without short settings: its defaults
    torch.manual_seed(0)
    x, y = torch.randn(96, 6), torch.randint(0, 3, (96,))
    with linear_output_dtypes() as dtypes:
        fitted = bp.fit_method(
            method,
            mlp((6,), 3, hidden=[16]),
            (x, y),
            options=options,
            epochs=1,
            batch_size=32,
            optim=optim,
            device="cpu",
            precision="bfloat16",
        )
    assert torch.bfloat16 in dtypes
    with linear_output_dtypes() as dtypes:
        predicted = fitted.predict(x[:10])
    assert set(dtypes) == {torch.float32} and predicted.dtype == torch.float32 and predicted.isfinite().all()


def test_an_unknown_precision_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"^train.precision must be one of \['float32', 'bfloat16'\], got 'float16'"):
        load_config("sbnn-digits", ["train.precision='float16'"])
