"""ProbMask's training of weights and mask probabilities under a falling budget, and the mask drawn at its end."""

import torch
from torch.func import functional_call

from bayesprune.core import distributed
from bayesprune.core.criteria import weight_sites
from bayesprune.core.gates import StochasticMasks
from bayesprune.core.optim import torch_optimizer
from bayesprune.core.precision import autocast_calls
from bayesprune.core.pruning import apply_masks
from bayesprune.methods.probmask.options import ProbMaskOptions
from bayesprune.methods.probmask.projection import project_onto_budget
from bayesprune.methods.probmask.schedules import annealed_temperature, cubic_keep_ratio


class ProbMaskTraining:
    """Algorithm 1 as a :func:`bayesprune.core.loop.train` step and epoch callback over ``net`` and its masks."""

    def __init__(self, net, options: ProbMaskOptions, optim_config, *, epochs: int, loss):
        self.net, self.options, self.epochs, self.loss = net, options, epochs, loss
        sites = weight_sites(net)
        params = dict(net.named_parameters())
        self.masks = StochasticMasks(
            {site: torch.ones_like(params[site]) for site in sites},
            parameterization="clamp",
            temperature=annealed_temperature(1, epochs),
        )
        self.weight_optimizer = None if options.supermask else torch_optimizer(optim_config, net.parameters())
        self.probability_optimizer = torch.optim.Adam(self.masks.parameters(), lr=options.probability_lr)
        self.keep = cubic_keep_ratio(1, start=options.t1, end=options.t2, final=1 - options.sparsity)

    def state_dict(self) -> dict:
        """The masks, both optimisers and the schedule's place (temperature, keep ratio); the network
        is checkpointed on its own."""
        return {
            "masks": self.masks.state_dict(),
            "temperature": self.masks.temperature,
            "keep": self.keep,
            "probability_optimizer": self.probability_optimizer.state_dict(),
            **({"weight_optimizer": self.weight_optimizer.state_dict()} if self.weight_optimizer else {}),
        }

    def load_state_dict(self, state: dict):
        self.masks.load_state_dict(state["masks"])
        self.masks.temperature, self.keep = state["temperature"], state["keep"]
        self.probability_optimizer.load_state_dict(state["probability_optimizer"])
        if self.weight_optimizer:
            self.weight_optimizer.load_state_dict(state["weight_optimizer"])

    def step(self, x, y, index, num_batches):
        optimizers = [self.probability_optimizer] + ([self.weight_optimizer] if self.weight_optimizer else [])
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        params = {
            name: param if self.weight_optimizer else param.detach() for name, param in self.net.named_parameters()
        }
        forward, total = autocast_calls(functional_call, x.device), 0.0
        for _ in range(self.options.samples):
            value = (
                self.loss(forward(self.net, apply_masks(params, self.masks.relaxed()), (x,)), y) / self.options.samples
            )
            value.backward()
            total = total + value.detach()
        trained = [*self.masks.parameters(), *self.net.parameters()]
        distributed.average_gradients(trained)
        torch.nn.utils.clip_grad_norm_(trained, self.options.clip_norm)
        for optimizer in optimizers:
            optimizer.step()
        self.project()
        return total

    @torch.no_grad()
    def project(self):
        """s ← proj_C(s) with the current budget: one projection of all sites, or one per layer."""
        raw = self.masks.raw
        if self.options.scope == "global":
            raw.copy_(project_onto_budget(raw, self.keep * raw.numel()))
            return
        start = 0
        for shape in self.masks.shapes.values():
            chunk = raw[start : start + shape.numel()]
            chunk.copy_(project_onto_budget(chunk, self.keep * shape.numel()))
            start += shape.numel()

    def on_epoch(self, epoch, history):
        following = epoch + 2  # Algorithm 1 sets τ and k at the start of epoch t = 1, ..., T
        self.masks.temperature = annealed_temperature(min(following, self.epochs), self.epochs)
        self.keep = cubic_keep_ratio(
            following, start=self.options.t1, end=self.options.t2, final=1 - self.options.sparsity
        )


@torch.no_grad()
def best_draw(net, masks: StochasticMasks, x, y, *, draws: int, loss, generator=None) -> dict:
    """The mask m ~ Bernoulli(s) with the lowest loss on ``(x, y)`` among ``draws`` draws (Algorithm 1, line 12)."""
    params = dict(net.named_parameters())
    best, best_loss = None, float("inf")
    for _ in range(draws):
        mask = {site: sample.bool() for site, sample in masks.sample(generator).items()}
        value = float(loss(functional_call(net, apply_masks(params, mask), (x,)), y))
        if value < best_loss:
            best, best_loss = mask, value
    return best


def layer_report(mask: dict, masks: StochasticMasks) -> dict:
    """Remaining ratio per layer (Fig. 3), the share of s within 0.01 of 0 or 1, and the histogram of s (Fig. 5)."""
    s = torch.cat([p.detach().flatten() for p in masks.probabilities().values()])
    return {
        "remaining_ratio_per_layer": {site: float(m.float().mean()) for site, m in mask.items()},
        "share_s_near_binary": float(((s <= 0.01) | (s >= 0.99)).float().mean()),
        "s_histogram": masks.histogram(),
    }
