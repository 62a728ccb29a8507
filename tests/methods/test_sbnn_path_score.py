"""``sbnn.score = "path"``: a weight's inclusion logit capped by the logit of the importance of the node it
feeds (paper 003, section 3.5), against a sum over paths written out, and its effect on pruning."""

from types import SimpleNamespace

import pytest
import torch

from bayesprune.analysis.importance import path_scores
from bayesprune.core.errors import ConfigError
from bayesprune.core.pruning import Budget, prune
from bayesprune.guides import SpikeSlabGuide
from bayesprune.methods.sbnn import SBNN, SBNNFitted, SBNNOptions, build_model
from bayesprune.models.architectures import mlp


def test_path_scores_cap_each_logit_by_the_logit_of_the_mean_path_probability_of_the_node_fed():
    net = mlp((4,), 2, hidden=(3, 2))  # sites 1.*, 3.*, 5.*
    generator = torch.Generator().manual_seed(0)
    logits = {
        name: 3 * torch.randn(p.shape, generator=generator, dtype=torch.float64) for name, p in net.named_parameters()
    }
    p = {name: torch.sigmoid(value) for name, value in logits.items()}
    # Mean over the paths from a node to the two outputs of the product of p, written out.
    second = [sum(p["5.weight"][k, a] for k in range(2)) / 2 for a in range(2)]
    first = [sum(p["5.weight"][k, a] * p["3.weight"][a, i] for k in range(2) for a in range(2)) / 4 for i in range(3)]
    scores = path_scores(logits, net)
    for site, reached in [("1", first), ("3", second)]:
        cap = torch.logit(torch.tensor(reached, dtype=torch.float64))
        torch.testing.assert_close(scores[f"{site}.weight"], torch.minimum(logits[f"{site}.weight"], cap[:, None]))
        torch.testing.assert_close(scores[f"{site}.bias"], torch.minimum(logits[f"{site}.bias"], cap))
        assert (scores[f"{site}.weight"] < logits[f"{site}.weight"]).any()  # some cap binds
    torch.testing.assert_close(scores["5.weight"], logits["5.weight"])


def fitted_with_an_unused_unit(score: str) -> SBNNFitted:
    """An sBNN 3-2-1 whose unit 0 has large input weights but an output weight of 0 (in the spike)."""
    net = mlp((3,), 1, hidden=(2,))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.5]]))
        net[3].weight.copy_(torch.tensor([[0.0, 1.0]]))
    options = SBNNOptions(pi=0.5, log_tau0=-2.0, log_tau1=0.0, score=score)
    model = build_model(net, SimpleNamespace(task="regression", num_train=10), options.prior())
    return SBNNFitted(model, SpikeSlabGuide(model), score=options.score)


def test_path_score_prunes_the_input_weights_of_an_unused_unit_first():
    removed = {}
    for score in ("inclusion", "path"):
        masks = prune(fitted_with_an_unused_unit(score).scores(), Budget(sparsity=0.5, scope="layer"))
        removed[score] = (~masks["1.weight"]).nonzero()[:, 0].unique().tolist()  # rows (units) cut
    assert removed == {"inclusion": [1], "path": [0]}


def test_path_score_is_refused_for_a_network_that_is_no_chain():
    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.left, self.right = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.left(x) + self.right(x)

    with pytest.raises(ConfigError, match="sbnn.score"):
        SBNN().check(Branches(), SimpleNamespace(x_train=torch.zeros(2, 3)), SBNNOptions(score="path"))
    with pytest.raises(ConfigError, match="sbnn.score"):
        SBNNOptions(score="paths")
