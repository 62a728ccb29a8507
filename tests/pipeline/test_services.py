"""The platform's services hold for every registered method: stopped at a checkpoint and resumed, a run
equals the uninterrupted one; ``train.validation`` keeps the best epoch or is refused in one line;
methods that learn probabilities write a ``posterior.nc`` that ArviZ reads."""

import json
import signal

import arviz as az
import pytest
import torch
import torch.nn.functional as F

from bayesprune.cli import main
from bayesprune.core.early_stopping import hold_out
from bayesprune.core.errors import ConfigError, Interrupted
from bayesprune.core.loop import STOP
from bayesprune.core.tasks import network_metric
from bayesprune.data import load_dataset
from bayesprune.methods import FitContext, Method, available_methods, context
from bayesprune.models import build_architecture
from bayesprune.pipeline.runner import resume_run, run
from helpers import without_timings

METHODS = sorted(available_methods())
#: Methods whose fit learns probabilities of weights or units: those with ArviZ data of their own.
PROBABILISTIC = {
    name for name, method in available_methods().items() if method.inference_data is not Method.inference_data
}


class Stopper:
    """Counts the checkpoints written; after the ``stop_after``-th, sends the run a stop request, as the
    command line's SIGTERM handler does."""

    def __init__(self, write, stop_after=None):
        self.write, self.stop_after, self.count = write, stop_after, 0

    def __call__(self, *args, **kwargs):
        self.write(*args, **kwargs)
        self.count += 1
        if self.count == self.stop_after:
            STOP.signal = signal.SIGTERM


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, short_config):
    """``uninterrupted(method)`` → the run directory, metrics (no timings) and number of checkpoints
    written of the method's short digits run, made once per module."""
    runs = {}

    def get(method):
        if method not in runs:
            out, counter = tmp_path_factory.mktemp(method) / "run", Stopper(context.write_checkpoint)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(context, "write_checkpoint", counter)
                metrics = run(short_config(method, "baseline.enabled=false"), out)
            runs[method] = out, without_timings(metrics), counter.count
        return runs[method]

    return get


@pytest.fixture
def stopper(monkeypatch):
    def install(stop_after=None):
        counter = Stopper(context.write_checkpoint, stop_after)
        monkeypatch.setattr(context, "write_checkpoint", counter)
        return counter

    yield install
    STOP.signal = None


@pytest.mark.parametrize("method", METHODS)
def test_stopped_at_a_checkpoint_then_resumed_equals_the_uninterrupted_run(
    method, tmp_path, short_config, stopper, uninterrupted
):
    """SIGTERM at the first checkpoint and, for a fit of several stages, at a checkpoint half-way (finished
    stages are put back, not trained again); ``--resume`` then gives the uninterrupted metrics."""
    config = short_config(method, "baseline.enabled=false")
    _, whole, checkpoints = uninterrupted(method)
    stops = sorted({1, checkpoints // 2})
    for stop_after in stops:
        out = tmp_path / f"stopped-{stop_after}"
        stopper(stop_after)
        with pytest.raises(Interrupted, match="continue with: bayesprune run --resume"):
            run(config, out)
        STOP.signal = None
        assert not (out / "metrics.json").exists() and (out / "checkpoint.pt").exists()
        assert without_timings(resume_run(out)) == whole
        assert without_timings(json.loads((out / "metrics.json").read_text())) == whole


def test_a_run_of_several_seeds_resumes_without_fitting_finished_seeds_again(
    tmp_path, short_config, stopper, monkeypatch
):
    config = short_config("sbnn", "seeds=[0, 1]", "baseline.enabled=false")
    # seeds fitted one at a time, each with its checkpoints (seeds trained together write none)
    monkeypatch.setattr(available_methods()["sbnn"], "fits_together", False)
    counter = stopper()
    whole = without_timings(run(config, tmp_path / "whole"))
    out = tmp_path / "stopped"
    stopper(counter.count // 2 + 1)  # the first checkpoint of the second seed
    with pytest.raises(Interrupted):
        run(config, out)
    STOP.signal = None
    assert (out / "seeds" / "seed-0.json").is_file()
    fitted_seeds = []
    method = available_methods()["sbnn"]
    original = method.fit
    monkeypatch.setattr(
        method,
        "fit",
        lambda self, net, data, options, ctx: fitted_seeds.append(ctx.seed) or original(self, net, data, options, ctx),
    )
    assert without_timings(resume_run(out)) == whole
    assert fitted_seeds == [1]
    assert not list(out.glob("checkpoint-seed-*.pt"))


@pytest.mark.parametrize("method", METHODS)
def test_validation_keeps_the_best_epoch_or_is_refused_in_one_line(method, tmp_path, short_config, capsys):
    config = short_config(method, "train.validation=0.2", "baseline.enabled=false")
    out = tmp_path / "run"
    unsupported = available_methods()[method]().unsupported_for(config.method_options)
    if "validation" in unsupported:
        with pytest.raises(ConfigError, match=f"^train.validation is not supported by method '{method}': "):
            run(config, out)
        assert not out.exists()
        status = main(["run", f"{method}-digits", "--out", str(out), "--set", "train.validation=0.2", "--quiet"])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and "train.validation" in err and not out.exists()
        return
    metrics = run(config, out)
    assert metrics["n_validation"] == round(0.2 * 1437)
    assert 1 <= metrics["best_epoch"] <= 2


def test_early_stopping_keeps_the_state_of_the_epoch_with_the_lowest_validation_error():
    """Oracle: the validation error of the network after every epoch, recorded independently; the stage
    ends holding the network of the first epoch with the lowest one."""
    torch.manual_seed(0)
    data = load_dataset("digits")
    data, x_val, y_val = hold_out(data, 0.3, seed=0)
    net = build_architecture("mlp", data.input_shape, data.output_dim, hidden=[16])
    errors = []

    def record(epoch, history):
        errors.append(network_metric(net, x_val, y_val, "classification"))

    ctx = FitContext(epochs=12, batch_size=256, validation=(x_val, y_val), callbacks=(record,))
    ctx.optim = ctx.optim.__class__(name="sgd", lr=0.5, momentum=0.9)  # large steps: the error goes up and down
    ctx.train_network(
        "dense", net, ctx.batches(data.x_train, data.y_train), epochs=12, loss=F.cross_entropy, validate=True
    )
    best = min(range(len(errors)), key=errors.__getitem__)
    assert ctx.best_epoch == best + 1 and best < len(errors) - 1  # not simply the last epoch
    assert network_metric(net, x_val, y_val, "classification") == errors[best]


@pytest.mark.parametrize("method", sorted(PROBABILISTIC))
def test_methods_that_learn_probabilities_write_a_posterior_arviz_reads(method, uninterrupted):
    out, _, _ = uninterrupted(method)
    idata = az.from_netcdf(out / "posterior.nc")
    shapes = torch.load(out / "checkpoint.pt", weights_only=True)["structure"]
    sites = set(shapes) | {name.rsplit(".", 1)[0] + ".gate" for name in shapes}  # unit gates: after their layer
    variables = [name for name in idata.posterior.data_vars if name in sites]  # beside derived quantities (ψ, ...)
    assert variables, list(idata.posterior.data_vars)
    for name in variables:
        draws = idata.posterior[name]
        assert draws.dims[:2] == ("chain", "draw")
        # an axis of length n at position a is dim_<a>_<n>, shared by the sites (a gate vector of n units: unit_<n>)
        axes = (
            [f"unit_{draws.shape[2]}"]
            if name.endswith(".gate")
            else [f"dim_{a}_{n}" for a, n in enumerate(shapes[name])]
        )
        assert list(draws.dims[2:]) == axes
    summary = az.summary(idata, var_names=variables[:1], kind="stats")
    assert len(summary) == idata.posterior[variables[0]][0, 0].size


#: A valid setting of each config key a method may not read (the name first where the key needs it).
SETTINGS = {
    "optim.name": ["optim.name='sgd'"],
    "optim.momentum": ["optim.name='sgd'", "optim.momentum=0.5"],
    "optim.schedule": ["optim.schedule='cosine'"],
    "optim.weight_decay": ["optim.weight_decay=1e-4"],
    "model.noise_scale": ["model.noise_scale=0.5"],
    "model.expose": ["model.expose=['BatchNorm2d']"],
    "model.hide": ["model.hide=['*.bias']"],
    "train.kernels": ["train.kernels='eager'"],
}


@pytest.mark.parametrize("method", METHODS)
def test_a_key_the_method_does_not_read_is_refused_naming_it(method, tmp_path, short_config):
    keys = [
        key for key in available_methods()[method]().unsupported_for(short_config(method).method_options) if "." in key
    ]
    for key in keys:
        with pytest.raises(ConfigError, match=r"^optim.name|^" + key.replace(".", r"\.") + " is not supported by"):
            run(short_config(method, *SETTINGS[key]), tmp_path / "run")
        assert not (tmp_path / "run").exists()
