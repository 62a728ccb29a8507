"""Unit gates held to a MAC target while they train: the gate posterior tilted by a MAC-weighted prior factor.

Paper 004 has no cost target: the Flattening hyper-prior (eq. 29) pushes every θ down by the same −log γ
(eq. 31), so how much of the network is left depends on log γ, the data size and the rate, and a user
cannot ask for half the MACs. Here, after every Adam step of Algorithm 1, the factorised posterior
q(ξ) = Π Bernoulli(ξ_u | θ_u) is replaced by its I-projection on the set of distributions whose expected
MACs (:class:`~bayesprune.core.unit_macs.ExpectedMacs`, exact under independent gates) equal the target
t of that step: the q' nearest q in KL(q' ‖ q) with E_q'[MACs] = t is

    q'(ξ) ∝ q(ξ) · exp(−c · Σ_u g_u ξ_u),  i.e.  logit θ'_u = logit θ_u − c · g_u,

with g_u = ∂E[MACs]/∂θ_u at the current θ (the MACs linearised: they are bilinear in the gates of two
coupled groups), scaled so that the average over the units alive is 1, and the scalar c found by
bisection (E[MACs] falls as c grows: every g_u ≥ 0). The tilt is the product of the posterior with a
MAC-weighted prior factor exp(−c · MACs(ξ)): for each unit, a Flattening hyper-prior whose log γ is
lowered by c · g_u, a unit's prior price in proportion to what it costs. c is the Lagrange multiplier of
the constraint, set anew at every step, so a unit's price is neither a hyper-parameter nor tuned; c < 0
(the gates' MACs below the target) opens gates instead, which keeps the network from collapsing to its
floors.

t falls linearly from the starting gates' expected MACs to the target over the first ``macs_warmup`` of
Algorithm 1's steps, then stays there. Units removed while training (θ < θ_tol, condition (i)) cost
nothing; the starting network's :class:`ExpectedMacs` is used throughout with their θ at 0, which is its
count of the smaller network (exact at 0). After training the kept units (θ ≥ ``final_threshold``) are cut
to at most the target by θ (:func:`~bayesprune.core.unit_macs.cut_to_macs`), so that the fine-tuned
network is the one of the target's MACs.

Deviations from paper 004: the tilt is not in the paper (its prior has no cost weights); with the data
term and the Flattening term unchanged, the step before the tilt is Algorithm 1's.
"""

import torch

from bayesprune.core.unit_macs import ExpectedMacs, cut_to_macs

#: The largest logit shift of an average unit a tilt tries: past it every θ sits at its clip.
MAX_PRICE = 64.0


class MacConstraint:
    """The tilt of the gates' θ to a MAC target (see the module docstring).

    Args:
        net: the starting network.
        gates: its :class:`~bayesprune.core.gates.UnitGates`.
        target: the fraction of the starting network's MACs (its :func:`~bayesprune.core.export.count_macs`) to keep.
        warmup: the share of ``total_steps`` over which the step's target reaches ``target``.
        total_steps: the steps of Algorithm 1.
        clip: θ's interval [θ_l, θ_h].
    """

    def __init__(self, net, gates, *, target: float, warmup: float, total_steps: int, clip: tuple):
        self.macs = ExpectedMacs(net, gates)
        self.dense = self.macs.dense()
        self.target, self.clip = target, clip
        self.starting_units = list(gates.units)
        self.warm_steps = warmup * total_steps
        self.start = float(self.ratio(gates.per_layer(gates.raw.detach()), [torch.arange(n) for n in gates.units]))
        self.price = 0.0  # c of the last tilt

    def ratio(self, theta: list, kept_units: list) -> torch.Tensor:
        """E[MACs] / dense MACs of the gates ``theta`` (per group) of the units ``kept_units`` (their
        starting indices); removed units count 0."""
        full = [
            t.new_zeros(n, dtype=torch.float64).index_put((k.to(t.device),), t.double())
            for t, k, n in zip(theta, kept_units, self.starting_units)
        ]
        return self.macs(full) / self.dense

    def cut(self, theta: list, keep: list, kept_units: list, floors: list) -> list:
        """``keep`` (a mask per group of the units alive) less the units of lowest θ until the network costs
        at most the target: :func:`~bayesprune.core.unit_macs.cut_to_macs` by θ, each group keeping its
        ``floor`` units of highest θ (at least one)."""

        def count(masks: list) -> torch.Tensor:
            return self.ratio(masks, kept_units) * self.dense

        scores = [t.detach() for t in theta]
        floors = [max(1, floor) for floor in floors]
        cut = cut_to_macs(scores, count, self.target * self.dense, floors)
        return [k & c.to(k.device) for k, c in zip(keep, cut)]

    def step_target(self, step: int) -> float:
        """t of ``step`` (1-based): from the starting gates' ratio to the target over the warm-up."""
        progress = 1.0 if self.warm_steps <= 0 else min(step / self.warm_steps, 1.0)
        return self.start + progress * (self.target - self.start)

    @torch.no_grad()
    def tilt(self, gates, kept_units: list, closed: torch.Tensor, step: int):
        """Tilt ``gates.raw`` (θ of every unit alive, already clipped) in place so that E[MACs] is the
        target of ``step``; ``closed`` marks units held at θ = 0 (counted so, left so)."""
        theta = gates.raw.masked_fill(closed, 0.0)
        with torch.enable_grad():
            leaf = theta.double().requires_grad_(True)
            (slope,) = torch.autograd.grad(self.ratio(gates.per_layer(leaf), kept_units), leaf)
        alive = ~closed
        if not bool(alive.any()):
            return
        slope = slope / slope[alive].mean().clamp_min(1e-300)
        logit = torch.logit(theta.double().clamp(*self.clip))
        low, high = self.clip

        def tilted(price: float) -> torch.Tensor:
            return torch.sigmoid(logit - price * slope).clamp(low, high).masked_fill(closed, 0.0)

        def excess(price: float) -> float:
            return float(self.ratio(gates.per_layer(tilted(price)), kept_units)) - self.step_target(step)

        self.price = _root(excess, self.price, MAX_PRICE)
        gates.raw.copy_(tilted(self.price).to(gates.raw.dtype))


def _root(f, guess: float, bound: float, tolerance: float = 1e-5) -> float:
    """A root of the decreasing ``f`` in [−bound, bound]: a bracket grown from ``guess`` (the last step's,
    which the next is close to), then bisection until |f| < ``tolerance``; an end of the interval where
    ``f`` keeps one sign on it."""
    width, low, high = 0.5, guess - 0.5, guess + 0.5
    at_low = f(low)
    while at_low < 0 and low > -bound:  # low is above the root: move the bracket down
        high, low, width = low, max(low - 2 * width, -bound), 2 * width
        at_low = f(low)
    if at_low <= 0:
        return low
    at_high = f(high)
    while at_high > 0 and high < bound:
        low, high, width = high, min(high + 2 * width, bound), 2 * width
        at_high = f(high)
    if at_high >= 0:
        return high
    while high - low > 1e-7:
        middle = (low + high) / 2
        at_middle = f(middle)
        if abs(at_middle) < tolerance:
            return middle
        low, high = (middle, high) if at_middle > 0 else (low, middle)
    return (low + high) / 2
