"""Shared pytest fixtures: a fixed seed, an empty Pyro parameter store and Pyro validation for every test."""
import pyro
import pytest


@pytest.fixture(autouse=True)
def pyro_state():
    """Seed all RNGs, clear Pyro's parameter store and keep distribution validation on around each test."""
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    pyro.enable_validation(True)
    yield
    pyro.clear_param_store()
    pyro.enable_validation(True)
