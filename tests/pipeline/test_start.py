"""The network a fit starts from: the user's weights file (``model.weights``), the module given from Python
(``fit_method``), and the dense pre-training of ``model.pretrain_epochs``."""

import json
import pickle

import pytest
import torch

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.tasks import network_test_metric
from bayesprune.data import load_dataset
from bayesprune.methods import available_methods
from bayesprune.models import new_net
from bayesprune.pipeline.config import load_config

QUICK = ["train.epochs=1", "baseline.enabled=false", "prune.sparsities=[0.5]", "device='cpu'"]
#: The default config's network (MLP 64-100-10, ReLU, PyTorch's initialisation), set in unit-gates' digits config.
SAME_NETWORK = ["model.hidden=[100]", "model.activation='relu'", "model.init='default'"]
#: unit-gates-digits' 20 epochs of fine-tuning after the fit, left out: these tests read the start.
NO_FINETUNE = "unit-gates.finetune_epochs=0"


def _trained_outside(net, data, epochs: int = 150):
    """``net`` trained by full-batch Adam in plain torch (no bayesprune code)."""
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(epochs):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(data.x_train), data.y_train).backward()
        optimizer.step()
    return net


def _direct_error(net, data) -> float:
    """Test error % computed here: argmax of the logits against the labels."""
    with torch.no_grad():
        return 100.0 * (net(data.x_test).argmax(1) != data.y_test).double().mean().item()


def _run(tmp_path, name, config, *sets):
    argv = ["run", config, "--out", str(tmp_path / name), "--quiet"]
    for item in [*QUICK, *sets]:
        argv += ["--set", item]
    assert main(argv) == 0
    return json.loads((tmp_path / name / "metrics.json").read_text())


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    """A weights file of the default config's network (digits, MLP 64-100-10) trained outside bayesprune,
    and its test error computed directly."""
    config = load_config(None)
    data = load_dataset("digits")
    net = new_net(config, data.input_shape, data.output_dim, seed=123)
    _trained_outside(net, data)
    path = tmp_path_factory.mktemp("weights") / "trained.pt"
    torch.save(net.state_dict(), path)
    return path, _direct_error(net, data)


def test_weights_file_is_every_rows_start(weights_file, tmp_path):
    """Runs of two methods from the file start at the test error the file's network has (computed
    directly), far below a fresh network's."""
    path, direct = weights_file
    assert direct < 10
    for config, extra in (("default", []), ("unit-gates-digits", [NO_FINETUNE])):
        metrics = _run(tmp_path, config, config, f"model.weights='{path}'", *SAME_NETWORK, *extra)
        assert metrics["start_test_error"] == pytest.approx(direct, abs=1e-4), config
    fresh = _run(tmp_path, "fresh", "default")
    assert fresh["start_test_error"] > 50


def test_pretrained_start_is_shared(tmp_path):
    """``model.pretrain_epochs``: two methods' runs start from the same trained network (the same start
    error, well below a fresh network's 90 %); without it the start is the fresh network."""
    sets = [
        "model.pretrain_epochs=5",
        "data.batch_size=64",
        "optim.lr=0.005",
        "optim.schedule='constant'",
        *SAME_NETWORK,
    ]
    first = _run(tmp_path, "sbnn", "default", *sets)
    second = _run(tmp_path, "unit-gates", "unit-gates-digits", *sets, NO_FINETUNE)
    assert first["start_test_error"] == second["start_test_error"] < 20


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_fit_method_starts_from_the_module(method):
    """``fit_method`` trains the module's own weights: at a learning rate of 1e-9 every weight of the fitted
    network that is not pruned is the given one (a re-initialised network's would differ by ~0.1)."""
    data = load_dataset("digits", flatten=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    given = {name: value.clone() for name, value in _trained_outside(net, data, epochs=50).state_dict().items()}
    options = {}
    for item in available_methods()[method].quick:
        key, value = item.split("=")
        if key.startswith(f"{method}."):
            options[key.split(".", 1)[1]] = json.loads(value.replace("'", '"'))
    options.update({key: 1e-9 for key in ("finetune_lr", "mask_lr", "theta_lr") if key in _fields(method)})
    fitted = bp.fit_method(method, net, (data.x_train, data.y_train), epochs=1, optim={"lr": 1e-9}, options=options)
    weights = dict(fitted.network().named_parameters())
    for name, value in given.items():
        weight = weights[name].detach()
        kept = weight != 0
        assert kept.float().mean() > 0
        if weight.shape == value.shape:
            torch.testing.assert_close(weight[kept], value[kept], atol=1e-4, rtol=0)
        elif weight.shape[1:] == value.shape[1:]:  # a method that removed units: each row left is a given row
            rows, given_rows = weight.reshape(len(weight), -1), value.reshape(len(value), -1)
            distance = (rows[:, None] - given_rows[None]).abs().amax(dim=2).min(dim=1).values
            assert distance.max() < 1e-5, name
        # else: a layer reading removed units, its columns scaled by gates a method folded in (hard-concrete)


def _fields(method) -> set:
    return set(available_methods()[method].Options.__dataclass_fields__)


@pytest.mark.parametrize(
    "content, named",
    [
        ("other network", "'1.weight' is [50, 64] in the file, [100, 64] in the network"),
        ("pickled object", "holds a pickled object"),
        ("not a file", "no such file"),
        ("text", "not a readable weights file"),
    ],
)
def test_bad_weights_file(tmp_path, capsys, content, named):
    """A weights file of another network, a pickled object, a missing file or text: one line naming model.weights
    and the file, exit status 2, nothing written."""
    path = tmp_path / "weights.pt"
    if content == "other network":
        data = load_dataset("digits")
        other = new_net(load_config(None, ["model.hidden=[50]"]), data.input_shape, data.output_dim, seed=0)
        torch.save(other.state_dict(), path)
    elif content == "pickled object":
        torch.save(torch.nn.Linear(64, 10), path)
    elif content == "text":  # torch.load's legacy reader raises KeyError on it
        path.write_text("hello world")
    out = tmp_path / "out"
    capsys.readouterr()
    status = main(["run", "--out", str(out), "--quiet", "--set", f"model.weights='{path}'", "--set", "device='cpu'"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and "model.weights" in err and str(path) in err and named in err, err
    assert "Traceback" not in err


def test_weights_file_is_never_unpickled(tmp_path):
    """A pickle that would run code when unpickled is refused without running it."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as stream:
        pickle.dump({"0.weight": Payload()}, stream)
    assert main(["run", "--out", str(tmp_path / "out"), "--quiet", "--set", f"model.weights='{path}'"]) == 2
    assert not marker.exists()


def test_network_test_metric_is_the_direct_error(weights_file):
    """The oracle's own check: bayesprune's test metric of the loaded network is the error computed here."""
    path, direct = weights_file
    config = load_config(None, [f"model.weights='{path}'"])
    data = load_dataset("digits")
    assert network_test_metric(new_net(config, data.input_shape, data.output_dim, seed=0), data) == pytest.approx(
        direct
    )


def test_comparison_rows_share_one_trained_network(tmp_path):
    """compare with model.pretrain_epochs: each seed's network is trained once (out/starts/seed-<s>.pt, said
    in the progress lines before the first cell) and
    every row of that seed starts from it: the same start error in each row (and the leaderboard's
    ``start_test_error``), the file's network's own (computed directly), and no row trains it again (their configs hold it as model.weights)."""
    from bayesprune.pipeline.compare import compare, load_comparison
    from bayesprune.pipeline.config import RunConfig
    from helpers import TINY, cells_here

    out = tmp_path / "cmp"
    with cells_here():
        leaderboard = compare(
            None,
            out,
            methods=["sbnn", "sparse-vd"],
            sparsities=[0.5],
            seeds=[1],
            overrides=[*TINY, "model.pretrain_epochs=3"],
            report=lambda *a: None,
            status=(lines := []).append,
        )
    training = [line for line in lines if "start network" in line]
    assert len(training) == 2 and "seed 1" in training[0] and "3 epochs" in training[0]  # said, then its time
    assert lines.index(training[1]) < next(i for i, line in enumerate(lines) if "to fit" in line)
    data = load_dataset("digits")
    for seed in (1,):
        raw, _ = load_comparison(None, TINY)
        net = new_net(RunConfig.from_dict({"model": raw["model"]}), data.input_shape, data.output_dim, seed=seed)
        net.load_state_dict(torch.load(out / "starts" / f"seed-{seed}.pt", weights_only=True))
        direct = _direct_error(net, data)
        assert direct < 50
        rows = [
            json.loads((folder / "metrics.json").read_text())
            for folder in (out / "cells").iterdir()
            if folder.name.endswith(f"seed{seed}") and (folder / "metrics.json").is_file()
        ]
        starts = [row["start_test_error"] for row in rows if "start_test_error" in row]  # every row, the baseline's too
        assert len(starts) == len(rows) == 3 and all(start == pytest.approx(direct, abs=1e-4) for start in starts)
    assert [row["start_test_error"] for row in leaderboard] == pytest.approx([direct] * 3, abs=1e-4)  # shown there
    fitted = {folder.name: (folder / "metrics.json").stat().st_mtime_ns for folder in (out / "cells").iterdir()}
    with cells_here():
        compare(None, out, resume=True, seeds=[1, 2], report=lambda *a: None, status=(lines := []).append)
    assert [line for line in lines if "start network" in line and "training" in line] == [
        next(line for line in lines if "seed 2" in line)
    ]  # finished cells read back, seed 2 added: only its network is trained
    for name, stamp in fitted.items():
        assert (out / "cells" / name / "metrics.json").stat().st_mtime_ns == stamp, name  # not fitted again
    assert (out / "starts" / "seed-2.pt").is_file() and not (out / "starts" / "seed-3.pt").exists()
    assert len([folder for folder in (out / "cells").iterdir() if folder.name.endswith("seed2")]) == 3


def test_pretrain_schedule_anneals_the_start_only():
    """``model.pretrain_schedule``: under an exponential schedule whose factor is 1e-7 the rate after the first
    epoch is ~1e-10, so three epochs of pre-training end where one epoch at the constant rate ends (closed
    form of the schedule); at the constant rate the same three epochs move the weights far further. The
    run's ``[optim]`` keeps its own schedule."""
    from bayesprune.pipeline.start import start_network

    data = load_dataset("digits")

    def start(epochs, *sets):
        config = load_config(
            None, [f"model.pretrain_epochs={epochs}", "optim.schedule='constant'", "optim.gamma=1e-7", *sets]
        )
        return config, torch.nn.utils.parameters_to_vector(
            start_network(config, data, device=torch.device("cpu"), seed=0).parameters()
        )

    config, annealed = start(3, "model.pretrain_schedule='exponential'")
    one = start(1)[1]
    three = start(3)[1]
    assert config.optim.schedule == "constant"
    torch.testing.assert_close(annealed, one, atol=1e-5, rtol=0)
    assert (three - one).abs().max() > 100 * (annealed - one).abs().max() + 1e-3
