"""Bad inputs of the Python calls (``bayesprune.fit_method``, ``bayesprune.export``), answered as the command
line answers them: a :class:`~bayesprune.core.errors.BayesPruneError` of one line naming the argument or
the model, before anything is written. One case per row of :data:`CASES`: ``(call, named)``, ``call(tmp_path)``
making the call."""

import pytest
import torch
from torch import nn

import bayesprune as bp
from bayesprune.core.errors import BayesPruneError

X = torch.randn(48, 6, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


class DataDependent(nn.Module):
    """A forward that branches on the values of its data: torch.export cannot write it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = self.a(x)
        if h.sum() > 0:
            h = h * 2
        return self.b(h)


def fitted(net=None):
    return bp.fit_method(
        "sparse-vd", net or nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)), (X, Y), epochs=1
    )


CASES = {
    "training labels beyond the network's outputs": (
        lambda tmp: bp.fit_method("sparse-vd", nn.Linear(6, 3), (X, Y + 3), epochs=1),
        "train: labels go up to 4",
    ),
    "test labels beyond the network's outputs": (
        lambda tmp: bp.fit_method("sparse-vd", nn.Linear(6, 2), (X, Y), (X, Y + 5), epochs=1),
        "test: labels go up to 6",
    ),
    "export with rows of another width": (
        lambda tmp: bp.export(fitted(), out=tmp / "net.pt2", data=(torch.randn(10, 7), Y[:10]), repeats=1),
        "data:",
    ),
    "export of a forward branching on its data": (
        lambda tmp: bp.export(fitted(DataDependent()), out=tmp / "net.pt2", data=(X, Y), repeats=1),
        "torch.export cannot export the network's forward",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_python_call_is_one_line_and_writes_nothing(case, tmp_path, capsys):
    call, named = CASES[case]
    with pytest.raises(BayesPruneError) as raised:
        call(tmp_path)
    message = str(raised.value)
    assert "\n" not in message and named in message, message
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().err == ""


class FFTBetween(nn.Module):
    """``torch.fft.rfft`` between two Linears: Torch-Pruning maps the first's 8 outputs onto 8 of the second's 5 inputs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(5, 2)

    def forward(self, x):
        return self.b(torch.fft.rfft(self.a(x)).abs())


def test_a_network_with_fft_between_two_linears_exports_and_computes_the_same(tmp_path):
    """The reported case died in dead_units with an IndexError: its groups are not looked at for dead units
    (none removed), and the written file computes the network. Oracle: the network itself."""
    fit = fitted(FFTBetween())
    exported = bp.export(fit, out=tmp_path / "net.pt2", data=(X, Y), repeats=1)
    assert exported.report["removed_dead_units"] == {}
    program = torch.export.load(str(tmp_path / "net.pt2")).module()
    with torch.no_grad():
        expected = fit.network().eval()(X)
        assert torch.allclose(program(X), expected, atol=1e-5)
