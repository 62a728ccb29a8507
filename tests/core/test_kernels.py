"""The per-weight kernels (bayesprune.core.fused): the joint draw and KL against autograd of the plain
formula, compiled against eager, and train.kernels' modes, its auto rule and its refusals."""

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import kl_divergence

from bayesprune.core.distributions import SpikeAndSlab, SpikeSlabPosterior, SpikeSlabPosteriors
from bayesprune.core.errors import ConfigError
from bayesprune.core.fused import AUTO_COMPILE_SIZE, _Kernels, check_compiler, kernel_mode, run_kernel, softplus
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.runner import run

PRIOR = SpikeAndSlab(torch.tensor(0.25), torch.tensor(math.exp(-5.0)), torch.tensor(math.exp(-1.0)))
SHAPES = {"0.weight": (13, 7), "0.bias": (13,), "2.weight": (3, 13), "2.bias": (3,)}


def test_a_drawn_network_and_its_kls_equal_autograd_of_the_plain_formula(kernels):
    """The sBNN's joint draw W = m + softplus(ρ) ε with every site's KL (one kernel forward, one
    backward) gives the draw of the same ε, and the value and gradients in m and ρ of
    Σ W·G + Σ κ_site KL_site, as autograd of the per-site formula (eq. 3.7 at the detached p*)."""
    generator = torch.Generator().manual_seed(1)
    n = sum(math.prod(shape) for shape in SHAPES.values())
    loc = (torch.randn(n, generator=generator) * torch.logspace(-3, 0, n)).requires_grad_()
    rho = torch.linspace(-9, 3, n).requires_grad_()
    upstream = torch.randn(n, generator=generator)
    penalties = torch.linspace(0.5, 2, len(SHAPES))

    def objective(draws, kls):
        return (torch.cat([w.flatten() for w in draws]) * upstream).sum() + (torch.stack(kls) * penalties).sum()

    torch.manual_seed(0)
    with kernel_mode(kernels):
        posterior = SpikeSlabPosteriors(loc, softplus(rho), SHAPES, [PRIOR] * len(SHAPES), PRIOR.constants)
        sites = list(posterior.sites.values())
        draws = [q.rsample() for q in sites]
        fused = objective(draws, [q.summed_kl(PRIOR) for q in sites])
        grads = torch.autograd.grad(fused, (loc, rho))
    torch.manual_seed(0)
    noise = torch.randn(n)
    scale = F.softplus(rho)
    plain_draws = (loc + scale * noise).split([math.prod(shape) for shape in SHAPES.values()])
    locs, scales, logits = (x.split([q.loc.numel() for q in sites]) for x in (loc, scale, posterior.logits))
    plain_kls = [kl_divergence(SpikeSlabPosterior(m, s, z), PRIOR).sum() for m, s, z in zip(locs, scales, logits)]
    plain = objective(plain_draws, plain_kls)
    torch.testing.assert_close([w.flatten() for w in draws], list(plain_draws), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(fused, plain, rtol=2e-6, atol=1e-4)
    torch.testing.assert_close(grads, torch.autograd.grad(plain, (loc, rho)), rtol=2e-6, atol=1e-6)


def _double_plus_one(x):
    return x * 2 + 1


def test_auto_compiles_the_kernels_of_large_vectors_only(monkeypatch):
    monkeypatch.setattr(_Kernels, "compiled", {})
    monkeypatch.setattr(_Kernels, "broken", None)
    with kernel_mode("auto"):
        small = run_kernel(_double_plus_one, torch.ones(AUTO_COMPILE_SIZE - 1))
        assert _double_plus_one not in _Kernels.compiled
        large = run_kernel(_double_plus_one, torch.ones(AUTO_COMPILE_SIZE))
        assert _double_plus_one in _Kernels.compiled
    assert (small == 3).all() and (large == 3).all()
    with kernel_mode("eager"):
        monkeypatch.setattr(_Kernels, "compiled", {})
        run_kernel(_double_plus_one, torch.ones(AUTO_COMPILE_SIZE))
        assert not _Kernels.compiled


def _triple_minus_two(x):
    return x * 3 - 2


def test_a_compiler_that_fails_leaves_auto_eager_with_a_warning_and_refuses_compiled(monkeypatch):
    """A real failure of torch.compile's C++ build (the compiler set to a path that does not exist,
    its caches off): "auto" warns once and computes eagerly; "compiled" raises, and a run asking for it
    is refused in one line naming train.kernels before anything is written."""
    import torch._inductor.config as inductor

    monkeypatch.setattr(_Kernels, "compiled", {})
    monkeypatch.setattr(_Kernels, "broken", None)
    torch._dynamo.reset()
    with inductor.patch({"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False}):
        with kernel_mode("auto"), pytest.warns(RuntimeWarning, match="train.kernels = 'auto': torch.compile failed"):
            value = run_kernel(_triple_minus_two, torch.ones(AUTO_COMPILE_SIZE))
        assert (value == 1).all() and _Kernels.broken
        monkeypatch.setattr(_Kernels, "compiled", {})
        with kernel_mode("compiled"), pytest.raises(Exception):  # noqa: B017  (whatever torch.compile raises)
            run_kernel(_triple_minus_two, torch.ones(4))
        with pytest.raises(ConfigError, match=r"^train.kernels = 'compiled' needs torch.compile on cpu"):
            check_compiler(torch.device("cpu"))
    torch._dynamo.reset()


def test_train_kernels_is_validated_and_refused_where_a_method_has_no_kernels(tmp_path):
    with pytest.raises(ConfigError, match=r"^train.kernels must be one of \['auto', 'compiled', 'eager'\], got 'fast'"):
        load_config("pft-digits", ["train.kernels='fast'"])
    with pytest.raises(ConfigError, match=r"^train.kernels is not supported by method 'pft'"):
        run(load_config("pft-digits", ["train.kernels='compiled'"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_posterior_drawn_again_draws_new_weights():
    """Sites drawn repeatedly from one posterior object (ArviZ draws, predictive samples) get a new
    network-wide draw each time, with mean m and standard deviation σ."""
    n = sum(math.prod(shape) for shape in SHAPES.values())
    loc, scale = torch.linspace(-1, 1, n), torch.linspace(0.1, 2, n)
    posterior = SpikeSlabPosteriors(loc, scale, SHAPES, [PRIOR] * len(SHAPES), PRIOR.constants)
    draws = torch.stack([torch.cat([q.sample().flatten() for q in posterior.sites.values()]) for _ in range(4000)])
    assert ((draws.mean(0) - loc).abs() < 5 * scale / math.sqrt(4000)).all()
    assert ((draws.std(0) / scale - 1).abs() < 5 / math.sqrt(2 * 4000)).all()


def test_compiling_on_a_machine_without_cuda_logs_no_cuda_home_line(tmp_path):
    """torch's C++ extension module logs "No CUDA runtime is found" when imported on a machine without CUDA: a
    compiled kernel imports it quietly (a fresh process, outside the checkout so that it imports the installed
    package: the module logs on its first import only)."""
    program = (
        "import sys; from bayesprune.core.fused import _compiled; _compiled(lambda x: x + 1); "
        "assert 'torch.utils.cpp_extension' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "No CUDA runtime" not in done.stderr and "CUDA_HOME" not in done.stderr
