"""The method plug-in platform: registry, packaged configs, golden output, old run directories, a new method."""

import copy
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bayesprune.cli import main
from bayesprune.core.checkpoint import read_checkpoint
from bayesprune.core.errors import ConfigError
from bayesprune.core.export import export
from bayesprune.core.loop import optimizer_step
from bayesprune.core.pruning import Budget, prune
from bayesprune.methods import METHODS, Fitted, Method, available_methods, get_method, register_method
from bayesprune.pipeline.config import RunConfig, load_config, packaged_configs
from bayesprune.pipeline.runner import load_run


def test_every_registered_method_ships_a_packaged_config_that_validates():
    by_method = {}
    for name in packaged_configs():
        by_method.setdefault(load_config(name).method, []).append(name)
    for method in available_methods():
        assert by_method.get(method), f"method {method!r} ships no packaged config"


def test_unknown_method_and_a_foreign_method_table_are_refused():
    with pytest.raises(ConfigError, match="^method must be one of"):
        RunConfig.from_dict({"method": "magic"})
    METHODS["other"] = type("Other", (Method,), {"name": "other"})
    try:
        with pytest.raises(ConfigError, match=r"\[other\] holds the options of method 'other'"):
            RunConfig.from_dict({"method": "sbnn", "other": {}})
    finally:
        del METHODS["other"]


def test_old_sections_fold_into_the_method_table_and_a_key_given_twice_is_refused():
    old = RunConfig.from_dict(
        {
            "prior": {"name": "spike-slab", "pi": 0.3, "log_tau0": -4.0, "log_tau1": 0.5},
            "guide": {"name": "spike-slab", "init_scale": 0.02},
            "objective": {"name": "analytic-kl", "penalty": "geometric", "num_particles": 2},
            "train": {"epochs": 3, "predictive_samples": 4},
        }
    )
    new = RunConfig.from_dict(
        {
            "sbnn": {
                "pi": 0.3,
                "log_tau0": -4.0,
                "log_tau1": 0.5,
                "init_scale": 0.02,
                "objective": "analytic-kl",
                "penalty": "geometric",
                "num_particles": 2,
                "predictive_samples": 4,
            },
            "train": {"epochs": 3},
        }
    )
    assert old == new
    assert tomllib.loads(old.to_toml())["sbnn"]["pi"] == 0.3 and "prior" not in tomllib.loads(old.to_toml())
    with pytest.raises(ConfigError, match="prior.pi is the old name of sbnn.pi"):
        load_config("default", ["prior.pi=0.3"])  # the packaged default sets sbnn.pi


def _as_old_run_dir(run_dir: Path):
    """Rewrite a run directory in the layout of bayesprune before method plug-ins."""
    config = tomllib.loads((run_dir / "config.toml").read_text())
    sbnn = config.pop("sbnn")
    old = "\n".join(
        [
            'method = "sbnn"',
            f"seed = {config['seed']}",
            "[data]",
            'dataset = "digits"',
            f"batch_size = {config['data']['batch_size']}",
            "[model]",
            'architecture = "mlp"',
            f"hidden = {config['model']['hidden']}",
            "[prior]",
            f"pi = {sbnn['pi']}",
            f"log_tau0 = {sbnn['log_tau0']}",
            f"log_tau1 = {sbnn['log_tau1']}",
            "[guide]",
            f"init_scale = {sbnn['init_scale']}",
            "[train]",
            f"epochs = {config['train']['epochs']}",
            f"predictive_samples = {sbnn['predictive_samples']}",
        ]
    )
    (run_dir / "config.toml").write_text(old + "\n")
    saved = read_checkpoint(run_dir / "checkpoint.pt")
    torch.save({**saved["state"], "metadata": saved["metadata"]}, run_dir / "checkpoint.pt")
    losses = (run_dir / "history.csv").read_text().splitlines()[1:]
    (run_dir / "elbo.csv").write_text(
        "epoch,elbo\n" + "".join(f"{epoch},{-float(loss)}\n" for epoch, loss in (line.split(",") for line in losses))
    )
    (run_dir / "scores.npz").rename(run_dir / "inclusion_probabilities.npz")
    (run_dir / "history.csv").unlink()


def test_a_run_directory_of_the_old_layout_still_loads_and_reports(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--out",
                str(out),
                "--quiet",
                "--set",
                "train.epochs=1",
                "--set",
                "baseline.enabled=false",
                "--set",
                "sbnn.predictive_samples=2",
            ]
        )
        == 0
    )
    _, dataset, fitted = load_run(out)
    expected = fitted.predict(dataset.x_test)
    _as_old_run_dir(out)
    _, _, restored = load_run(out)
    assert torch.equal(restored.predict(dataset.x_test), expected)
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").exists()
    assert main(["importance", str(out)]) == 0 and (out / "importance.csv").exists()


class MagnitudeFitted(Fitted):
    """A trained deterministic network scored by |w| (what a user's own plug-in might hand over),
    with half of its hidden units removed after training: its network is smaller than the config's."""

    method = "test-magnitude"
    score_name = "weight magnitude"

    def scores(self):
        return {name: param.detach().abs() for name, param in self.net.named_parameters()}

    def predict(self, x, *, masks=None, num_samples=0):
        params = {name: param * masks[name] if masks else param for name, param in self.net.named_parameters()}
        return torch.softmax(torch.func.functional_call(self.net, params, (x,)), dim=-1)

    def network(self):
        return copy.deepcopy(self.net)

    def state_dict(self):
        return {"net": self.net.state_dict()}


@dataclass(frozen=True)
class NoOptions:
    pass


class MagnitudeMethod(Method):
    name = "test-magnitude"
    Options = NoOptions

    def fit(self, net, data, options, ctx):
        optimizer = torch.optim.Adam(net.parameters(), lr=ctx.optim.lr)
        step = optimizer_step(lambda x, y: F.cross_entropy(net(x), y), optimizer)
        history = ctx.train(
            "fit",
            step,
            ctx.batches(data.x_train, data.y_train),
            epochs=ctx.epochs,
            state={"net": net, "optimizer": optimizer},
        )
        scores = {name: param.detach().abs() for name, param in net.named_parameters()}
        net = export(net, prune(scores, Budget(sparsity=0.5, level="unit"), net=net))
        return MagnitudeFitted(net, history=history)

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return MagnitudeFitted(net)


@pytest.fixture
def magnitude_config(tmp_path):
    """A config file for the test method, registered for the duration of the test."""
    register_method(MagnitudeMethod)
    path = tmp_path / "magnitude.toml"
    path.write_text('method = "test-magnitude"\n[optim]\nlr = 0.01\n[train]\nepochs = 3\n[baseline]\nenabled = false\n')
    yield str(path)
    del METHODS["test-magnitude"]


def test_a_new_method_runs_through_the_shared_runner_report_and_restore(tmp_path, magnitude_config):
    """A method defined outside the package (here, in this test) gets the whole pipeline: pruning curve,
    report, checkpoint and restore, without any shared module knowing it."""
    out = tmp_path / "run"
    assert main(["run", magnitude_config, "--out", str(out), "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "test-magnitude" and metrics["score"] == "weight magnitude"
    assert "test_error_mc" not in metrics and not (out / "posterior.nc").exists()
    assert metrics["test_error"] < 20  # digits after 3 epochs of Adam
    assert {"report.md", "loss.png", "score_cdf.png", "pruning_curve.png", "history.csv", "scores.npz"} <= {
        path.name for path in out.iterdir()
    }
    _, dataset, fitted = load_run(out)
    assert isinstance(fitted, MagnitudeFitted) and fitted.net[1].weight.shape == (50, 64)  # rebuilt shrunk
    assert metrics["n_weights"] == 64 * 50 + 50 + 50 * 10 + 10
    error = 100 * (fitted.predict(dataset.x_test).argmax(-1) != dataset.y_test).float().mean().item()
    assert error == pytest.approx(metrics["test_error"])
    with np.load(out / "scores.npz") as saved:
        assert np.array_equal(saved["1.weight"], fitted.net[1].weight.detach().abs().numpy())
    assert get_method("test-magnitude").name == "test-magnitude"
