"""What several test modules share: a LeNet-5 written the usual way, and a check of one-line data errors."""

import contextlib

import pytest
import torch.nn.functional as F
from torch import nn

from bayesprune.core.errors import DataError


class ClassicLeNet5(nn.Module):
    """6-16-120-84 LeNet-5 written the usual way: a forward with functional ReLU, pooling and view."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).view(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


@contextlib.contextmanager
def raises_data_error(*needles):
    """Expect a one-line DataError whose message contains every needle."""
    with pytest.raises(DataError) as info:
        yield info
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert str(needle) in message, f"{needle!r} not in {message!r}"


#: Comparison settings of one epoch everywhere: the compare and tracking tests check bookkeeping, not accuracy.
TINY = [
    "train.epochs=1",
    "baseline.epochs=1",
    "compare.finetune_epochs=1",
    "compare.latency_repeats=2",
    "pbp.prior_epochs=1",
    "pbp.prior_mask_epochs=1",
    "pbp.mc_samples=10",
    "pbp.prior_samples=5",
]
PBP_TINY = [
    "train.epochs=1",
    "pbp.prior_epochs=1",
    "pbp.prior_mask_epochs=1",
    "pbp.mc_samples=10",
    "pbp.prior_samples=5",
    "baseline.enabled=false",
]
