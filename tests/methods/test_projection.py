"""The projection of paper 002 (Theorem 1, eq. 6) against a generic QP solver, its KKT conditions and its edges."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from bayesprune.methods.probmask.projection import project_onto_budget, project_sites


def solve_qp(s: np.ndarray, budget: float) -> np.ndarray:
    """argmin ‖x − s‖² s.t. 0 ≤ x ≤ 1, Σx ≤ K, by SLSQP (appendix A.4's problem, no Theorem 1)."""
    result = minimize(
        lambda x: 0.5 * np.sum((x - s) ** 2),
        np.zeros_like(s),
        jac=lambda x: x - s,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * len(s),
        constraints=[{"type": "ineq", "fun": lambda x: budget - x.sum(), "jac": lambda x: -np.ones_like(x)}],
        options={"ftol": 1e-11, "maxiter": 1000},  # tighter stalls its line search at the optimum
    )
    assert result.success, result.message
    return result.x


def random_scores(rng, n: int) -> np.ndarray:
    """Scores far outside [0, 1] on both sides, with ties."""
    s = rng.normal(0.5, 2.0, size=n)
    s[rng.integers(n, size=n // 3)] = rng.choice([-3.0, 0.25, 0.7, 5.0])
    return s


@pytest.mark.parametrize("n", [1, 2, 5, 12, 30])
@pytest.mark.parametrize("seed", range(4))
def test_matches_a_generic_qp_solver(n, seed):
    rng = np.random.default_rng(100 * n + seed)
    s = random_scores(rng, n)
    for budget in (0.0, 0.3, n / 4, n / 2 + 0.1, float(n), 2.0 * n):
        x = project_onto_budget(torch.from_numpy(s), budget).numpy()
        assert np.abs(x - solve_qp(s, budget)).max() < 1e-5, (s, budget)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constraints_hold_and_an_active_budget_is_spent(dtype):
    s = torch.from_numpy(random_scores(np.random.default_rng(1), 10**4)).to(dtype)
    n = s.numel()
    for budget in (0.5, 17.0, 1234.5, n / 3):
        x = project_onto_budget(s, budget)
        assert bool(((x >= 0) & (x <= 1)).all())
        total = float(x.double().sum())
        assert total <= budget + 1e-6 * n
        assert abs(total - budget) <= (1e-6 * n if dtype == torch.float32 else 1e-9 * budget)  # Σ clamp(s) > K here


def kkt_multiplier(s: torch.Tensor, x: torch.Tensor, budget: float) -> float:
    """The single v ≥ 0 with x = clamp(s − v, 0, 1) and v (K − Σx) = 0, asserted entry by entry."""
    free = (x > 0) & (x < 1)
    assert int(free.sum()) > 0
    shifts = s[free] - x[free]
    v = float(shifts.mean())
    assert float(shifts.max() - shifts.min()) < 1e-12
    assert v >= 0
    assert bool((s[x == 0] - v <= 1e-12).all()) and bool((s[x == 1] - v >= 1 - 1e-12).all())
    assert torch.allclose(x, (s - v).clamp(0, 1), rtol=0, atol=1e-12)
    assert abs(v * (budget - float(x.sum()))) < 1e-8
    return v


def test_kkt_conditions_on_a_large_vector():
    s = torch.from_numpy(random_scores(np.random.default_rng(2), 10**5))
    assert kkt_multiplier(s, project_onto_budget(s, 5000.0), 5000.0) > 0  # budget binds
    uniform = torch.rand(10**5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert kkt_multiplier(uniform, project_onto_budget(uniform, 6e4), 6e4) == 0  # Σ s ≈ 5·10⁴ < K: v = 0


def test_idempotent_and_the_identity_on_the_feasible_set():
    s = torch.from_numpy(random_scores(np.random.default_rng(4), 1000))
    x = project_onto_budget(s, 100.0)
    assert torch.allclose(project_onto_budget(x, 100.0), x, rtol=0, atol=1e-12)
    inside = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    assert torch.equal(project_onto_budget(inside, float(inside.sum()) + 1e-9), inside)
    assert torch.equal(project_onto_budget(inside, 1000), inside)


def test_edges_keep_shape_and_leave_the_input_alone():
    s = torch.tensor([[-2.0, 0.3, 0.9], [1.5, 7.0, 0.5]], dtype=torch.float64)
    before = s.clone()
    assert torch.equal(project_onto_budget(s, 0), torch.zeros_like(s))  # K = 0: all zeros
    assert torch.equal(project_onto_budget(s, 6), s.clamp(0, 1))  # K ≥ n: clipping only
    assert torch.equal(project_onto_budget(s, 100.5), s.clamp(0, 1))
    x = project_onto_budget(s, 2.0)  # 7 − v ≥ 1, 1.5 − v and 0.9 − v free: v = 0.7
    assert x.shape == s.shape
    assert torch.allclose(x, torch.tensor([[0.0, 0.0, 0.2], [0.8, 1.0, 0.0]], dtype=torch.float64), atol=1e-12)
    assert torch.equal(s, before)
    assert project_onto_budget(torch.empty(0), 3.0).shape == (0,)


def test_project_sites_is_one_projection_of_the_concatenation():
    rng = np.random.default_rng(6)
    scores = {
        "fc1.weight": torch.from_numpy(rng.normal(0.5, 1, (20, 30))),
        "fc1.bias": torch.from_numpy(rng.normal(0.5, 1, 20)),
        "fc2.weight": torch.from_numpy(rng.normal(0.3, 1, (10, 20))),
    }
    projected = project_sites(scores, 150.0)
    assert list(projected) == list(scores)
    assert all(projected[name].shape == tensor.shape for name, tensor in scores.items())
    joint = project_onto_budget(torch.cat([tensor.flatten() for tensor in scores.values()]), 150.0)
    assert torch.equal(torch.cat([tensor.flatten() for tensor in projected.values()]), joint)
    assert project_sites({}, 1.0) == {}


def test_a_global_budget_moves_mass_between_layers():
    scores = {"a": torch.full((10,), 0.9, dtype=torch.float64), "b": torch.full((10,), 0.2, dtype=torch.float64)}
    joint = project_sites(scores, 10.0)  # Σ = 11 > 10: one v = 0.05 for both layers
    assert torch.allclose(joint["a"], torch.full((10,), 0.85, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(joint["b"], torch.full((10,), 0.15, dtype=torch.float64), atol=1e-12)
    per_site = {name: project_onto_budget(tensor, 5.0) for name, tensor in scores.items()}  # half each
    assert torch.allclose(per_site["a"], torch.full((10,), 0.5, dtype=torch.float64), atol=1e-12)
    assert torch.equal(per_site["b"], scores["b"])  # b's unused share is lost: 7 of 10 spent
    assert float(joint["a"].sum()) == pytest.approx(8.5)  # a takes 3.5 more than its half
    assert float(sum(x.sum() for x in joint.values())) == pytest.approx(10)


def test_float32_in_float32_out():
    s = torch.from_numpy(random_scores(np.random.default_rng(7), 5000))
    x32 = project_onto_budget(s.float(), 300.0)
    assert x32.dtype == torch.float32
    assert torch.allclose(x32.double(), project_onto_budget(s.float().double(), 300.0), rtol=0, atol=1e-6)
    mixed = project_sites({"w": s.float(), "b": s[:10]}, 300.0)
    assert mixed["w"].dtype == torch.float32 and mixed["b"].dtype == torch.float64


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    s = torch.from_numpy(random_scores(np.random.default_rng(8), 10**5))
    for dtype in (torch.float32, torch.float64):
        x = project_onto_budget(s.to("cuda", dtype), 4321.0)
        assert x.device.type == "cuda" and x.dtype == dtype
        assert torch.allclose(x.cpu().double(), project_onto_budget(s, 4321.0), rtol=0, atol=1e-6)


@pytest.mark.parametrize("budget", [-1, -1e-9, math.nan, math.inf, "3", True, None, torch.tensor(3.0)])
def test_bad_budget_names_budget(budget):
    with pytest.raises(ValueError, match="budget"):
        project_onto_budget(torch.rand(5), budget)
    with pytest.raises(ValueError, match="budget"):
        project_sites({"w": torch.rand(5)}, budget)


def test_non_floating_input_names_s():
    with pytest.raises(ValueError, match="^s must"):
        project_onto_budget(torch.arange(5), 2.0)
