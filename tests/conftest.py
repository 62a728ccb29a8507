"""Shared pytest fixtures: a fixed seed, an empty Pyro parameter store and Pyro validation for every test;
one thread where asked; every method's digits config shortened to seconds (its declared ``Method.quick``);
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
    """Seed all RNGs, clear Pyro's parameter store and keep distribution validation on around each test."""
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    pyro.enable_validation(True)
    yield
    pyro.clear_param_store()
    pyro.enable_validation(True)


@pytest.fixture(scope="module")
def single_thread():
    """Run a test module with one intra-op thread, restoring the previous setting afterwards.

    Pyro steps on tiny networks are dominated by per-op overhead; with two OpenMP threads on a busy
    machine the threads' spin-waits make them an order of magnitude slower. Opt in with
    ``pytestmark = pytest.mark.usefixtures("single_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
