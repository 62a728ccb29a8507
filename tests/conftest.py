"""Shared pytest fixtures: a fixed seed, an empty Pyro parameter store and Pyro validation for every test;
one thread where asked; every method's digits config shortened to seconds."""
import pyro
import pytest
import torch

#: Every stage of each method's ``<method>-digits`` config shortened to 2 epochs (and its Monte-Carlo
#: counts cut), so that a whole run takes a second or two.
SHORT = {
    "sbnn": [],
    "pft": ["pft.pretrain_epochs=2", "pft.finetune_epochs=2", "pft.perturbation_draws=1"],
    "pbp": ["pbp.prior_epochs=2", "pbp.prior_mask_epochs=2", "pbp.mc_samples=20", "pbp.prior_samples=5"],
    "probmask": ["probmask.t1=1", "probmask.t2=2", "probmask.finetune_epochs=2"],
    # the digits config of the golden recording (before log gamma and the rates were chosen held out)
    "unit-gates": ["unit-gates.finetune_epochs=2", "unit-gates.log_gamma=-25.0", "optim.lr=0.001", "unit-gates.finetune_lr=1e-4"],
    "saliency": ["saliency.finetune_epochs=2", "saliency.stages=[1, 3]"],
    "sparse-vd": ["sparse-vd.kl_anneal_start=0", "sparse-vd.kl_anneal_end=1"],
}


def short_config_of(method: str, *overrides):
    """The method's digits config at 2 epochs a stage, on the CPU, with ``overrides``."""
    from bayesprune.pipeline.config import load_config

    return load_config(f"{method}-digits", ["train.epochs=2", "device='cpu'", "baseline.epochs=2", *SHORT[method], *overrides])


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
