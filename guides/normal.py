"""Mean-field Gaussian guide of a plain BNN (the "BNN" baseline of paper 003, section 4.1, Experiment 3)."""
import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.nn import PyroModule, PyroParam

from .spike_slab import _inverse_softplus


class NormalGuide(PyroModule):
    r"""q(W) = N(m, σ²) with σ = softplus(ρ) for every site of a model with a Gaussian prior.

    Paired with :class:`bayesprune.priors.GaussianPrior`, :class:`bayesprune.objectives.AnalyticKLELBO`
    uses torch's registered Normal–Normal KL. Means and ρ live in two flat vectors, as in
    :class:`~bayesprune.guides.SpikeSlabGuide`, and it offers the same prediction interface
    (``mean_params``, ``sample_params``).

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its current parameters initialise m.
        init_scale: initial σ of every weight.
    """

    def __init__(self, model, *, init_scale: float = 1e-2):
        super().__init__()
        self.site_shapes = dict(model.site_shapes)
        self.loc = PyroParam(torch.cat([p.detach().flatten() for p in model.net.parameters()]))
        self.rho = PyroParam(torch.full_like(self.loc, _inverse_softplus(init_scale)))

    @property
    def num_weights(self) -> int:
        return sum(shape.numel() for shape in self.site_shapes.values())

    def _split(self, flat: torch.Tensor) -> dict:
        sizes = [shape.numel() for shape in self.site_shapes.values()]
        return {name: chunk.view(shape) for (name, shape), chunk in zip(self.site_shapes.items(), torch.split(flat, sizes))}

    def posteriors(self) -> dict:
        """The variational distribution N(m, σ²) of every site."""
        locs, scales = self._split(self.loc), self._split(F.softplus(self.rho))
        return {name: dist.Normal(locs[name], scales[name]) for name in self.site_shapes}

    def forward(self, *args, **kwargs):
        for name, posterior in self.posteriors().items():
            pyro.sample(name, posterior.to_event(len(posterior.batch_shape)))

    @torch.no_grad()
    def mean_params(self) -> dict:
        """The posterior-mean network: m for every site."""
        return {name: loc.clone() for name, loc in self._split(self.loc).items()}

    @torch.no_grad()
    def sample_params(self) -> dict:
        """One draw W ~ q(W) for every site."""
        return {name: q.rsample() for name, q in self.posteriors().items()}
