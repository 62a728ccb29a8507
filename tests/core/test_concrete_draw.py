"""The relaxed gate draw as two kernels (core/gates._ConcreteDraw, issue 40: PFT's mask step was some
forty passes over λ) gives autograd's value and gradient through the plain formulas of paper 004's
eq. 23 and ProbMask's clamped logit, for every parameterisation."""

import pytest
import torch
import torch.nn.functional as F

from bayesprune.core.estimators import _ConcreteDraw


def reference(raw, u, temperature, parameterization):
    """σ((logit p − log u + log(1 − u)) / t) by plain autograd; a clamped p has derivative 1 on [0, 1], and σ
    is exp(−softplus(−z)), whose derivative σ(z)σ(−z) is not 0 where σ(z) rounds to 1."""
    if parameterization == "sigmoid":
        logit = raw
    elif parameterization == "clamp":
        p = torch.where((raw >= 0) & (raw <= 1), raw, raw.clamp(0.0, 1.0))
        logit = torch.log(p + 1e-20) - torch.log(1 - p + 1e-20)
    else:
        logit = torch.log(raw) - torch.log(1 - raw)
    z = (logit - torch.log(u) + torch.log(1 - u)) / temperature
    return torch.exp(-F.softplus(-z, threshold=500))  # not linear above 20: exact in float64


@pytest.mark.parametrize(
    "parameterization, raw",
    [
        ("sigmoid", [-6.0, -1.5, 0.0, 0.3, 2.0, 5.0]),
        ("clamp", [-0.2, 0.0, 1e-4, 0.3, 0.9, 1.0, 1.3]),
        ("probability", [1e-3, 0.1, 0.5, 0.7, 0.999]),
    ],
)
@pytest.mark.parametrize("temperature", [0.5, 2 / 3])
def test_the_draw_and_its_gradient_equal_autograd_through_the_formula(parameterization, raw, temperature):
    generator = torch.Generator().manual_seed(0)
    raw = torch.tensor(raw, dtype=torch.float64).repeat(50)
    u = torch.rand(raw.shape, generator=generator, dtype=torch.float64) * 0.9 + 0.05
    upstream = torch.randn(raw.shape, generator=generator, dtype=torch.float64)
    values, grads = [], []
    for draw in (lambda r: _ConcreteDraw.apply(r, u, temperature, parameterization), reference):
        leaf = raw.clone().requires_grad_()
        value = draw(leaf) if draw is not reference else reference(leaf, u, temperature, parameterization)
        (value * upstream).sum().backward()
        values.append(value.detach())
        grads.append(leaf.grad)
    # A clamped p of 0 gives z ≈ −46/t: the draw's value is 0 below SUBNORMAL_GUARD (2^-100), with
    # derivative 0, where autograd's is σ/ε ≈ 1e-10 at most.
    assert torch.allclose(values[0], values[1], rtol=1e-9, atol=1e-25)
    assert torch.allclose(grads[0], grads[1], rtol=1e-9, atol=1e-9)
    if parameterization == "clamp":  # outside [0, 1] no gradient; at p = 1 a gradient through ε
        assert (grads[0][raw < 0] == 0).all() and (grads[0][raw > 1] == 0).all()
