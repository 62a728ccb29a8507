"""Time one SVI step of the spike-and-slab BNN (sBNN) against plain PyTorch and naive Pyro.

What is measured: the wall-clock time of ONE optimisation step of the sBNN of paper 003
(eqs. 3.6-3.8) on LeNet-300-100 at batch size 128, with random MNIST-shaped inputs (no data on
disk, no network), in three implementations of the same model:

* ``bayesprune``: ``BayesianNetwork(lenet_300_100((784,), 10), SpikeSlabPrior(), Categorical(60000))``
  with ``SpikeSlabGuide`` and ``AnalyticKLELBO`` driven by ``pyro.infer.SVI`` and
  ``pyro.optim.Adam``; one step is ``svi.step(x, y)``.
* ``plain torch``: the same objective written by hand: flat vectors m and rho (sigma = softplus(rho)),
  per layer W = m + sigma * eps (or pre-activation sampling with ``--local-reparameterization``),
  the cross-entropy summed over the batch times N/B, plus the KL
  sum_i R(m_i, sigma_i, p_i) - 1/2 (eq. 3.7) at p = p*(m, sigma) (eq. 3.8, detached), minimised by a
  single ``torch.optim.Adam`` over [m, rho] with zero_grad / backward / step. Its log p and
  log(1 - p) avoid subnormal intermediates (:func:`bayesprune.core.distributions.log_sigmoids`), as
  careful CPU code should: with ``F.logsigmoid`` the reference itself would be about a third slower
  at LeNet's initial weights.
* ``naive Pyro``: the same ``BayesianNetwork`` model with ``pyro.infer.autoguide.AutoNormal`` and
  ``pyro.infer.Trace_ELBO`` (Monte-Carlo KL, weight sampling only: it has no local
  reparameterization), ``pyro.optim.Adam`` and ``SVI``.

All three start from the same network weights as means and sigma = 0.01, and see the same batch.

Every step includes reading the loss back as a Python float (as ``svi.step`` does). After warm-up,
the three methods are timed in interleaved rounds (``--rounds`` rounds of ``--steps`` steps each);
the reported time per method is the median over rounds of the mean time per step, which is robust to
a noisy shared machine. CPU runs use one intra-op thread by default (``--threads``): on a
shared, oversubscribed 2-core machine two OpenMP threads wait on each other and every method runs
several times slower and far noisier. Pyro validation is off and the param store is cleared before each
method's block (the guides are ``PyroModule`` s, so their parameters and optimiser state persist).

Usage: ``python benchmarks/svi_step.py [--json] [--steps N] [--rounds R] [--device auto|cpu|cuda]
[--threads T] [--local-reparameterization]``. ``--json`` prints one JSON object and nothing else on stdout.
"""

import argparse
import json
import math
import statistics
import time

import pyro
import pyro.optim
import torch
import torch.nn.functional as F
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.infer.autoguide.initialization import init_to_value

from bayesprune import AnalyticKLELBO, SpikeSlabPrior, resolve_device
from bayesprune.core.distributions import log_sigmoids
from bayesprune.guides import SpikeSlabGuide
from bayesprune.models import BayesianNetwork, Categorical, lenet_300_100

INPUT_SHAPE = (784,)
NUM_CLASSES = 10
DATASET_SIZE = 60000
LEARNING_RATE = 1e-3
INIT_SCALE = 1e-2


def make_batch(batch_size, device, seed=0):
    """A random MNIST-shaped minibatch: pixels in [0, 1) and labels in 0..9."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch_size, *INPUT_SHAPE, generator=generator)
    y = torch.randint(NUM_CLASSES, (batch_size,), generator=generator)
    return x.to(device), y.to(device)


def make_model(device, seed=0):
    """The sBNN model program of LeNet-300-100; the seed fixes the network's initial weights."""
    torch.manual_seed(seed)
    net = lenet_300_100(INPUT_SHAPE, NUM_CLASSES).to(device)
    return BayesianNetwork(net, SpikeSlabPrior(), Categorical(dataset_size=DATASET_SIZE))


def svi_stepper(model, guide, loss):
    """``svi.step`` of a Pyro model/guide pair under ``loss``, with Adam."""
    svi = SVI(model, guide, pyro.optim.Adam({"lr": LEARNING_RATE}), loss=loss)
    return svi.step


def bayesprune_step(device, local_reparameterization):
    """The library: ``SpikeSlabGuide`` + ``AnalyticKLELBO`` (the closed-form KL of eq. 3.7)."""
    model = make_model(device)
    objective = AnalyticKLELBO(local_reparameterization=local_reparameterization)
    return svi_stepper(model, SpikeSlabGuide(model, init_scale=INIT_SCALE), objective)


def naive_pyro_step(device, local_reparameterization):
    """What Pyro gives out of the box: ``AutoNormal`` + ``Trace_ELBO`` (Monte-Carlo KL)."""
    del local_reparameterization  # AutoNormal + Trace_ELBO always samples the weights.
    model = make_model(device)
    init = init_to_value(values={name: param.detach() for name, param in model.net.named_parameters()})
    guide = AutoNormal(model, init_loc_fn=init, init_scale=INIT_SCALE)
    return svi_stepper(model, guide, Trace_ELBO())


class PlainTorchSBNN:
    """The sBNN objective of paper 003 (eqs. 3.6-3.8) written directly in PyTorch.

    Args:
        net: the LeNet-300-100 ``nn.Sequential`` whose ``nn.Linear`` layers define the shapes and the
            initial means.
        prior: the :class:`SpikeSlabPrior` (its float pi, tau0, tau1 are used).
        local_reparameterization: sample pre-activations instead of weights.
        lr, init_scale, dataset_size: Adam's learning rate, the initial sigma, the N of N/B.
    """

    def __init__(
        self,
        net,
        prior,
        *,
        local_reparameterization=False,
        lr=LEARNING_RATE,
        init_scale=INIT_SCALE,
        dataset_size=DATASET_SIZE,
    ):
        linears = [module for module in net.modules() if isinstance(module, torch.nn.Linear)]
        self.shapes = [shape for layer in linears for shape in (layer.weight.shape, layer.bias.shape)]
        flat = torch.cat([tensor.detach().flatten() for layer in linears for tensor in (layer.weight, layer.bias)])
        self.loc = flat.clone().requires_grad_()
        self.rho = torch.full_like(flat, init_scale + math.log(-math.expm1(-init_scale))).requires_grad_()
        self.pi, self.tau0, self.tau1 = prior.pi, prior.tau0, prior.tau1
        self.local_reparameterization = local_reparameterization
        self.dataset_size = dataset_size
        self.optimizer = torch.optim.Adam([self.loc, self.rho], lr=lr)

    def _layers(self, flat):
        chunks = torch.split(flat, [shape.numel() for shape in self.shapes])
        views = [chunk.view(shape) for chunk, shape in zip(chunks, self.shapes)]
        return list(zip(views[0::2], views[1::2]))

    def _linear(self, h, loc, sigma):
        (w_loc, b_loc), (w_sigma, b_sigma) = loc, sigma
        if self.local_reparameterization:
            mean = F.linear(h, w_loc, b_loc)
            var = F.linear(h**2, w_sigma**2, b_sigma**2)
            return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)
        weight = w_loc + w_sigma * torch.randn_like(w_loc)
        bias = b_loc + b_sigma * torch.randn_like(b_loc)
        return F.linear(h, weight, bias)

    def logits(self, x, sigma):
        h = x.flatten(1)
        layers = list(zip(self._layers(self.loc), self._layers(sigma)))
        for index, (loc, scale) in enumerate(layers):
            h = self._linear(h, loc, scale)
            if index < len(layers) - 1:
                h = F.relu(h)
        return h

    def kl(self, sigma):
        """sum_i R(m_i, sigma_i, p*_i) - 1/2 (eq. 3.7), with p* of eq. 3.8 held fixed."""
        second_moment = self.loc**2 + sigma**2
        slab_quad, spike_quad = second_moment / (2 * self.tau1**2), second_moment / (2 * self.tau0**2)
        log_slab, log_spike = math.log(self.tau1 / self.pi), math.log(self.tau0 / (1 - self.pi))
        with torch.no_grad():
            logits = (spike_quad + log_spike) - (slab_quad + log_slab)  # B - A of eq. 3.8
            p, (log_p, log_1mp) = torch.sigmoid(logits), log_sigmoids(logits)
        log_sigma = sigma.log()
        slab = slab_quad + log_slab - log_sigma + log_p
        spike = spike_quad + log_spike - log_sigma + log_1mp
        return (p * slab + (1 - p) * spike - 0.5).sum()

    def loss(self, x, y):
        sigma = F.softplus(self.rho)
        nll = F.cross_entropy(self.logits(x, sigma), y, reduction="sum") * (self.dataset_size / x.shape[0])
        return nll + self.kl(sigma)

    def step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(x, y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def plain_torch_step(device, local_reparameterization):
    """The hand-written reference, :class:`PlainTorchSBNN`."""
    model = make_model(device)
    return PlainTorchSBNN(model.net, model.prior, local_reparameterization=local_reparameterization).step


METHODS = {"bayesprune": bayesprune_step, "plain_torch": plain_torch_step, "naive_pyro": naive_pyro_step}


def synchronize(device):
    """Wait for queued CUDA work, so that wall-clock time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_step(step, x, y, steps, device):
    """Mean seconds per call of ``step(x, y)`` over ``steps`` calls."""
    pyro.clear_param_store()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    synchronize(device)
    return (time.perf_counter() - start) / steps


def benchmark(steppers, x, y, *, steps, rounds, warmup, device):
    """Median over ``rounds`` interleaved rounds of each stepper's mean time per step, in ms."""
    for step in steppers.values():
        time_per_step(step, x, y, warmup, device)
    names = list(steppers)
    samples = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)  # rotate the order so no method always runs first
        for name in names[shift:] + names[:shift]:
            samples[name].append(1e3 * time_per_step(steppers[name], x, y, steps, device))
    return {name: statistics.median(times) for name, times in samples.items()}


def run(args):
    """Build the three steppers and time them; returns the result dictionary (times in ms)."""
    pyro.enable_validation(False)
    device = resolve_device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    x, y = make_batch(args.batch_size, device)
    steppers = {}
    for name, build in METHODS.items():
        pyro.clear_param_store()
        steppers[name] = build(device, args.local_reparameterization)
    ms = benchmark(steppers, x, y, steps=args.steps, rounds=args.rounds, warmup=args.warmup, device=device)
    return {
        "ratio_vs_plain_torch": ms["bayesprune"] / ms["plain_torch"],
        "speedup_vs_naive_pyro": ms["naive_pyro"] / ms["bayesprune"],
        "bayesprune_ms": ms["bayesprune"],
        "plain_torch_ms": ms["plain_torch"],
        "naive_pyro_ms": ms["naive_pyro"],
        "device": str(device),
        "batch_size": args.batch_size,
        "local_reparameterization": args.local_reparameterization,
        "steps_per_round": args.steps,
        "rounds": args.rounds,
        "num_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "pyro_version": pyro.__version__,
    }


def format_table(result):
    """The human-readable report of :func:`run`'s result."""
    base = result["bayesprune_ms"]
    rows = [("bayesprune", base), ("plain torch", result["plain_torch_ms"]), ("naive Pyro", result["naive_pyro_ms"])]
    lines = [
        f"sBNN LeNet-300-100, one SVI step at batch {result['batch_size']} on {result['device']}"
        f" (local reparameterization: {result['local_reparameterization']};"
        f" median of {result['rounds']} rounds x {result['steps_per_round']} steps;"
        f" torch {result['torch_version']}, pyro {result['pyro_version']}, {result['num_threads']} threads)",
        f"{'method':<12} {'ms/step':>9} {'x bayesprune':>13}",
    ]
    lines += [f"{name:<12} {ms:>9.3f} {ms / base:>13.2f}" for name, ms in rows]
    lines.append(f"ratio vs plain torch (bayesprune / plain torch): {result['ratio_vs_plain_torch']:.3f}")
    lines.append(f"speedup vs naive Pyro (naive Pyro / bayesprune): {result['speedup_vs_naive_pyro']:.3f}")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--steps", type=int, default=25, help="timed steps per method per round")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps per method first")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op CPU threads; 0 keeps torch's default (all cores)"
    )
    parser.add_argument("--local-reparameterization", action="store_true", help="sample pre-activations, not weights")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print(json.dumps(result) if args.json else format_table(result))


if __name__ == "__main__":
    main()
