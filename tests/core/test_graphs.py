"""``train.graphs`` (issue 51, item 3) as far as a machine without CUDA can check it (asked for on the CPU,
it is refused in one line naming the key: ``tests/test_bad_inputs.py``): ``"auto"`` there trains eagerly, and the
steps a graph cannot hold are named with the reason before anything is captured. The captures themselves
are checked on a GPU (``tests/test_cuda.py``)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.core.graphs import AUTO_GRAPH_WEIGHTS, graph_mode, graphed
from bayesprune.core.loop import TensorBatches, optimizer_step, svi_step, train


def test_an_unknown_mode_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^train.graphs must be one of \['off', 'auto', 'on'\], got 'always'"):
        with graph_mode("always"):
            pass


def test_auto_on_the_cpu_trains_eagerly_with_the_numbers_of_off():
    """The same seeded fit under ``"auto"`` and ``"off"``: the same losses and parameters, no graph recorded."""
    results = []
    for mode in ("off", "auto"):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
        x, y = torch.randn(50, 5, generator=torch.Generator().manual_seed(1)), torch.arange(50) % 3
        step = optimizer_step(
            lambda a, b, net=net: F.cross_entropy(net(a), b), torch.optim.Adam(net.parameters(), lr=0.01)
        )
        with graph_mode(mode):
            history = train(step, TensorBatches(x, y, batch_size=16), epochs=2)
        results.append((history, [p.detach().clone() for p in net.parameters()]))
    (off, off_params), (auto, auto_params) = results
    assert auto.graphs is None and off.graphs is None
    assert auto.step_losses == off.step_losses
    assert all(torch.equal(a, b) for a, b in zip(auto_params, off_params))


def test_steps_a_graph_does_not_hold_run_eagerly_and_say_why():
    """Decided before any capture (so on any machine): an SVI step is not a plain optimiser step, and under
    ``"auto"`` a network above the size limit is not launch-bound; ``"on"`` captures any size."""
    svi = svi_step(lambda x, y: None, lambda x, y: None, objective=None, optim=None)
    big = nn.Linear(AUTO_GRAPH_WEIGHTS + 1, 1, bias=False)
    plain = optimizer_step(lambda x, y: big(x).sum(), torch.optim.Adam(big.parameters()))
    with graph_mode("on"), pytest.warns(RuntimeWarning, match=r"stage 'svi' runs eagerly: its step is not a plain"):
        assert graphed(svi, torch.device("cuda"), "svi") is svi
    with graph_mode("auto"), pytest.warns(RuntimeWarning, match=r"stage 'train' runs eagerly: 2,000,001 weights"):
        assert graphed(plain, torch.device("cuda"), "train") is plain
    with graph_mode("auto"):
        assert graphed(plain, torch.device("cpu"), "train") is plain  # no CUDA device: nothing to say
