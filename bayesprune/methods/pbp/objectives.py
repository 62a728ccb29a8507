"""The two objectives of PAC-Bayes pruning (paper 000), as :class:`~bayesprune.core.objectives.AnalyticKLELBO`
subclasses: the Gibbs risk that trains the data-dependent prior, and the bound that trains the posterior."""

from bayesprune.core.objectives import AnalyticKLELBO
from bayesprune.methods.pbp.bounds import pac_bayes_bound


class GibbsRisk(AnalyticKLELBO):
    """The empirical Gibbs risk E_q[R̂(W)] alone, the (N/B)-scaled negative log-likelihood over the
    likelihood's ``dataset_size`` N (paper 000: stage 2 of PBP trains its prior by it)."""

    def __init__(self, *, dataset_size: int, num_particles: int = 1):
        super().__init__(num_particles=num_particles)
        self.dataset_size = dataset_size

    def combine(self, nll, kl):
        return nll / self.dataset_size


class PACBayesBound(AnalyticKLELBO):
    """Theorem 1 (paper 000, eq. 4) as the loss: the bound of the surrogate empirical risk R̂ = nll / n
    (a [0, 1]-valued loss such as :class:`~bayesprune.models.BoundedCategorical`, n its ``dataset_size``)
    and the exact KL of every latent site, at confidence ``delta``."""

    def __init__(self, *, n: int, delta: float, num_particles: int = 1):
        super().__init__(num_particles=num_particles)
        self.n, self.delta = n, delta

    def combine(self, nll, kl):
        return pac_bayes_bound(nll / self.n, kl, n=self.n, delta=self.delta)
