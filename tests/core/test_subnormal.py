"""Relaxed gate draws never hold subnormal numbers: CPUs compute on them many times slower (PFT's
mask-stage epoch took 8.5 times a deterministic one instead of 3.5), and a mask value near float32's
smallest normal number makes every weight it multiplies subnormal. Oracle: float32's own limits."""

import torch

from bayesprune.core.estimators import relaxed_bernoulli


def test_a_relaxed_draw_in_the_far_tail_is_zero_not_subnormal():
    torch.manual_seed(0)
    logits = torch.full((100_000,), -45.0, requires_grad=True)  # z = (−45 − logit u) / 0.5 ≈ −90: σ(z) ≈ 1e-39
    value = relaxed_bernoulli(logits, 0.5)
    tiny = torch.finfo(torch.float32).tiny
    assert not ((value > 0) & (value < tiny)).any()
    (weights := torch.full_like(value, 0.05)).requires_grad_(True)
    (weights * value).sum().backward()
    assert not ((weights.grad.abs() > 0) & (weights.grad.abs() < tiny)).any()
    assert not ((logits.grad.abs() > 0) & (logits.grad.abs() < tiny)).any()


def test_a_relaxed_draw_away_from_the_tail_is_the_sigmoid_with_its_derivative():
    torch.manual_seed(0)
    logits = torch.linspace(-8, 8, 101, requires_grad=True)
    value = relaxed_bernoulli(logits, 0.5)
    torch.manual_seed(0)
    u = torch.rand(101).clamp(1e-7, 1 - 1e-7)
    z = (logits - torch.log(u) + torch.log1p(-u)) / 0.5
    expected = torch.sigmoid(z)
    torch.testing.assert_close(value, expected)
    (gradient,) = torch.autograd.grad(value.sum(), logits)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), logits)
    torch.testing.assert_close(gradient, expected_gradient)
