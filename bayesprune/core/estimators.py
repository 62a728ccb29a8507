"""Gradient estimators of a Bernoulli gate's expected cost (paper 004, eqs. 19-21: Taylor, exact, hybrid;
the Concrete relaxation of Maddison et al. and Jang et al.) and the relaxed and hard draws they read."""

import itertools

import torch

from bayesprune.core.fused import log1p, run_kernel

#: ε of the relaxation's logit log(λ + ε) − log(1 − λ + ε) of a clamped λ (1e-20, as in ProbMask's
#: official code, ``ProbMaskConv``): finite at λ ∈ {0, 1}, and differentiable there.
_RELAXATION_EPS = 1e-20


class Estimator:
    """Draws one step's gate values of a gate and estimates ∂C/∂p (eq. 19's C1 − C0) for every entry.

    ``values(gate)`` returns the gate values the forward pass uses, one tensor per raw tensor of the
    gate; after ``cost.backward()``, ``data_gradient(theta, values, cost_of)`` returns the estimate
    per raw tensor ``theta`` (a :class:`~bayesprune.core.gates.UnitGates`' θ), where ``cost_of(values)`` recomputes the
    minibatch cost (N/B)·Σ −log p without gradients.
    """

    def values(self, gate) -> list:
        raise NotImplementedError

    def data_gradient(self, theta: list, values: list, cost_of, norms=None) -> list:
        raise NotImplementedError


#: Relaxed gate values below this are 0: a weight times a value near float32's smallest normal number
#: (1.2e-38) is subnormal, and CPUs compute on subnormal numbers many times slower (PFT's mask-stage
#: epoch took 8.5 times a deterministic epoch instead of 3.5 on one thread).
SUBNORMAL_GUARD = 2.0**-100


def _relaxation_logit(raw: torch.Tensor, parameterization: str) -> torch.Tensor:
    """logit p of raw values under a parameterisation, as the Concrete relaxation reads it.

    A clamped p enters as log(p + ε) − log(1 − p + ε) with ε = 1e-20, the authors' parameterisation
    of ProbMask's eqs. 3-5 (paper 002; their ``ProbMaskConv``): finite at p = 0 or 1 and with a
    derivative there, 1/(p + ε) + 1/(1 − p + ε) on the closed [0, 1] (``torch.clamp``'s derivative is 0
    at ρ = 0 and 1, where a ProbMask s projected onto C sits) and 0 outside it, so that an s started at
    1 (ProbMask) or a λ that reached 0 or 1 (PFT) still gets a gradient (``torch.logit(p, eps)`` clamps
    p, and gave exactly none at the ends). With the draw's σ'(z) = σ(z)σ(−z) the gradient at p = 1 is
    the analytic σ(z)σ(−z)/t · (1/(1 + ε) + 1/ε) ≈ ε^(1/t − 1)·e^(−L/t)/t for the draw's logistic
    noise L: about 0.24·e^(−L) at ProbMask's first temperature 0.97, vanishing as t falls.
    """
    if parameterization == "sigmoid":
        return raw
    if parameterization == "clamp":
        p = raw.clamp(0.0, 1.0)
        return torch.log(p + _RELAXATION_EPS) - torch.log(1 - p + _RELAXATION_EPS)
    return torch.log(raw) - torch.log1p(-raw)


def _concrete(raw, u, *, temperature: float, parameterization: str):
    """The relaxed draw σ(z), z = (logit p − log u + log(1 − u)) / t, with values below
    :data:`SUBNORMAL_GUARD` at 0; and z."""
    z = (_relaxation_logit(raw, parameterization) - torch.log(u) + log1p(-u)) / temperature
    value = torch.sigmoid(z)
    return value.masked_fill(value < SUBNORMAL_GUARD, 0.0), z


def _concrete_grad(grad, raw, value, z, *, temperature: float, parameterization: str):
    """The derivative of :func:`_concrete`'s value in ``raw`` times ``grad``, by the chain rule in the
    order autograd takes it through the same formulas (so that the eager result is autograd's)."""
    h = grad * value * torch.sigmoid(-z) / temperature
    if parameterization == "sigmoid":
        return h
    if parameterization == "clamp":
        p = raw.clamp(0.0, 1.0)
        return (h / (p + _RELAXATION_EPS) + h / (1 - p + _RELAXATION_EPS)) * ((raw >= 0) & (raw <= 1))
    return h / raw + h / (1 - raw)


class _ConcreteDraw(torch.autograd.Function):
    """:func:`_concrete` with :func:`_concrete_grad` as its backward, each one kernel
    (:func:`bayesprune.core.fused.run_kernel`: compiled under ``train.kernels`` for large vectors). As
    separate operations the draw was most of PFT's mask step (LeNet-300-100: some forty passes over
    the 266,200 λ for one matrix product's worth of work). σ is differentiated as σ(z)σ(−z):
    ``torch.sigmoid``'s σ(z)(1 − σ(z)) is exactly 0 once σ(z) rounds to 1 (z ≳ 17 in float32), where
    the derivative is still e^−z, which a logit's 1/(1 − p + ε) of a probability at 1 multiplies back
    to order one (:func:`_relaxation_logit`). Values below :data:`SUBNORMAL_GUARD` (z < −69) are 0,
    with derivative 0."""

    @staticmethod
    def forward(ctx, raw, u, temperature, parameterization):
        constants = {"temperature": temperature, "parameterization": parameterization}
        value, z = run_kernel(_concrete, raw, u, **constants)
        ctx.save_for_backward(raw, value, z)
        ctx.constants = constants
        return value

    @staticmethod
    def backward(ctx, grad):
        return run_kernel(_concrete_grad, grad, *ctx.saved_tensors, **ctx.constants), None, None, None


def relaxed_bernoulli(raw: torch.Tensor, temperature: float, parameterization: str = "sigmoid") -> torch.Tensor:
    """A Concrete(p, 1 − p) draw of temperature t for the keep-probability p of ``raw`` under
    ``parameterization`` (``"sigmoid"``: ``raw`` is logit p): σ((logit p − logit u) / t) with
    u ~ U(0, 1), the two-class Gumbel-softmax relaxation of a Bernoulli(p) gate (paper 004, eq. 23;
    paper 000, appendix B.3; paper 002, eqs. 3-5, where log((1 − u)/u) = g₁ − g₀). As t → 0 it is 1 with
    probability p. Its derivative keeps σ's tails (:class:`_ConcreteDraw`)."""
    u = torch.rand_like(raw).clamp(1e-7, 1 - 1e-7)
    return _ConcreteDraw.apply(raw, u, temperature, parameterization)


def bernoulli_sample(gate) -> list:
    """One exact draw b ~ Bernoulli(p) per entry of every raw tensor of ``gate``, without gradients."""
    return [torch.bernoulli(p.detach()) for p in gate.keep_probabilities()]


class Taylor(Estimator):
    """Eq. 22: C1 − C0 ≈ (N/B) Σ_i z_i δ_{f,i}ᵀ w_f, the derivative of the cost in the gate value at the
    sample (the straight-through estimator); unbiased as the unit's weights go to zero."""

    def values(self, gate):
        return [sample.requires_grad_() for sample in bernoulli_sample(gate)]

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [value.grad.detach() for value in values]


class Concrete(Estimator):
    """Eq. 23: the relaxed gate ξ(θ, u) = 1 − σ((log(1 − θ) − log θ + log u − log(1 − u)) / t) in the
    forward pass, and ∂C/∂θ through it by the chain rule (one u per entry and step)."""

    def __init__(self, temperature: float = 0.1):
        self.temperature = temperature

    def values(self, gate):
        return [relaxed_bernoulli(raw, self.temperature, gate.parameterization) for raw in gate.raw_tensors()]

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [t.grad.detach().clone() for t in theta]


class Exact(Estimator):
    """Eq. 25: C1 − C0 from two evaluations of the minibatch cost per unit, the unit switched on and
    off and every other gate at its sample: M + 1 forward passes for M units."""

    def values(self, gate):
        return bernoulli_sample(gate)

    def data_gradient(self, theta, values, cost_of, norms=None):
        return [self._differences(values, layer, range(value.numel()), cost_of) for layer, value in enumerate(values)]

    @staticmethod
    @torch.no_grad()
    def _differences(values, layer, units, cost_of, out=None):
        base = float(cost_of(values))
        out = torch.zeros_like(values[layer]) if out is None else out
        for unit in units:
            switched = [value.detach().clone() for value in values]
            on = bool(switched[layer][unit] > 0.5)
            switched[layer][unit] = 0.0 if on else 1.0
            other = float(cost_of(switched))
            out[unit] = base - other if on else other - base
        return out


class Hybrid(Estimator):
    """Section 3.3.4: the Taylor estimate for every unit, replaced by the exact two-pass difference
    for the ``units`` units with the largest ‖w_b‖² + ‖w_f‖² (where the Taylor bias is largest)."""

    def __init__(self, units: int = 10):
        self.units = units
        self.taylor = Taylor()

    def values(self, gate):
        return self.taylor.values(gate)

    def data_gradient(self, theta, values, cost_of, norms=None):
        estimates = self.taylor.data_gradient(theta, values, cost_of)
        flat = torch.cat(norms)
        chosen = torch.topk(flat, min(self.units, flat.numel())).indices.tolist()
        offsets = [0, *itertools.accumulate(n.numel() for n in norms)]
        plain = [value.detach() for value in values]
        for layer, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            units = [index - start for index in chosen if start <= index < stop]
            if units:
                Exact._differences(plain, layer, units, cost_of, out=estimates[layer])
        return estimates


ESTIMATORS = {"taylor": Taylor, "concrete": Concrete, "exact": Exact, "hybrid": Hybrid}
