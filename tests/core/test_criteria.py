"""Loss-model criteria, multi-stage pruning and schedules of paper 001 (eqs. 1, 3-6, 8; Algorithm 1) against
explicit Jacobians and Hessians, finite differences, hand computations and exact counts."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from bayesprune.core.criteria import CRITERIA, ggn_diagonal, saliency, weight_sites
from bayesprune.core.errors import ConfigError
from bayesprune.core.pruning import Budget, prune
from bayesprune.methods.saliency.schedules import sparsity_schedule
from bayesprune.methods.saliency.stages import loss_change, multi_stage_masks, pruning_stages


def tiny_mlp(sizes=(3, 4, 3), seed=0):
    torch.manual_seed(seed)
    layers = [nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2])]
    return nn.Sequential(*layers).double()


def tiny_conv(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)).double()


def data(kind, n=5, shape=(3,), outputs=3, seed=1):
    """Inputs and integer labels (cross-entropy) or float targets (squared loss)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *shape, generator=generator, dtype=torch.float64)
    if kind == "cross_entropy":
        return x, torch.randint(0, outputs, (n,), generator=generator)
    return x, torch.randn(n, outputs, generator=generator, dtype=torch.float64)


def per_example_loss(kind):
    """ℓ(u, t) of one example, written with torch.nn.functional (independent of bayesprune)."""
    if kind == "cross_entropy":
        return lambda u, t: F.cross_entropy(u.unsqueeze(0), t.unsqueeze(0))
    return lambda u, t: 0.5 * F.mse_loss(u, t, reduction="sum")


def explicit_ggn(net, x, y, kind):
    """G = (1/N) Σ_i J_iᵀ H_i J_i (eq. 8) formed in full: J from autograd's Jacobian, H_i = ∇²_u ℓ(u, t_i) from
    autograd's Hessian; returned as its diagonal per parameter and its full matrix."""
    names, values = zip(*[(name, param.detach()) for name, param in net.named_parameters()])
    theta = torch.cat([value.flatten() for value in values])

    def outputs(vector):
        chunks = torch.split(vector, [value.numel() for value in values])
        params = {name: chunk.view(value.shape) for name, chunk, value in zip(names, chunks, values)}
        return functional_call(net, params, (x,)).flatten(1)

    jacobian = torch.autograd.functional.jacobian(outputs, theta)  # (N, K, P)
    u = outputs(theta)
    loss = per_example_loss(kind)
    hessians = torch.stack([torch.autograd.functional.hessian(lambda v, t=t: loss(v, t), u_i) for u_i, t in zip(u, y)])
    ggn = torch.einsum("nkp,nkl,nlq->pq", jacobian, hessians, jacobian) / len(x)
    diagonal = torch.split(torch.diagonal(ggn), [value.numel() for value in values])
    return {name: chunk.view(value.shape) for name, chunk, value in zip(names, diagonal, values)}


def finite_difference_gradient(net, x, y, kind, step=1e-6):
    """∂L/∂θ of every weight by central differences of the mean loss."""
    loss = per_example_loss(kind)
    mean_loss = lambda: sum(loss(u, t) for u, t in zip(net(x), y)).item() / len(x)  # noqa: E731
    grads = {}
    for site in weight_sites(net):
        weight, grad = net.get_parameter(site), torch.empty_like(net.get_parameter(site))
        with torch.no_grad():
            for index in range(weight.numel()):
                flat = weight.view(-1)
                flat[index] += step
                up = mean_loss()
                flat[index] -= 2 * step
                down = mean_loss()
                flat[index] += step
                grad.view(-1)[index] = (up - down) / (2 * step)
        grads[site] = grad
    return grads


def flat(scores):
    return torch.cat([score.flatten() for score in scores.values()])


@pytest.mark.parametrize("kind", ["cross_entropy", "squared"])
@pytest.mark.parametrize("make_net, shape", [(tiny_mlp, (3,)), (tiny_conv, (1, 4, 4))])
def test_ggn_diagonal_is_the_diagonal_of_the_explicit_gauss_newton(kind, make_net, shape):
    net = make_net()
    x, y = data(kind, shape=shape)
    expected = explicit_ggn(net, x, y, kind)
    sites = [name for name, _ in net.named_parameters()]  # biases too: G is of every parameter
    for chunk in (2, 32):  # 5 examples: uneven chunks, and one chunk
        result = ggn_diagonal(net, sites, x, y, chunk=chunk)  # the loss from y's dtype
        for site in sites:
            torch.testing.assert_close(result[site], expected[site], rtol=1e-10, atol=1e-12)
    other = y.double() if kind == "cross_entropy" else y.long()  # targets of the other dtype: loss_kind decides
    overridden = ggn_diagonal(net, sites, x, other, loss_kind=kind)
    assert all(torch.equal(overridden[site], result[site]) for site in sites)


def test_ggn_diagonal_of_a_linear_on_unflattened_inputs_and_of_modules_it_cannot_read():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Flatten(), nn.Linear(8, 3)).double()  # the first on (N, 4, 3)
    x, y = data("squared", shape=(4, 3))
    expected = explicit_ggn(net, x, y, "squared")
    result = ggn_diagonal(net, [name for name, _ in net.named_parameters()], x, y)
    for site, value in expected.items():
        torch.testing.assert_close(result[site], value, rtol=1e-10, atol=1e-12)
    shared = nn.Linear(3, 3).double()
    x, y = data("squared")
    with pytest.raises(ValueError, match="'0' is called more than once"):
        ggn_diagonal(nn.Sequential(shared, nn.Tanh(), shared), ["0.weight"], x, y)
    with pytest.raises(ValueError, match="'spare' is not called"):
        ggn_diagonal(WithSpareLayer().double(), ["spare.weight"], x, y)


class WithSpareLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.spare = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.used(x)


@pytest.mark.parametrize("kind", ["cross_entropy", "squared"])
def test_lm_qm_obd_are_eqs_6_5_3_with_finite_difference_gradients_and_the_explicit_ggn(kind):
    net = tiny_mlp()
    x, y = data(kind, n=6)
    grads, ggn = finite_difference_gradient(net, x, y, kind), explicit_ggn(net, x, y, kind)
    lm, qm, obd = (saliency(name, net, x=x, y=y) for name in ("lm", "qm", "obd"))
    for site in weight_sites(net):
        theta = net.get_parameter(site).detach()
        torch.testing.assert_close(lm[site], (grads[site] * theta).abs(), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(obd[site], 0.5 * ggn[site] * theta**2, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(
            qm[site], (-grads[site] * theta + 0.5 * ggn[site] * theta**2).abs(), rtol=1e-6, atol=1e-9
        )
        assert lm[site].dtype == torch.float64
    if kind == "cross_entropy":  # LM is SNIP's saliency (section 3.1)
        torch.testing.assert_close(
            flat(lm), flat(saliency("snip", net, x=x, y=y, loss=F.cross_entropy)), rtol=1e-12, atol=0
        )


def test_at_a_minimum_the_gradient_term_vanishes_so_qm_is_obd_and_lm_is_zero():
    """Logistic regression trained to convergence on non-separable data: ∂L/∂θ = 0 (eq. 5 → eq. 3)."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(3, 3)).double()
    x, y = data("cross_entropy", n=200)
    optimizer = torch.optim.LBFGS(
        net.parameters(), max_iter=500, tolerance_grad=1e-13, tolerance_change=0, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        value = F.cross_entropy(net(x), y)
        value.backward()
        return value

    optimizer.step(closure)
    assert max(param.grad.abs().max().item() for param in net.parameters()) < 1e-9
    lm, qm, obd = (saliency(name, net, x=x, y=y) for name in ("lm", "qm", "obd"))
    assert flat(lm).max() < 1e-8
    assert flat(obd).min() > 1e-4  # the quadratic term is not trivially small
    torch.testing.assert_close(flat(qm), flat(obd), rtol=1e-7, atol=0)


def test_where_the_ggn_vanishes_qm_is_lm():
    """Confidently wrong predictions saturate the softmax: diag(p) − p pᵀ ≈ 0, so G ≈ 0, but ∂L/∂θ ≠ 0."""
    net = nn.Sequential(nn.Linear(2, 2, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[30.0, 5.0], [-30.0, 4.0]]))
    x, y = torch.tensor([[1.0, 0.5], [2.0, -1.0]], dtype=torch.float64), torch.tensor([1, 1])
    lm, qm, obd = (saliency(name, net, x=x, y=y) for name in ("lm", "qm", "obd"))
    assert flat(obd).max() < 1e-20 and flat(lm).min() > 1e-2
    torch.testing.assert_close(flat(qm), flat(lm), rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", sorted(CRITERIA))
def test_the_penalty_adds_half_lambda_theta_squared_and_a_large_one_ranks_like_magnitude(name):
    net = tiny_mlp((4, 6, 3))
    x, y = data("cross_entropy", n=8, shape=(4,))
    options = {"x": x, "y": y, "loss": F.cross_entropy}
    plain = saliency(name, net, generator=torch.Generator().manual_seed(0), **options)
    penalised = saliency(name, net, generator=torch.Generator().manual_seed(0), penalty=0.3, **options)
    for site in plain:
        torch.testing.assert_close(
            penalised[site] - plain[site], 0.15 * net.get_parameter(site).detach() ** 2, rtol=1e-12, atol=1e-15
        )
    large = saliency(name, net, generator=torch.Generator().manual_seed(0), penalty=1e10, **options)
    assert torch.equal(torch.argsort(flat(large)), torch.argsort(flat(saliency("magnitude", net))))


@pytest.mark.parametrize("target", [0.0, 0.29, 0.5, 0.956, 0.9885])
@pytest.mark.parametrize("stages", [1, 2, 7, 140])
def test_schedules_end_at_the_target_and_increase(target, stages):
    linear, exponential = sparsity_schedule(target, stages, "linear"), sparsity_schedule(target, stages, "exponential")
    for schedule in (linear, exponential):
        assert len(schedule) == stages and schedule[-1] == target
        assert all(later >= earlier for earlier, later in zip([0.0] + schedule, schedule))
        if target > 0:
            assert all(later > earlier for earlier, later in zip([0.0] + schedule, schedule))
    steps = [later - earlier for earlier, later in zip([0.0] + linear, linear)]
    assert steps == pytest.approx([target / stages] * stages, abs=1e-15)
    assert exponential == pytest.approx(
        [1 - (1 - target) ** (i / stages) for i in range(1, stages + 1)], rel=1e-12, abs=1e-15
    )
    assert sparsity_schedule(target, stages) == exponential


def test_the_exponential_schedule_removes_a_constant_fraction_of_what_is_left_and_front_loads():
    schedule = sparsity_schedule(0.99, 4, "exponential")
    kept = [1.0] + [1 - kappa for kappa in schedule]
    assert [later / earlier for earlier, later in zip(kept, kept[1:])] == pytest.approx([0.01**0.25] * 4, rel=1e-12)
    assert schedule[0] > sparsity_schedule(0.99, 4, "linear")[0]


@pytest.mark.parametrize(
    "args", [(1.0, 3, "linear"), (-0.1, 3, "linear"), (0.5, 0, "linear"), (0.5, 2.0, "linear"), (0.5, 3, "cubic")]
)
def test_schedules_reject_bad_arguments(args):
    with pytest.raises(ConfigError):
        sparsity_schedule(*args)


@pytest.mark.parametrize("criterion", ["qm", "random"])  # random scores would revive pruned weights if unmasked
@pytest.mark.parametrize("schedule", ["exponential", "linear"])
def test_multi_stage_masks_are_nested_and_remove_exact_counts(criterion, schedule):
    net = tiny_mlp((6, 8, 4))
    before = copy.deepcopy(net.state_dict())
    x, y = data("cross_entropy", n=40, shape=(6,), outputs=4)
    total = 6 * 8 + 8 * 4
    previous = None
    stages = list(
        pruning_stages(
            net,
            criterion,
            0.83,
            x=x,
            y=y,
            stages=5,
            schedule=schedule,
            examples_per_stage=10,
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert [kappa for kappa, _, _ in stages] == sparsity_schedule(0.83, 5, schedule)
    for kappa, masks, _ in stages:
        assert list(masks) == weight_sites(net) and all(mask.dtype == torch.bool for mask in masks.values())
        assert total - int(flat(masks).sum()) == math.floor(round(kappa * total, 6))
        if previous is not None:
            assert not (flat(masks) & ~flat(previous)).any()  # nothing pruned comes back
        previous = masks
    assert total - int(flat(previous).sum()) == math.floor(0.83 * total) == 66
    assert all(torch.equal(value, before[name]) for name, value in net.state_dict().items())  # a copy was masked


@pytest.mark.parametrize("criterion", ["obd", "lm", "qm", "magnitude"])
def test_one_stage_is_one_shot_pruning(criterion):
    net = tiny_mlp((6, 8, 4))
    x, y = data("cross_entropy", n=30, shape=(6,), outputs=4)
    masks = multi_stage_masks(net, criterion, 0.6, x=x, y=y, stages=1, examples_per_stage=1000)  # all 30, shuffled
    expected = prune(saliency(criterion, net, x=x, y=y), Budget(sparsity=0.6))
    assert all(torch.equal(masks[site], expected[site]) for site in expected)


def test_stage_two_re_scores_the_masked_network():
    """Oracle of Algorithm 1 with two stages: stage 2 removes the lowest QM scores of θ ⊙ m₁ among the survivors."""
    net = tiny_mlp((6, 8, 4))
    x, y = data("cross_entropy", n=30, shape=(6,), outputs=4)
    (kappa1, first, _), (kappa2, second, _) = pruning_stages(net, "qm", 0.7, x=x, y=y, stages=2, examples_per_stage=30)
    masked = copy.deepcopy(net)
    with torch.no_grad():
        for site, mask in first.items():
            masked.get_parameter(site).mul_(mask)
    scores, alive = flat(saliency("qm", masked, x=x, y=y)), flat(first)
    survivors = torch.nonzero(alive).flatten()
    count = math.floor(kappa2 * 80) - math.floor(kappa1 * 80)
    removed = survivors[torch.argsort(scores[survivors])[:count]]
    expected = alive.clone()
    expected[removed] = False
    assert torch.equal(flat(second), expected)
    assert not torch.equal(flat(second), flat(prune(saliency("qm", net, x=x, y=y), Budget(sparsity=kappa2))))


def test_every_stage_draws_its_own_examples(monkeypatch):
    """Appendix B.2: each stage's saliencies are estimated on examples_per_stage examples drawn afresh,
    the i-th draw of the generator (not one draw reused by every stage)."""
    from bayesprune.methods.saliency import stages as stages_module

    seen = []
    real = stages_module.saliency
    monkeypatch.setattr(
        stages_module,
        "saliency",
        lambda criterion, net, *, x, y, **kw: seen.append(x) or real(criterion, net, x=x, y=y, **kw),
    )
    net = tiny_mlp((6, 10, 3))
    x, y = torch.randn(200, 6, dtype=torch.float64), torch.randint(0, 3, (200,))
    multi_stage_masks(
        net, "obd", 0.8, x=x, y=y, stages=3, examples_per_stage=20, generator=torch.Generator().manual_seed(5)
    )
    draws = torch.Generator().manual_seed(5)
    assert len(seen) == 3
    for examples in seen:
        torch.testing.assert_close(examples, x[torch.randperm(200, generator=draws)[:20]])
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])


def test_multi_stage_magnitude_pruning_is_one_shot_magnitude_pruning():
    """MP ranks the surviving weights the same at every stage: it is invariant to π (section 5)."""
    net = tiny_mlp((6, 8, 4))
    x, y = data("cross_entropy", n=10, shape=(6,), outputs=4)
    masks = multi_stage_masks(net, "magnitude", 0.9, x=x, y=y, stages=6)
    expected = prune(saliency("magnitude", net), Budget(sparsity=0.9))
    assert all(torch.equal(masks[site], expected[site]) for site in expected)


def test_multi_stage_masks_reject_bad_arguments():
    net, (x, y) = tiny_mlp(), data("cross_entropy")
    with pytest.raises(ValueError, match="criterion"):
        pruning_stages(net, "obs", 0.5, x=x, y=y, stages=2)
    with pytest.raises(ConfigError, match="examples_per_stage"):
        pruning_stages(net, "qm", 0.5, x=x, y=y, stages=2, examples_per_stage=0)
    with pytest.raises(ConfigError, match="stages"):
        pruning_stages(net, "qm", 0.5, x=x, y=y, stages=0)
    with pytest.raises(ConfigError, match="penalty"):
        saliency("qm", net, x=x, y=y, penalty=-1.0)
    with pytest.raises(ValueError, match="loss_kind"):
        saliency("qm", net, x=x, y=y, loss_kind="hinge")


def test_loss_change_against_a_hand_computation():
    net = nn.Sequential(nn.Linear(2, 2, bias=False)).double()
    weight = [[1.0, -2.0], [0.5, 3.0]]
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(weight))
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)
    masks = {"0.weight": torch.tensor([[True, False], [True, True]])}
    pruned = [[1.0, 0.0], [0.5, 3.0]]

    def logits(w, row):
        return [sum(w[k][j] * row[j] for j in range(2)) for k in range(2)]

    def cross_entropy(w, labels):
        return (
            sum(
                math.log(sum(math.exp(u) for u in logits(w, row))) - logits(w, row)[t]
                for row, t in zip(x.tolist(), labels)
            )
            / 2
        )

    def squared(w, targets):
        return (
            sum(
                0.5 * sum((u - t) ** 2 for u, t in zip(logits(w, row), target))
                for row, target in zip(x.tolist(), targets)
            )
            / 2
        )

    labels, targets = [0, 1], [[0.5, -1.0], [2.0, 0.0]]
    expected = abs(cross_entropy(pruned, labels) - cross_entropy(weight, labels))
    assert loss_change(net, masks, x, torch.tensor(labels)) == pytest.approx(expected, rel=1e-12)
    expected = abs(squared(pruned, targets) - squared(weight, targets))
    assert loss_change(net, masks, x, torch.tensor(targets, dtype=torch.float64)) == pytest.approx(expected, rel=1e-12)
    assert loss_change(net, {"0.weight": torch.ones(2, 2, dtype=torch.bool)}, x, torch.tensor(labels)) == 0.0
