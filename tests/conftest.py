"""Shared pytest fixtures: a fixed seed, an empty Pyro parameter store and Pyro validation for every test."""
import pyro
import pytest
import torch


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
