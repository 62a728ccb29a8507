"""The plain network's importance beside ψ (issue 49, item 4), through Captum: permutation importance
against a loop that permutes the columns by hand, integrated gradients against their closed form on a
linear network (IG_j = w_j x_j from a zero baseline)."""

import numpy as np
import pytest
import torch

pytest.importorskip("captum")

from bayesprune.analysis.peers import integrated_gradients, permutation_importance  # noqa: E402


def linear(weights):
    net = torch.nn.Linear(len(weights), 1)
    with torch.no_grad():
        net.weight[:] = torch.tensor([weights])
        net.bias.zero_()
    return net


def test_permutation_importance_is_the_rise_of_the_loss_when_a_group_is_permuted_together():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 4, generator=generator)
    y = 3 * x[:, 0] + x[:, 1] + 0.1 * torch.randn(300, generator=generator)
    net = linear([3.0, 1.0, 0.0, 0.0])
    groups = [[0, 1], [2], [3]]

    def loss(rows):
        return torch.nn.functional.mse_loss(net(rows).reshape(-1), y).item()

    by_hand = []
    for group in groups:
        rises = []
        for _ in range(300):
            order = torch.randperm(300, generator=generator)
            permuted = x.clone()
            permuted[:, group] = x[order][:, group]
            rises.append(loss(permuted) - loss(x))
        by_hand.append(np.mean(rises))
    found = permutation_importance(net, x, y, "regression", groups, repeats=300)
    np.testing.assert_allclose(found, by_hand, rtol=0.05, atol=1e-9)
    assert found[1] == found[2] == 0  # columns the network ignores


def test_integrated_gradients_of_a_linear_network_are_weight_times_input():
    x = torch.randn(50, 3, generator=torch.Generator().manual_seed(1))
    weights = [2.0, -1.0, 0.5]
    found = integrated_gradients(linear(weights), x, "regression", [[0], [1, 2]])
    attribution = x.double().numpy() * np.array(weights)
    expected = [np.abs(attribution[:, 0]).mean(), np.abs(attribution[:, 1] + attribution[:, 2]).mean()]
    np.testing.assert_allclose(found, expected, rtol=1e-4)


def test_classification_uses_the_cross_entropy_and_the_predicted_class():
    x = torch.randn(200, 2, generator=torch.Generator().manual_seed(2))
    y = (x[:, 0] > 0).long()
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight[:] = torch.tensor([[-4.0, 0.0], [4.0, 0.0]])
        net.bias.zero_()
    rise = permutation_importance(net, x, y, "classification", [[0], [1]], repeats=20)
    assert rise[0] > 1.0 and rise[1] == 0
    # IG of the predicted class's logit: (w_c · x) with c = argmax, so |4 x0| on every row
    found = integrated_gradients(net, x, "classification", [[0], [1]])
    np.testing.assert_allclose(found, [4 * x[:, 0].abs().mean().item(), 0.0], rtol=1e-4, atol=1e-8)
