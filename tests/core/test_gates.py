"""Unit gates (paper 004): gating as eq. 1, C1 − C0 estimators against exact two-pass differences,
and removal of units while training."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.core.estimators import Concrete, Exact, Hybrid, Taylor
from bayesprune.core.export import export
from bayesprune.core.gates import UnitGates, project_unit_weights, unit_weight_norms
from bayesprune.core.structure import shrunk
from bayesprune.methods.unit_gates import GateTraining, UnitGatesOptions
from bayesprune.models import build_architecture


def small_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.Tanh(), nn.Linear(6, 3))


def batch(seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(32, 5, generator=generator), torch.randint(0, 3, (32,), generator=generator)


def cost_fn(net, gates, x, y):
    def cost_of(values):
        with torch.no_grad(), gates.applied(net, values):
            return 100 * F.cross_entropy(net(x), y)

    return cost_of


def test_a_gate_at_zero_is_the_network_without_the_unit():
    for name, shape in (("mlp", (5,)), ("lenet-5-classic", (1, 28, 28))):
        torch.manual_seed(0)
        net = build_architecture(name, shape, 3, **({"hidden": (7, 6)} if name == "mlp" else {}))
        gates = UnitGates(net, input_shape=shape)
        keep = [torch.rand(t.numel()) < 0.6 for t in gates.theta]
        for k in keep:
            k[0] = True
        x = torch.randn(4, *shape)
        with torch.no_grad(), gates.applied(net, [k.float() for k in keep]):
            gated = net(x)
        smaller = export(net, dict(zip(gates.sites, keep)))
        with torch.no_grad():
            assert torch.allclose(smaller(x), gated, atol=1e-5)


def test_the_gates_of_a_smaller_network_are_its_groups_traced_again_with_the_kept_units_theta():
    for name, shape in (("mlp", (5,)), ("lenet-5-classic", (1, 28, 28))):
        torch.manual_seed(0)
        net = build_architecture(name, shape, 3, **({"hidden": (7, 6)} if name == "mlp" else {}))
        gates = UnitGates(net, input_shape=shape)
        with torch.no_grad():
            gates.raw.uniform_()
        keep = [torch.rand(units) < 0.6 for units in gates.units]
        for k in keep:
            k[0] = True
        smaller, _ = shrunk(net, dict(zip(gates.sites, keep)), input_shape=shape)
        restricted, traced = gates.restricted(smaller, keep), UnitGates(smaller, input_shape=shape)
        assert restricted.groups == traced.groups and restricted.units == traced.units == [int(k.sum()) for k in keep]
        assert restricted.sites == gates.sites
        for theta, before, k in zip(restricted.theta, gates.theta, keep):
            assert torch.equal(theta.detach(), before.detach()[k])
        assert restricted.raw.is_leaf and restricted.raw.requires_grad


def test_the_exact_difference_is_the_cost_with_the_unit_switched_on_minus_off():
    net, (x, y) = small_net(), batch()
    gates = UnitGates(net)
    values = [torch.ones(7), torch.ones(6)]
    differences = Exact().data_gradient(list(gates.theta), values, cost_fn(net, gates, x, y))
    # Oracle: remove hidden unit 2 of the first layer by zeroing its outgoing weights instead.
    without = small_net()
    with torch.no_grad():
        without[2].weight[:, 2] = 0
        expected = 100 * F.cross_entropy(net(x), y) - 100 * F.cross_entropy(without(x), y)
    assert float(differences[0][2]) == pytest.approx(float(expected), rel=1e-5)


def test_the_taylor_estimate_becomes_exact_as_a_units_weights_shrink():
    x, y = batch()
    x = x.double()  # the exact difference of two costs near 100 needs float64 at small scales
    errors = []
    for scale in (1.0, 1e-1, 1e-2, 1e-3):
        net = small_net().double()
        with torch.no_grad():  # shrink the fan-out weights w_f of unit 3 of the first hidden layer
            net[2].weight[:, 3] *= scale
        gates = UnitGates(net)
        taylor = Taylor()
        values = [
            torch.ones(7, dtype=torch.float64).requires_grad_(),
            torch.ones(6, dtype=torch.float64).requires_grad_(),
        ]
        with gates.applied(net, values):
            (100 * F.cross_entropy(net(x), y)).backward()
        estimate = taylor.data_gradient(list(gates.theta), values, None)[0][3]
        exact = Exact().data_gradient(list(gates.theta), [v.detach() for v in values], cost_fn(net, gates, x, y))[0][3]
        errors.append(abs(float(estimate - exact)) / abs(float(exact)))
    assert errors[-1] < 1e-2 and errors == sorted(errors, reverse=True)


def test_the_hybrid_estimator_is_exact_on_its_largest_units_and_taylor_elsewhere():
    net, (x, y) = small_net(), batch()
    gates = UnitGates(net)
    values = [torch.ones(7).requires_grad_(), torch.ones(6).requires_grad_()]
    with gates.applied(net, values):
        (100 * F.cross_entropy(net(x), y)).backward()
    norms = unit_weight_norms(net, gates)
    hybrid = Hybrid(units=3).data_gradient(list(gates.theta), values, cost_fn(net, gates, x, y), norms)
    exact = Exact().data_gradient(list(gates.theta), [v.detach() for v in values], cost_fn(net, gates, x, y))
    largest = set(torch.topk(torch.cat(norms), 3).indices.tolist())
    flat_hybrid, flat_exact = torch.cat(hybrid), torch.cat(exact)
    flat_taylor = torch.cat([v.grad for v in values])
    for index in range(13):
        expected = flat_exact[index] if index in largest else flat_taylor[index]
        assert float(flat_hybrid[index]) == pytest.approx(float(expected), rel=1e-6)


def relaxed_gate_moments(theta: float, temperature: float):
    """E z, E z², and their derivatives in θ, of the relaxed gate z = σ((logit θ + L)/t), L standard
    logistic (eq. 23), by the trapezoid rule over L in float64: the relaxed expectation's exact terms."""
    noise = torch.linspace(-40, 40, 80_001, dtype=torch.float64)  # spacing 1e-3, far below t
    density = torch.sigmoid(noise) * torch.sigmoid(-noise)
    s = (math.log(theta / (1 - theta)) + noise) / temperature
    z = torch.sigmoid(s)
    dz = torch.sigmoid(s) * torch.sigmoid(-s) / (temperature * theta * (1 - theta))
    return [float(torch.trapezoid(f * density, noise)) for f in (z, z * z, dz, 2 * z * dz)]


@pytest.mark.parametrize("temperature", [0.1, 0.02])
def test_the_concrete_estimate_averages_to_the_gradient_of_the_relaxed_and_as_t_falls_the_bernoulli_expectation(
    temperature,
):
    """Eq. 23 through :class:`Concrete` on the θ of a UnitGates: K independent pairs of gates
    (θ1, θ2) = (0.3, 0.6), f(z) = Σ_k (a1 z_k1 + a2 z_k2 + r)², so that each pair's θ-gradient is one
    independent draw of the estimator. Its mean over K = 10⁵ pairs lies within 4 standard errors of
    d/dθ E_relaxed[f], the exact expectation over the relaxed gates by quadrature (at t = 0.1:
    1.617 and −0.547; the same estimator at t = 1 averages 1.044 and −0.449), and at t = 0.02 also
    within 4 standard errors of the Bernoulli gradient d/dθ1 E[f] = a1² + 2 a1 a2 θ2 + 2 r a1 (z² = z),
    which the relaxed one approaches as t → 0 (quadrature: 1.692 against 1.71)."""
    a1, a2, r, theta, pairs = 1.5, -0.8, 0.3, (0.3, 0.6), 100_000
    gates = UnitGates(nn.Sequential(nn.Linear(1, 2 * pairs), nn.Linear(2 * pairs, 1)))
    with torch.no_grad():
        gates.theta[0].copy_(torch.tensor(theta).repeat(pairs))
    estimator = Concrete(temperature)
    values = estimator.values(gates)
    z = values[0].view(pairs, 2)
    ((a1 * z[:, 0] + a2 * z[:, 1] + r) ** 2).sum().backward()
    draws = estimator.data_gradient(gates.raw_tensors(), values, None)[0].view(pairs, 2).double()
    mean, stderr = draws.mean(0), draws.std(0) / math.sqrt(pairs)
    (m1, q1, dm1, dq1), (m2, q2, dm2, dq2) = (relaxed_gate_moments(p, temperature) for p in theta)
    relaxed = torch.tensor(
        [
            a1**2 * dq1 + 2 * a1 * a2 * dm1 * m2 + 2 * r * a1 * dm1,
            a2**2 * dq2 + 2 * a1 * a2 * m1 * dm2 + 2 * r * a2 * dm2,
        ],
        dtype=torch.float64,
    )
    assert bool(((mean - relaxed).abs() < 4 * stderr).all()), (mean, relaxed, stderr)
    if temperature <= 0.02:
        bernoulli = torch.tensor(
            [a1**2 + 2 * a1 * a2 * theta[1] + 2 * r * a1, a2**2 + 2 * a1 * a2 * theta[0] + 2 * r * a2],
            dtype=torch.float64,
        )
        assert bool(((mean - bernoulli).abs() < 4 * stderr).all()), (mean, bernoulli, stderr)


def test_the_weight_projection_bounds_each_units_norm():
    net = small_net()
    gates = UnitGates(net)
    project_unit_weights(net, gates, phi_max=0.2)
    for norm in unit_weight_norms(net, gates):
        assert bool((norm <= 0.4 + 1e-6).all())


def test_removing_units_keeps_the_kept_units_weights_gates_and_adam_state():
    net, (x, y) = small_net(), batch()
    training = GateTraining(net, UnitGatesOptions(), num_train=100, lr=1e-3)
    for index in range(3):
        training.step(x, y, index, 3)
    keep = [torch.tensor([1, 0, 1, 1, 0, 1, 1], dtype=torch.bool), torch.tensor([0, 1, 1, 1, 1, 1], dtype=torch.bool)]
    before_net = training.net
    weight = before_net[2].weight.detach().clone()
    moments = training.optimizer.state[before_net[2].weight]["exp_avg_sq"].clone()
    theta_moments = training.optimizer.state[training.gates.raw]["exp_avg"][:7].clone()
    theta = training.gates.theta[0].detach().clone()
    training.remove(keep)
    after = training.net[2].weight
    assert after.shape == (5, 5)
    assert torch.equal(after.detach(), weight[keep[1]][:, keep[0]])
    assert torch.equal(training.optimizer.state[after]["exp_avg_sq"], moments[keep[1]][:, keep[0]])
    assert torch.equal(training.gates.theta[0].detach(), theta[keep[0]])
    assert torch.equal(training.optimizer.state[training.gates.raw]["exp_avg"][:5], theta_moments[keep[0]])
    assert int(training.optimizer.state[after]["step"]) == 3
    training.step(x, y, 0, 1)  # and the smaller network trains on


def test_a_unit_leaves_the_network_at_the_step_it_meets_the_pruning_condition():
    net, (x, y) = small_net(), batch()
    training = GateTraining(net, UnitGatesOptions(), num_train=100, lr=1e-6)
    with torch.no_grad():
        training.gates.theta[0][[2, 5]] = 1e-4  # below theta_tol = 1e-3; a step of lr 1e-6 cannot lift them past it
        training.gates.theta[1].fill_(1e-4)  # every unit of the second layer: it keeps them all
    training.step(x, y, 0, 10)  # the first of ten steps: not the end of an epoch
    assert training.kept_units[0].tolist() == [0, 1, 3, 4, 6]
    assert training.kept_units[1].tolist() == list(range(6))
    assert training.net[0].weight.shape == (5, 5) and training.gates.theta[0].numel() == 5
    # the smaller network is the updated starting network (net, changed in place) with those two gates at 0
    values = [torch.tensor([1.0, 1, 0, 1, 1, 0, 1]), torch.ones(6)]
    with torch.no_grad(), UnitGates(net).applied(net, values):
        expected = net(x)
    torch.testing.assert_close(training.net(x), expected)


def test_the_theta_gradient_is_the_data_estimate_plus_the_hyper_priors_term(monkeypatch):
    """Eq. 19: ∂L/∂θ = (C1 − C0) + log(θ(1 − π*)/((1 − θ)π*)); under the Flattening prior the second
    term is −log γ > 0 (eq. 31), which pushes θ down. With the data estimate set to a known value the
    gradient Adam steps on (what it is handed plus its weight decay's λθ, which θ must not get) is that
    value plus the hyper-prior's term, with its sign."""
    net, (x, y) = small_net(), batch()
    training = GateTraining(net, UnitGatesOptions(log_gamma=-3.0), num_train=32, lr=0.01)
    data = [torch.full_like(training.gates.raw, 0.5)]
    monkeypatch.setattr(training.estimator, "data_gradient", lambda theta, values, cost_of, norms=None: data)
    expected = data[0] + training.hyper_prior.theta_gradient(training.gates.raw.detach())
    received = []
    theta = training.gates.raw.detach()
    decay = next(
        group["weight_decay"]
        for group in training.optimizer.param_groups
        if any(param is training.gates.raw for param in group["params"])
    )
    monkeypatch.setattr(training.optimizer, "step", lambda: received.append(training.gates.raw.grad + decay * theta))
    training.step(x, y, 0, 1)
    assert len(received) == 1 and received[0].numel() == 7 + 6
    torch.testing.assert_close(expected, torch.full_like(expected, 0.5 + 3.0))  # −log γ = 3 at θ = 0.5, the flat part
    torch.testing.assert_close(received[0], expected)


def test_the_gate_posterior_draws_follow_theta():
    from bayesprune.analysis.inference_data import gate_inference_data

    theta = {"1.gate": torch.tensor([0.05, 0.5, 0.9]), "3.gate": torch.tensor([0.3, 0.99])}
    idata = gate_inference_data([theta, theta], num_draws=4000, seed=0)
    draws = idata["posterior"]["1.gate"].values
    assert draws.shape == (2, 4000, 3)
    mean = draws.reshape(-1, 3).mean(0)
    stderr = (theta["1.gate"] * (1 - theta["1.gate"]) / 8000).sqrt().numpy()
    assert (abs(mean - theta["1.gate"].numpy()) < 4 * stderr).all()


def test_a_unit_gates_run_writes_a_smaller_network_and_its_gate_posterior(tmp_path):
    import json

    from bayesprune.pipeline.config import load_config
    from bayesprune.pipeline.runner import load_run, run

    config = load_config(
        "unit-gates-lenet300",
        [
            "data.dataset='digits'",
            "model.architecture='mlp'",
            "model.hidden=[40, 20]",
            "train.epochs=6",
            "unit-gates.log_gamma=-3.0",
            "unit-gates.finetune_epochs=1",
            "baseline.epochs=1",
            "device='cpu'",
        ],
    )
    metrics = run(config, tmp_path / "run")
    learned = metrics["learned_architecture"]
    assert metrics["starting_architecture"] == [40, 20] and sum(learned) == metrics["units_alive"][-1]
    weights = 64 * learned[0] + learned[0] * learned[1] + learned[1] * 10
    assert metrics["pruning_ratio"] == pytest.approx(1 - weights / (64 * 40 + 40 * 20 + 20 * 10))
    assert len(metrics["epoch_seconds"]) == len(metrics["epoch_test_error"]) == 6
    _, dataset, fitted = load_run(tmp_path / "run")  # rebuilt in the learned, smaller structure
    assert [fitted.net[1].out_features, fitted.net[3].out_features] == learned
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["test_error"] == pytest.approx(
        100 * float((fitted.predict(dataset.x_test).argmax(-1) != dataset.y_test).float().mean())
    )
    assert (tmp_path / "run" / "posterior.nc").exists() and (tmp_path / "run" / "theta.png").exists()


def band(n, seed):
    """Four standard-normal inputs, class 1 where |x₁ + x₂| < 1: two tanh units solve it (one cannot:
    a single unit's network errs on about a quarter of the points), the other inputs are noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return x, ((x[:, 0] + x[:, 1]).abs() < 1).long()


def test_unit_gates_prune_a_wide_network_to_the_few_units_a_known_problem_needs():
    """Algorithm 1 end to end (fit_method) on a problem of known answer: a 32-unit network on the band
    that 2 units solve ends with at most 8 units (2 to 8 over seeds 0-5) and the test error of the plain
    32-unit network (1.2-1.6 % on these points). The paper's settings scaled to N = 512 points
    (section 7.1): λ/N = 20/60,000 (λ grows with N, section 5), so λ = 0.17 (the paper's λ = 20 on
    512 points leaves one unit and 52 % error); Adam at a rate that lets θ reach θ_tol within the run
    (Adam moves θ by about the rate per step whatever the size of eq. 19's gradient, so 0.5 → 1e-3
    needs about 0.5/lr steps: 50 of the 240 here); −log γ = 2, the cost reduction C0 − C1 (in nats over
    the 512 points) a unit must achieve to stay (section 4.2): each of the band's two units is worth
    over a hundred, a redundant one about nothing; fine-tuning at a tenth of the rate."""
    from bayesprune import fit_method

    train, test = band(512, 1), band(2000, 2)

    def wide():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))

    def error(net):
        with torch.no_grad():
            return float((net(test[0]).argmax(-1) != test[1]).float().mean())

    fitted = fit_method(
        "unit-gates",
        wide(),
        train,
        test,
        epochs=30,
        batch_size=64,
        optim={"lr": 0.01},
        device="cpu",
        options={"log_gamma": -2.0, "weight_precision": 20 * 512 / 60_000, "finetune_epochs": 20, "finetune_lr": 1e-3},
    )
    plain = wide()
    optimizer = torch.optim.Adam(plain.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        for rows in torch.randperm(512, generator=generator).split(64):
            optimizer.zero_grad()
            F.cross_entropy(plain(train[0][rows]), train[1][rows]).backward()
            optimizer.step()
    alive = fitted.report["units_alive"]
    assert alive == sorted(alive, reverse=True) and alive[-1] <= 8  # they leave while it trains (Algorithm 1, step 4)
    assert 2 <= fitted.report["learned_architecture"][0] <= 8 and fitted.net[0].out_features == alive[-1]
    assert error(plain) < 0.03 and error(fitted.net) < error(plain) + 0.01
