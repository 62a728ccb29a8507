"""The layout of training minibatches of images (``train.memory_format``, bayesprune.core.layout): channels-last
batches hold the same numbers, reach the network's convolutions channels-last, and train to the fit the
channels-first batches train to."""

import pytest
import torch
from torch import nn

from bayesprune.cli import main
from bayesprune.core.errors import ConfigError
from bayesprune.core.layout import resolve_memory_format
from bayesprune.core.loop import TensorBatches
from bayesprune.core.plain import fit_plain
from bayesprune.data.streaming import Augment
from bayesprune.methods import FitContext, get_method
from bayesprune.pipeline.config import load_config

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU


@pytest.mark.parametrize(
    ("name", "shape", "device", "expected"),
    [
        ("auto", (3, 8, 8), CUDA, torch.channels_last),
        ("auto", (3, 8, 8), CPU, torch.contiguous_format),
        ("auto", (10,), CUDA, torch.contiguous_format),
        ("channels_last", (3, 8, 8), CPU, torch.channels_last),
        ("contiguous", (3, 8, 8), CUDA, torch.contiguous_format),
    ],
)
def test_auto_lays_out_images_channels_last_on_a_gpu_only(name, shape, device, expected):
    assert resolve_memory_format(name, shape, device) == expected


def test_channels_last_for_inputs_that_are_not_images_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"^train.memory_format = 'channels_last' lays out images .* are \[10\]$"):
        resolve_memory_format("channels_last", (10,), CPU)
    with pytest.raises(ConfigError, match=r"^train.memory_format must be one of"):
        load_config("sbnn-digits", ["train.memory_format='nhwc'"])


@pytest.mark.parametrize("augment", [None, Augment(crop_padding=2, flip=True)])
def test_channels_last_batches_hold_the_channels_first_batches_numbers(augment):
    x, y = torch.randn(50, 3, 6, 6), torch.arange(50)
    batches = {}
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(0)  # the augmentation's draws
        batches[layout] = list(TensorBatches(x, y, batch_size=16, seed=3, augment=augment, memory_format=layout))
    for (x_first, y_first), (x_last, y_last) in zip(*batches.values(), strict=True):
        assert x_last.is_contiguous(memory_format=torch.channels_last) and not x_last.is_contiguous()
        assert torch.equal(x_first, x_last) and torch.equal(y_first, y_last)


class SmallCNN(nn.Module):
    """Two convolutions and a linear head; records each call's batch size and whether its input was channels-last."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(6, 8, 3)
        self.head = nn.Linear(8 * 4 * 4, 4)
        self.calls = []

    def forward(self, x):
        self.calls.append((len(x), x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()))
        hidden = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(hidden.flatten(1))


def images(n=96):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 6, 6, generator=generator)
    return x, (x[:, 0, 2:4, 2:4].sum((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()


@pytest.mark.parametrize("method", ["sbnn", "unit-gates"])
def test_a_method_trains_on_channels_last_batches_to_the_channels_first_fit(method):
    """The oracle is the same fit on channels-first batches: the same losses to float rounding (the
    convolutions add in another order), every training call of the network channels-last."""
    from bayesprune.data.registry import Dataset
    from test_any_network import SHORT

    x, y = images()
    data = Dataset(
        name="images",
        task="classification",
        input_shape=(3, 6, 6),
        num_classes=4,
        x_train=x,
        y_train=y,
        x_test=x[:20],
        y_test=y[:20],
    )
    options, optim = {
        **SHORT,
        "unit-gates": ({"finetune_epochs": 1}, {"lr": 1e-3}),
        "torch-pruning": ({}, {"lr": 1e-3}),
    }[method]
    config = load_config(f"{method}-digits", ["train.epochs=3", "device='cpu'", "data.batch_size=32"])
    method = get_method(method)
    options = method.Options(**{**vars(config.method_options), **options}) if options else config.method_options
    losses, seen = {}, {}
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(0)
        net = SmallCNN()
        ctx = FitContext.from_config(config, data, device=CPU)
        ctx.memory_format, ctx.optim = layout, type(ctx.optim)(**{**vars(ctx.optim), **optim})
        fitted = method.fit(net, data, options, ctx)
        losses[layout] = torch.tensor(fitted.history.epoch_losses)
        seen[layout] = {last for rows, last in net.calls if rows == 32}  # the training minibatches
    assert seen == {torch.contiguous_format: {False}, torch.channels_last: {True}}
    torch.testing.assert_close(losses[torch.channels_last], losses[torch.contiguous_format], rtol=1e-4, atol=1e-4)


def test_the_plain_network_trains_on_channels_last_batches_to_the_channels_first_fit():
    x, y = images()
    weights = {}
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(0)
        net = SmallCNN()
        fit_plain(net, x, y, epochs=3, lr=0.01, batch_size=32, memory_format=layout)
        assert {last for _, last in net.calls} == {layout == torch.channels_last}
        weights[layout] = torch.cat([p.detach().flatten() for p in net.parameters()])
    torch.testing.assert_close(weights[torch.channels_last], weights[torch.contiguous_format], rtol=1e-4, atol=1e-5)


def test_the_command_line_refuses_channels_last_for_a_table_before_writing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    (tmp_path / "run.toml").write_text(
        'method = "sbnn"\n[data]\ndataset = "csv"\npath = "t.csv"\ntarget = "y"\n'
        '[train]\nmemory_format = "channels_last"\n'
    )
    assert main(["run", "run.toml", "--out", "run"]) == 2
    err = capsys.readouterr().err.strip()
    assert not (tmp_path / "run").exists()
    assert err.splitlines() == [err] and "train.memory_format = 'channels_last' lays out images" in err, err
