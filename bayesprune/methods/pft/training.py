"""PFT's training of keep-probabilities on a fixed network (paper 000, section 5), the overlap of its
masks, and the perturbation of the weights that compares a pruned and a dense network."""

import copy

import torch
from torch.func import functional_call

from bayesprune.core.gates import StochasticMasks
from bayesprune.core.loop import History, check_stop, optimizer_step
from bayesprune.core.optim import torch_optimizer
from bayesprune.core.pruning import apply_masks
from bayesprune.core.tasks import network_test_metric


def train_masks(
    ctx,
    name: str,
    net,
    masks: StochasticMasks,
    batches,
    *,
    epochs: int,
    loss,
    weights: bool = True,
    mask_lr: float | None = None,
) -> History:
    """Minimise the empirical Gibbs risk of ``b ∘ W`` over λ (and W when ``weights``) through the relaxed
    masks, one Concrete draw per step (PFT stage 2.2), as the stage ``name`` of ``ctx``: λ at ``mask_lr``
    (``ctx.optim.lr`` when ``None``) without weight decay, W at ``ctx.optim``'s rate and decay."""
    groups = [{"params": list(masks.parameters()), "lr": mask_lr or ctx.optim.lr, "weight_decay": 0.0}]
    if weights:
        groups.append({"params": list(net.parameters())})
    optimizer = torch_optimizer(ctx.optim, groups)

    def gibbs_loss(x, y):
        params = {name: param if weights else param.detach() for name, param in net.named_parameters()}
        return loss(functional_call(net, apply_masks(params, masks.relaxed()), (x,)), y)

    return ctx.train(
        name,
        optimizer_step(gibbs_loss, optimizer),
        batches,
        epochs=epochs,
        state={"net": net, "masks": masks, "optimizer": optimizer},
    )


def mask_overlap(start: dict, end: dict) -> float:
    """|kept by both| / |kept by ``start``|: the share of the start mask's weights the end mask keeps (paper 000, Fig. 2 left)."""
    both = sum(int((start[site] & end[site]).sum()) for site in start)
    return both / max(sum(int(start[site].sum()) for site in start), 1)


def weight_rms(net) -> dict:
    """The root mean square of each weight tensor of ``net``."""
    return {
        name: param.detach().pow(2).mean().sqrt() for name, param in net.named_parameters() if name.endswith("weight")
    }


@torch.no_grad()
def perturbation_increase(net, dataset, *, rms: dict, scales, draws: int, generator) -> list:
    """Mean increase of the test metric when Gaussian noise of standard deviation ``scale · rms[layer]`` is
    added to every non-zero weight of ``net`` (pruned weights stay zero), one value per scale (paper 000,
    Fig. 2 right). Pass the dense network's ``rms`` for both networks, so that they get the same noise."""
    base = network_test_metric(net, dataset)
    increases = []
    for scale in scales:
        total = 0.0
        for _ in range(draws):
            check_stop("while perturbing the weights")
            noisy = copy.deepcopy(net)
            for name, param in noisy.named_parameters():
                if name in rms:
                    noise = torch.randn(param.shape, generator=generator).to(param.device)
                    param.add_(scale * rms[name] * noise * (param != 0))
            total += network_test_metric(noisy, dataset) - base
        increases.append(total / max(draws, 1))
    return increases
