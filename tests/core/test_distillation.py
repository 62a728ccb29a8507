"""Knowledge distillation in fine-tuning (core.plain.distillation_objective, prune.distill): the loss against
Hinton et al.'s formula written out in numpy, and a student equal to its teacher left where it is."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from bayesprune.core.plain import distillation_objective
from bayesprune.data import Dataset
from bayesprune.pipeline.finetune import FineTuning


def test_loss_is_hintons_formula():
    torch.manual_seed(0)
    student, teacher = nn.Linear(3, 4), nn.Linear(3, 4)
    x, y = torch.randn(5, 3), torch.tensor([0, 3, 1, 1, 2])
    weight, temperature = 0.3, 2.5
    got = distillation_objective(student, teacher, "classification", weight=weight, temperature=temperature)(x, y)
    s, t = student(x).detach().double().numpy(), teacher(x).detach().double().numpy()

    def log_softmax(z):
        z = z - z.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))

    hard = -log_softmax(s)[np.arange(5), y.numpy()].mean()
    pt, log_pt, log_ps = (
        np.exp(log_softmax(t / temperature)),
        log_softmax(t / temperature),
        log_softmax(s / temperature),
    )
    soft = (pt * (log_pt - log_ps)).sum(1).mean() * temperature**2
    assert float(got) == pytest.approx((1 - weight) * hard + weight * soft, rel=1e-5)


def test_student_equal_to_its_teacher_has_no_soft_gradient():
    """All the weight on the teacher's softened predictions: a network equal to its teacher is at the
    minimum (gradient zero to rounding), where the hard loss alone pulls it."""
    torch.manual_seed(1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    teacher = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    teacher.load_state_dict(net.state_dict())
    norms = {}
    for weight in (1.0, 0.0):
        net.zero_grad()
        distillation_objective(net, teacher, "classification", weight=weight, temperature=3.0)(x, y).backward()
        norms[weight] = max(p.grad.abs().max().item() for p in net.parameters())
    assert norms[1.0] < 1e-6 < 1e-2 < norms[0.0]


def test_finetuning_distils_from_the_network_before_pruning():
    """FineTuning with prune.distill = 1: the pruned network, fine-tuned, ends nearer the dense teacher's
    predictions than when fine-tuned on the labels alone."""
    torch.manual_seed(2)
    x, y = torch.randn(128, 6), torch.randint(0, 3, (128,))
    data = Dataset("toy", "classification", x, y, x[:32], y[:32], (6,), 3)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    masks = {"0.weight": torch.rand(16, 6) > 0.5}
    with torch.no_grad():
        dense = torch.softmax(net(x), -1)

    def gap(distill):
        tuned, _ = FineTuning(5, 0.01, 32, distill=distill).apply(copy.deepcopy(net), data, masks)
        with torch.no_grad():
            return (torch.softmax(tuned(x), -1) - dense).abs().mean().item()

    assert gap(1.0) < gap(0.0)
