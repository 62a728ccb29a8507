"""One fit on several processes (``bayesprune run --processes 2``, gloo on the CPU) is the one-process
fit with the same global minibatch: each process takes half of every minibatch and the gradients are
averaged, so the ELBO trace and the test error must agree with a plain run's to float tolerance (the
oracle: the same command on one process). A launch whose processes disagree is refused before any fit."""

import json
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

from bayesprune.cli import main
from bayesprune.core import loop
from helpers import signal_after_one_epoch

#: Where the processes start: not the checkout, whose bayesprune/ folder is not the installed package.
CWD = tempfile.gettempdir()

SETTINGS = [
    "data.dataset='csv'",
    "data.target='target'",
    "data.task='regression'",
    "data.batch_size=32",  # 128 training rows: 4 minibatches of 32, two shares of 16
    "train.epochs=3",
    "baseline.enabled=false",
    "device='cpu'",
    "model.hidden=[16]",
    "prune.sparsities=[0.0, 0.5]",
]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A CSV regression table of 160 rows (128 to train, 32 to test), 6 inputs, two of them relevant."""
    folder = tmp_path_factory.mktemp("table")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 6))
    y = np.sin(2 * x[:, 0]) + x[:, 1] + 0.1 * rng.normal(size=160)
    header = ",".join([*(f"f{j}" for j in range(6)), "target"])
    paths = {}
    for name, rows in (("train", slice(0, 128)), ("test", slice(128, 160))):
        paths[name] = folder / f"{name}.csv"
        np.savetxt(paths[name], np.column_stack([x[rows], y[rows]]), delimiter=",", header=header, comments="")
    return paths


def arguments(config, table, out, *extra):
    settings = [*SETTINGS, f"data.train='{table['train']}'", f"data.test='{table['test']}'", *extra]
    return ["run", config, "--out", str(out), "--quiet", *(word for item in settings for word in ("--set", item))]


def test_two_processes_resume_and_run_what_one_process_runs(table, tmp_path, monkeypatch, capfd):
    """A run stopped by SIGTERM after its first epoch, resumed with ``bayesprune run --resume DIR
    --processes 2``: the two processes train the other epochs from the checkpoint and the run
    directory is written once, by process 0, with the uninterrupted one-process run's losses, ELBO
    and test error. (Fresh fits on two processes: the test below.)"""
    assert main(arguments("sbnn-digits", table, tmp_path / "one")) == 0
    with monkeypatch.context() as patch:
        patch.setattr(loop, "tqdm", signal_after_one_epoch(signal.SIGTERM))
        assert main(arguments("sbnn-digits", table, tmp_path / "two")) == 128 + signal.SIGTERM
    assert torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=True)["metadata"]["epoch"] == 1
    capfd.readouterr()
    status = main(["run", "--resume", str(tmp_path / "two"), "--quiet", "--processes", "2"])  # the launcher, here
    two = capfd.readouterr()
    assert status == 0, two.err
    assert two.out.count("results in") == 1  # process 0 speaks for the run
    one_metrics = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two_metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert two_metrics["test_rmse"] == pytest.approx(one_metrics["test_rmse"], rel=1e-4)
    assert two_metrics["final_elbo"] == pytest.approx(one_metrics["final_elbo"], rel=1e-5)
    losses = [np.loadtxt(tmp_path / run / "history.csv", delimiter=",", skiprows=1)[:, 1] for run in ("one", "two")]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one", "two"]  # nothing else written beside


#: Fits PFT, ProbMask and unit gates (their own training steps) in each process of a launch; process 0 writes
#: their losses and predictions to argv[1].
FIT_IN_EACH_PROCESS = """
import json, sys, torch
import bayesprune as bp
from bayesprune.core import distributed

distributed.start("cpu")
x, y = torch.load(sys.argv[2])
results = {}
for method, options in METHODS:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    fitted = bp.fit_method(method, net, (x, y), options=options, epochs=2, batch_size=32, device="cpu")
    results[method] = {"losses": fitted.history.step_losses, "predictions": fitted.predict(x).tolist()}
if distributed.rank() == 0:
    json.dump(results, open(sys.argv[1], "w"))
distributed.stop()
"""
METHODS = [("pft", {"start_masks": ["magnitude"], "sparsities": [0.5]}), ("probmask", {}), ("unit-gates", {})]


def test_each_methods_own_training_step_averages_over_processes(tmp_path):
    """PFT, ProbMask and unit gates through ``fit_method`` in a process group of two (as a user's ``torchrun``
    script would): the same losses and predictions as the script run in one process (this one)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(128, 6, generator=generator)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    torch.save((x, y), tmp_path / "data.pt")
    script = FIT_IN_EACH_PROCESS.replace("METHODS", repr(METHODS))
    two = tmp_path / "two.json"
    workers = launched(["-c", script, str(two), str(tmp_path / "data.pt")])
    for worker in workers:
        assert worker.wait(timeout=300) == 0, worker.stderr.read()
    one = tmp_path / "one.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched process has
    try:
        with pytest.MonkeyPatch.context() as patch:  # the same script, in this process: no process group
            patch.setattr(sys, "argv", ["-c", str(one), str(tmp_path / "data.pt")])
            exec(compile(script, "one process", "exec"), {"__name__": "__main__"})
    finally:
        torch.set_num_threads(threads)
    one, two = json.loads(one.read_text()), json.loads(two.read_text())
    for method, _ in METHODS:
        np.testing.assert_allclose(two[method]["losses"], one[method]["losses"], rtol=1e-5, err_msg=method)
        np.testing.assert_allclose(two[method]["predictions"], one[method]["predictions"], atol=1e-5, err_msg=method)


def launched(args: list, processes: int = 2) -> list:
    """``python ARGS`` in ``processes`` processes with the environment ``torchrun`` gives them."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [
        subprocess.Popen(
            [sys.executable, *(arg(rank) if callable(arg) else arg for arg in args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=CWD,
            env={
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": str(processes),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
            },
        )
        for rank in range(processes)
    ]


def test_a_launch_whose_processes_disagree_is_refused_naming_the_key(table, tmp_path):
    """Two processes as ``torchrun`` starts them, given different epochs: both refuse in one line, exit
    2, before any fit; nothing is written."""
    epochs = lambda rank: f"train.epochs={3 + rank}"  # noqa: E731
    workers = launched(["-m", "bayesprune", *arguments("sbnn-digits", table, tmp_path / "out"), "--set", epochs])
    results = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, stderr) in zip(workers, results):
        assert worker.returncode == 2
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and "config train.epochs" in lines[0] and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("processes", "env", "needle"),
    [
        ("0", {}, "--processes must be at least 1"),
        ("3", {"WORLD_SIZE": "2"}, "the launcher started 2 processes"),
        # a launch environment torch's rendezvous would answer with a traceback, or wait on forever
        (None, {"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer, got 'two'"),
        (None, {"WORLD_SIZE": "2", "RANK": "2"}, "RANK is 2, not in [0, WORLD_SIZE = 2)"),
        (None, {"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR is not set"),
        (None, {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT is not set"),
        (None, {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, "MASTER_PORT must be a port"),
    ],
)
def test_a_process_count_that_cannot_be_is_refused(processes, env, needle, table, tmp_path, monkeypatch, capsys):
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    count = [] if processes is None else ["--processes", processes]
    assert main([*arguments("sbnn-digits", table, tmp_path / "out"), *count]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
