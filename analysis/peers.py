"""The plain network's own importance of every input group, beside the posterior's (issue 49, item 4):
Captum's permutation importance and integrated gradients of a trained network on held-out rows.

* **Permutation importance** (Breiman 2001; Fisher, Rudin and Dominici 2019): the rise in the network's
  loss on the rows when a group's columns are permuted together among the rows (Captum's
  ``FeaturePermutation`` with the group as its ``feature_mask``), averaged over ``repeats`` permutations.
* **Integrated gradients** (Sundararajan, Taly and Yan 2017, eq. 1): the path integral of the output's
  gradient from the baseline (the training mean: zero on standardised inputs) to each row, Captum's
  ``IntegratedGradients``; by completeness a group's attribution is the sum of its inputs', and its
  importance the mean over the rows of that sum's absolute value. The output is the predicted class's logit
  (classification) or the prediction (regression).

Both read the network's use of an input on these rows, not its relevance: where inputs correlate, a
network that uses one of them leaves the others at zero, which is why groups are scored together.
"""

import numpy as np
import torch


def _mask(groups: list, inputs: int) -> torch.Tensor:
    """Captum's ``feature_mask``: every input labelled with its group's number."""
    mask = torch.empty(inputs, dtype=torch.long)
    for number, group in enumerate(groups):
        mask[group] = number
    return mask.unsqueeze(0)


def _loss(net, task: str, y: torch.Tensor):
    """The network's mean loss on the rows as Captum's forward function (one number per batch)."""

    def forward(x):
        output = net(x)
        if task == "classification":
            return torch.nn.functional.cross_entropy(output, y)
        return torch.nn.functional.mse_loss(output.reshape(y.shape), y)

    return forward


def permutation_importance(net, x, y, task: str, groups: list, *, repeats: int = 10, seed: int = 0) -> np.ndarray:
    """Mean rise of the loss on ``(x, y)`` when each group's columns are permuted together, one per group."""
    from captum.attr import FeaturePermutation

    net.eval()
    forward = _loss(net, task, y)
    mask = _mask(groups, x.shape[1]).to(x.device)
    generator = torch.Generator().manual_seed(seed)

    def permute(batch, feature_mask):  # one permutation of the rows for the whole group
        order = torch.randperm(len(batch), generator=generator).to(batch.device)
        return torch.where(feature_mask.bool(), batch[order], batch)

    attribution = FeaturePermutation(lambda batch: -forward(batch), perm_func=permute)
    with torch.no_grad():
        total = sum(attribution.attribute(x, feature_mask=mask)[0] for _ in range(repeats)) / repeats
    return np.array([float(total[group[0]]) for group in groups])


def integrated_gradients(net, x, task: str, groups: list, *, steps: int = 32) -> np.ndarray:
    """Mean over the rows of |Σ_{j in group} IG_j|, one per group (the module docstring)."""
    from captum.attr import IntegratedGradients

    net.eval()
    with torch.no_grad():
        output = net(x)
    target = output.argmax(dim=1) if task == "classification" else 0
    attribution = IntegratedGradients(net).attribute(x, baselines=torch.zeros_like(x), target=target, n_steps=steps)
    attribution = attribution.detach().double().cpu().numpy()
    return np.array([np.abs(attribution[:, group].sum(axis=1)).mean() for group in groups])
