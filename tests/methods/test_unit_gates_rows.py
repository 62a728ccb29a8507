"""unit-gates.reference_rows: log γ and λ given for N₀ rows, scaled to the fit's N (paper 004, section 6)."""

import pytest
import torch
from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.methods.unit_gates import UnitGatesOptions


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 4 * 4, 3))


def rows(n: int):
    generator = torch.Generator().manual_seed(3)
    return torch.randn(n, 1, 6, 6, generator=generator), torch.randint(0, 3, (n,), generator=generator)


def test_log_gamma_and_the_weight_precision_scale_with_the_rows():
    """log γ · N/N₀ and λ · N/N₀ (by hand: 1,150 of 60,000 rows); unset, the options are as given."""
    given = UnitGatesOptions(reference_rows=60000, log_gamma=-50.0, weight_precision=20.0)
    scaled = given.for_rows(1150)
    assert scaled.log_gamma == pytest.approx(-0.958333, rel=1e-6)
    assert scaled.weight_precision == pytest.approx(0.383333, rel=1e-6)
    assert scaled.reference_rows is None and scaled.theta_lr == given.theta_lr
    plain = UnitGatesOptions(log_gamma=-50.0)
    assert plain.for_rows(1150) == plain


def test_a_fit_with_reference_rows_is_the_fit_given_the_scaled_values():
    """48 rows, N₀ = 192: log γ −4 and λ 2 are the fit's −1 and 0.5, the network and θ to the bit of a fit
    given −1 and 0.5 directly, and the metrics say the values used."""
    from bayesprune import fit_method

    x, y = rows(48)
    common = {"finetune_epochs": 1, "theta_lr": 0.05}
    fits = [
        fit_method(
            "unit-gates", small_cnn(), (x, y), epochs=1, batch_size=16, device="cpu", seed=0, options=common | options
        )
        for options in (
            {"reference_rows": 192, "log_gamma": -4.0, "weight_precision": 2.0},
            {"log_gamma": -1.0, "weight_precision": 0.5},
        )
    ]
    scaled, direct = (fit.net.state_dict() for fit in fits)
    assert scaled.keys() == direct.keys()
    for key in scaled:
        torch.testing.assert_close(scaled[key], direct[key], rtol=0, atol=0)
    assert fits[0].metrics()["theta_trajectories"] == fits[1].metrics()["theta_trajectories"]
    assert (fits[0].metrics()["log_gamma"], fits[0].metrics()["weight_precision"]) == (-1.0, 0.5)


def test_the_flat_part_is_checked_at_the_scaled_log_gamma():
    """log γ = −100 needs ε1 < 3.7e-50 (eq. 30): refused with ε1 = 1e-30 as given, accepted where 48 of
    192 rows make it −25 (ε1 < 1.4e-17)."""
    from bayesprune import fit_method

    x, y = rows(48)
    base = {"log_gamma": -100.0, "finetune_epochs": 0}
    with pytest.raises(ConfigError, match="eps1"):
        fit_method("unit-gates", small_cnn(), (x, y), epochs=1, batch_size=16, device="cpu", options=base)
    fitted = fit_method(
        "unit-gates", small_cnn(), (x, y), epochs=1, batch_size=16, device="cpu", options=base | {"reference_rows": 192}
    )
    assert fitted.metrics()["log_gamma"] == -25.0


def test_reference_rows_is_refused_beside_another_hyper_prior():
    with pytest.raises(ConfigError, match="reference_rows"):
        UnitGatesOptions(hyperprior="beta", reference_rows=60000)
