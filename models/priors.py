"""Prior policies: which distribution each parameter of a network gets (as TyXe places priors).

A policy answers one question, :meth:`Prior.distribution`, for every parameter of every module; the
model turns each answer into one Pyro sample site named after the parameter's path (``fc1.weight``).
"""

import math

import pyro.distributions as dist
import torch

from bayesprune.core.distributions import SpikeAndSlab
from bayesprune.core.errors import ConfigError
from bayesprune.core.group_horseshoe import GroupHorseshoe
from bayesprune.core.group_spike_slab import GroupSpikeAndSlab


class Prior:
    """Base policy. Subclasses implement :meth:`distribution` for one parameter."""

    def distribution(self, name: str, param: torch.Tensor):
        """The prior of the parameter ``name``: a distribution with event shape ``param.shape``."""
        raise NotImplementedError

    def describe(self, name: str) -> str:
        """The prior of the site ``name`` in words, for reports."""
        return type(self).__name__


class SpikeSlabPrior(Prior):
    r"""Independent spike-and-slab prior π·N(0, τ1²) + (1 − π)·N(0, τ0²) on every weight and bias (paper 003, eq. 3.1).

    Args:
        pi: prior inclusion probability π in (0, 1).
        tau0: spike standard deviation τ0.
        tau1: slab standard deviation τ1 > τ0.

    The defaults are the paper's regression setting (section 4.2): π = 0.5, log τ1 = 1, log τ0 = −6.
    """

    def __init__(self, *, pi=0.5, tau0=math.exp(-6.0), tau1=math.exp(1.0)):
        if not 0.0 < pi < 1.0:
            raise ConfigError(f"prior.pi must lie in (0, 1), got {pi}")
        if not 0.0 < tau0 < tau1:
            raise ConfigError(f"prior.tau0 must satisfy 0 < tau0 < tau1, got tau0={tau0}, tau1={tau1}")
        self.pi, self.tau0, self.tau1 = float(pi), float(tau0), float(tau1)
        self._constants = {}

    #: Its name in ``[[model.priors]]`` and reports.
    label = "spike-slab"

    def describe(self, name):
        return f"{self.label} (pi={self.pi:g}, log_tau0={math.log(self.tau0):g}, log_tau1={math.log(self.tau1):g})"

    def distribution(self, name, param):
        # One set of 0-dim constants per dtype and device, filled there (no copy from the host), shared by
        # every site: a guide sees that its sites share one prior without comparing values on the device.
        key = (param.dtype, param.device)
        if key not in self._constants:
            self._constants[key] = [
                torch.full((), value, dtype=param.dtype, device=param.device)
                for value in (self.pi, self.tau0, self.tau1)
            ]
        return SpikeAndSlab(*self._constants[key]).expand(param.shape).to_event(param.dim())


class GroupSpikeSlabPrior(SpikeSlabPrior):
    r"""Spike-and-slab prior with one inclusion indicator per unit: every row of a site along its first
    dimension (a Linear layer's output unit, a convolution's output channel) is in the slab N(0, τ1²) or in
    the spike N(0, τ0²) as a whole (:class:`~bayesprune.core.group_spike_slab.GroupSpikeAndSlab`); a bias
    is one weight per row, paper 003's prior. Arguments as :class:`SpikeSlabPrior`'s, π a unit's.
    """

    label = "group-spike-slab"

    def distribution(self, name, param):
        options = {"dtype": param.dtype, "device": param.device}
        constants = (torch.tensor(value, **options) for value in (self.pi, self.tau0, self.tau1))
        return GroupSpikeAndSlab(*constants, param.shape).to_event(param.dim())


class GroupHorseshoePrior(Prior):
    r"""Group horseshoe prior on units (Louizos, Ullrich, Welling 2017, section 3.2): every row of a site along
    its first dimension has a scale z_g ~ C+(0, 1), the site a global scale s ~ C+(0, τ0), and
    w_gj ~ N(0, z_g² s²) (:class:`~bayesprune.core.group_horseshoe.GroupHorseshoe`).

    Args:
        global_scale: τ0, the scale of the global half-Cauchy.
    """

    label = "group-horseshoe"

    def __init__(self, *, global_scale=1.0):
        if not global_scale > 0.0:
            raise ConfigError(f"prior.global_scale must be positive, got {global_scale}")
        self.global_scale = float(global_scale)

    def describe(self, name):
        return f"{self.label} (global_scale={self.global_scale:g})"

    def distribution(self, name, param):
        scale = torch.tensor(self.global_scale, dtype=param.dtype, device=param.device)
        return GroupHorseshoe(scale, param.shape).to_event(param.dim())


class GaussianPrior(Prior):
    """Independent N(0, scale²) prior on every weight and bias: the plain BNN baseline of paper 003
    (section 4.1, Experiment 3), fitted with :class:`bayesprune.guides.NormalGuide`.

    Args:
        scale: prior standard deviation (1.0 gives the N(0, 1) prior).
    """

    def __init__(self, *, scale=1.0):
        if not scale > 0.0:
            raise ConfigError(f"prior.scale must be positive, got {scale}")
        self.scale = float(scale)

    def distribution(self, name, param):
        options = {"dtype": param.dtype, "device": param.device}
        base = dist.Normal(torch.tensor(0.0, **options), torch.tensor(self.scale, **options))
        return base.expand(param.shape).to_event(param.dim())


class GivenPrior(Prior):
    """A prior fixed per site in advance, such as PAC-Bayes pruning's data-dependent prior (paper 000,
    section 5.1), trained on a part S_P of the data before the posterior sees the rest.

    Args:
        distributions: site name → distribution with the parameter's shape as batch shape.
    """

    def __init__(self, distributions: dict):
        self.distributions = distributions

    def distribution(self, name, param):
        prior = self.distributions[name]
        if prior.batch_shape != param.shape:
            raise ValueError(
                f"the prior of {name!r} has shape {tuple(prior.batch_shape)}, the parameter {tuple(param.shape)}"
            )
        return prior.to_event(param.dim())


PRIORS = {"spike-slab": SpikeSlabPrior, "gaussian": GaussianPrior}
