"""Shared pytest fixtures: a fixed seed, an empty Pyro parameter store, Pyro validation and one torch thread for
every test; every method's digits config shortened to seconds (its declared ``Method.quick``);
a comparison's cells run in the test's own process where asked."""

import pyro
import pytest
import torch

from helpers import cells_here


def short_config_of(method: str, *overrides):
    """The method's digits config at 2 epochs a stage (and the rest of its declared ``quick`` settings), on
    the CPU, with ``overrides``."""
    from bayesprune.methods import available_methods
    from bayesprune.pipeline.config import load_config

    quick = available_methods()[method].quick
    return load_config(f"{method}-digits", ["train.epochs=2", "device='cpu'", "baseline.epochs=2", *quick, *overrides])


@pytest.fixture(scope="session")
def short_config():
    """:func:`short_config_of` for a test."""
    return short_config_of


@pytest.fixture(params=["eager", "compiled"])
def kernels(request):
    """Each ``train.kernels`` mode that computes something (bayesprune.core.fused); ``"compiled"`` is
    skipped, naming why, where torch.compile cannot build a kernel here (no C++ compiler)."""
    if request.param == "compiled":
        from bayesprune.core.errors import ConfigError
        from bayesprune.core.fused import check_compiler

        try:
            check_compiler(torch.device("cpu"))
        except ConfigError as error:
            pytest.skip(str(error))
    return request.param


@pytest.fixture(autouse=True)
def pyro_state():
    """Seed all RNGs, clear Pyro's parameter store and keep distribution validation on around each test, which
    starts with one intra-op thread (whatever the test before it set: ``bayesprune.cli.main`` sets its own).

    The tests' networks are tiny: a step is per-op overhead, not arithmetic. With two OpenMP threads in each of
    the suite's workers on a busy two-core machine the threads' spin-waits made them up to 20x slower
    (test_sbnn_init.py's two fits: 68.5 s at two threads, 3.4 s at one, load ~7); the command line's default is
    one thread on two cores as well (``bayesprune.pipeline.threads``), and the goldens were recorded at one.
    """
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    pyro.enable_validation(True)
    yield
    pyro.clear_param_store()
    pyro.enable_validation(True)


@pytest.fixture(scope="session")
def complete_run(tmp_path_factory):
    """A complete run of the default config at one epoch (no plain baseline, one predictive draw), made once
    per test process for the bad-input and reliability tests, which read it or copy it, never change it."""
    from bayesprune.cli import main

    out = tmp_path_factory.mktemp("complete") / "run"
    quick = ["train.epochs=1", "baseline.enabled=false", "sbnn.predictive_samples=1"]
    assert main(["run", "--out", str(out), "--quiet", *(arg for item in quick for arg in ("--set", item))]) == 0
    return out


@pytest.fixture(scope="module")
def cells_in_this_process():
    """Run a test module's comparisons and sweeps (``engine="local"``) in the test's process.

    Each of the engine's spawned workers imports torch, Pyro, scikit-learn and ArviZ again (seconds of
    CPU per compare call); a module that checks what a comparison writes and reads back, not its workers,
    opts in with ``pytestmark = pytest.mark.usefixtures("cells_in_this_process")``. The workers
    themselves (pool, jobs, signals) are tested through the real pool in test_compare_workers.py and
    test_compare_signals.py.
    """
    with cells_here():
        yield


def pytest_unconfigure(config):
    """A test process (each xdist worker) ends as a command does, without the interpreter's collections over
    every module it imported (seconds at the end of every worker, :mod:`bayesprune.core.process_exit`)."""
    from bayesprune.core.process_exit import exit_without_collection

    exit_without_collection()
