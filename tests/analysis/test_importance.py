"""Feature and node importance (paper 003, section 3.5, eqs. 3.18 and 3.19) against path enumeration."""

import itertools
import math
from types import SimpleNamespace

import pyro
import pytest
import torch
from torch import nn

from bayesprune.analysis.importance import (
    feature_importance,
    importance_table,
    node_importance,
    plot_importance,
    plot_importance_image,
    scaled_importance,
    weight_inclusion_matrices,
)
from bayesprune.data import load_dataset
from bayesprune.experiments.common import simulation_config
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods import FitContext
from bayesprune.methods.sbnn import build_model, fit_posterior
from bayesprune.models import build_architecture
from bayesprune.models.architectures import lenet_5_caffe, mlp


def random_inclusion(net, seed=0):
    """Inclusion probabilities in (0, 1) for every parameter of ``net``, as a guide returns them."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.rand(p.shape, generator=generator, dtype=torch.float64) for name, p in net.named_parameters()}


def mean_path_probability(matrices, layer, node):
    """Oracle: enumerate every path from ``node`` of ``layer`` to any output and average its product of p."""
    widths = [m.shape[0] for m in matrices[layer:]]
    products = []
    for path in itertools.product(*(range(width) for width in widths)):
        nodes = (node, *path)
        products.append(math.prod(float(matrices[layer + k][nodes[k + 1], nodes[k]]) for k in range(len(path))))
    return sum(products) / len(products)


@pytest.mark.parametrize("outputs", [1, 3])
def test_psi_equals_mean_over_enumerated_paths(outputs):
    net = mlp((4,), outputs, hidden=(3, 2))
    matrices = weight_inclusion_matrices(random_inclusion(net), net)
    assert [tuple(m.shape) for m in matrices] == [(3, 4), (2, 3), (outputs, 2)]
    expected = torch.tensor([mean_path_probability(matrices, 0, j) for j in range(4)], dtype=torch.float64)
    torch.testing.assert_close(feature_importance(matrices), expected)


def test_psi_is_the_matrix_product_of_eq_3_18_for_one_output():
    net = mlp((5,), 1, hidden=(4, 3))
    matrices = weight_inclusion_matrices(random_inclusion(net, seed=1), net)
    product = matrices[2] @ matrices[1] @ matrices[0]  # P^(3) P^(2) P^(1), shape (1, 5)
    torch.testing.assert_close(feature_importance(matrices), product.T.squeeze(1) / (4 * 3))


def test_node_importance_of_every_layer_equals_path_enumeration():
    net = mlp((4,), 2, hidden=(3, 2))
    matrices = weight_inclusion_matrices(random_inclusion(net, seed=2), net)
    importance = node_importance(matrices)
    assert [len(v) for v in importance] == [4, 3, 2, 2]
    torch.testing.assert_close(importance[0], feature_importance(matrices))
    torch.testing.assert_close(importance[-1], torch.ones(2, dtype=torch.float64))
    for layer in range(len(matrices)):
        expected = [mean_path_probability(matrices, layer, k) for k in range(len(importance[layer]))]
        torch.testing.assert_close(importance[layer], torch.tensor(expected, dtype=torch.float64))


def test_matrices_follow_module_order_and_ignore_biases():
    net = mlp((6,), 1, hidden=(5, 4))
    inclusion = random_inclusion(net)
    matrices = weight_inclusion_matrices(inclusion, net)
    for matrix, site in zip(matrices, ["1.weight", "3.weight", "5.weight"]):
        torch.testing.assert_close(matrix, inclusion[site])


def test_accepts_a_bayesian_network_and_reports_missing_sites():
    class Wrapper:
        net = mlp((3,), 1, hidden=(2,))

    inclusion = random_inclusion(Wrapper.net)
    assert len(weight_inclusion_matrices(inclusion, Wrapper())) == 2
    del inclusion["3.weight"]
    with pytest.raises(KeyError, match="3.weight"):
        weight_inclusion_matrices(inclusion, Wrapper())


def test_conv_first_network_gives_per_channel_importance():
    net = lenet_5_caffe((3, 16, 16), 4)
    inclusion = random_inclusion(net)
    matrices = weight_inclusion_matrices(inclusion, net)
    assert [tuple(m.shape) for m in matrices] == [(20, 3), (50, 20), (500, 50), (4, 500)]
    torch.testing.assert_close(matrices[0], inclusion["0.weight"].mean(dim=(2, 3)))
    # conv → flatten → linear: the linear's 50·1·1 inputs (16 → 12 → 6 → 2 → 1) fold onto 50 channels
    assert [len(v) for v in node_importance(matrices)] == [3, 20, 50, 500, 4]
    assert feature_importance(matrices).shape == (3,)


def test_flattened_feature_map_is_averaged_per_channel():
    net = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 2 * 2, 1))  # 4x4 → 2x2 maps
    inclusion = random_inclusion(net)
    folded = weight_inclusion_matrices(inclusion, net)[1]
    expected = torch.stack([inclusion["3.weight"][:, 4 * c : 4 * (c + 1)].mean(dim=1) for c in range(3)], dim=1)
    torch.testing.assert_close(folded, expected)


def test_inconsistent_chain_is_rejected():
    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(6, 1))  # not a valid forward pass: 3 nodes feed 6 inputs
    with pytest.raises(ValueError, match="do not match"):
        weight_inclusion_matrices(random_inclusion(net), net)


def test_phi_is_min_max_scaled():
    psi = torch.tensor([0.02, 0.5, 0.11, 0.3])
    phi = scaled_importance(psi)
    assert phi.min() == 0 and phi.max() == 1
    torch.testing.assert_close(phi, (psi - 0.02) / 0.48)
    assert torch.equal(phi.argsort(), psi.argsort())


def test_phi_of_equal_importances_is_all_ones():
    assert torch.equal(scaled_importance(torch.full((3,), 0.25)), torch.ones(3))


def test_importance_table_and_plot(tmp_path):
    net = mlp((3,), 1, hidden=(2,))
    inclusion = random_inclusion(net)
    rows = importance_table(net, inclusion, feature_names=["a", "b", "c"])
    assert [row["feature"] for row in rows] == ["a", "b", "c"]
    assert {row["phi"] for row in rows} >= {0.0, 1.0}
    psi = feature_importance(weight_inclusion_matrices(inclusion, net))
    assert [row["psi"] for row in rows] == pytest.approx(psi.tolist())
    with pytest.raises(ValueError, match="2 feature names"):
        importance_table(net, inclusion, feature_names=["a", "b"])
    plot_importance(rows, tmp_path / "importance.png")
    assert (tmp_path / "importance.png").stat().st_size > 0


@pytest.fixture
def fast_svi():
    """One CPU thread and no Pyro argument validation (about 10x faster SVI steps for this tiny network)."""
    pyro.enable_validation(False)


@pytest.mark.parametrize("architecture, input_shape", [(mlp, (5,)), (lenet_5_caffe, (2, 16, 16))])
def test_importance_table_reads_the_sites_of_a_real_guide(architecture, input_shape):
    dataset = SimpleNamespace(task="classification", num_train=10)
    model = build_model(architecture(input_shape, 3), dataset, simulation_config().method_options.prior())
    rows = importance_table(model, SpikeSlabGuide(model).inclusion_probabilities())
    assert [row["feature"] for row in rows] == [f"x{j}" for j in range(input_shape[0])]
    assert all(0 < row["psi"] < 1 and 0 <= row["phi"] <= 1 for row in rows)


def fit_simulation(dataset):
    """Fit the paper's 20-10 sBNN (section 4.1) with :func:`simulation_config` on ``dataset``; returns ψ."""
    config = simulation_config(data={"dataset": dataset.name})
    net = build_architecture("mlp", dataset.input_shape, dataset.output_dim, **config.model.options)
    fitted = fit_posterior(
        net, dataset, config.method_options, FitContext.from_config(config, dataset, device=torch.device("cpu"))
    )
    return feature_importance(weight_inclusion_matrices(fitted.inclusion_probabilities(), fitted.net))


def test_fitted_sbnn_ranks_relevant_features_first(fast_svi):
    dataset = load_dataset("linear-regression", n=2000, num_features=10, num_relevant=2)
    psi = fit_simulation(dataset)
    relevant = dataset.extras["relevant"]
    assert psi[relevant].min() > 2 * psi[~relevant].max()


def test_fitted_sbnn_tracks_relative_influence_of_two_features(fast_svi):
    """Experiment 1: the importance of x_2 rises with alpha, that of x_1 falls."""
    low, high = (fit_simulation(load_dataset("feature-importance-2var", alpha=alpha)) for alpha in (0.0, 1.0))
    assert low[0] > 2 * low[1] and high[1] > 2 * high[0]


def test_the_importance_of_image_inputs_is_drawn_where_each_pixel_lies(tmp_path):
    """Only the pixels of one row and one column of a 2-channel 4x5 image keep their outgoing
    weights (p = 1, all others p = 0): eq. 3.18 gives them ψ = 1 and every other pixel ψ = 0, and the
    heat map shows exactly that cross in the right channel."""
    shape = (2, 4, 5)
    net = mlp(shape, 3, hidden=(6,))
    expected = torch.zeros(shape)
    expected[1, 2, :], expected[1, :, 3] = 1.0, 1.0
    inclusion = {name: torch.ones(p.shape, dtype=torch.float64) for name, p in net.named_parameters()}
    inclusion["1.weight"] = expected.flatten().repeat(6, 1).double()
    rows = importance_table(net, inclusion)
    image = plot_importance_image(rows, shape, tmp_path / "importance.png")
    assert image.shape == shape
    assert torch.equal(torch.from_numpy(image).float(), expected)
    assert (tmp_path / "importance.png").stat().st_size > 0


def test_the_image_heat_map_draws_psi_on_its_own_scale(tmp_path):
    """Issue 38, item 6: no pixel is drawn as exactly 0 by min-max scaling. Every first-layer weight
    has p = 1/2 except the cross's (p = 1), all later weights p = 1: eq. 3.18 gives the cross ψ = 1 and
    every other pixel ψ = 1/2 (one factor 1/2 on each path), which φ of eq. 3.19 would draw as 0."""
    shape = (1, 3, 4)
    net = mlp(shape, 2, hidden=(5,))
    cross = torch.zeros(shape)
    cross[0, 1, :], cross[0, :, 2] = 1.0, 1.0
    inclusion = {name: torch.ones(p.shape, dtype=torch.float64) for name, p in net.named_parameters()}
    inclusion["1.weight"] = (0.5 + 0.5 * cross.flatten()).repeat(5, 1).double()
    image = plot_importance_image(importance_table(net, inclusion), shape, tmp_path / "importance.png")
    assert torch.equal(torch.from_numpy(image).float(), 0.5 + 0.5 * cross)
