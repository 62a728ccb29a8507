"""Mean-field Gaussian guide of a plain BNN (the "BNN" baseline of paper 003, section 4.1, Experiment 3)."""

import pyro.distributions as dist

from bayesprune.guides.mean_field import MeanFieldGuide


class NormalGuide(MeanFieldGuide):
    r"""q(W) = N(m, σ²) with σ = softplus(ρ) for every site of a model with a Gaussian prior.

    Paired with :class:`bayesprune.models.priors.GaussianPrior`, :class:`bayesprune.core.objectives.AnalyticKLELBO`
    uses torch's registered Normal–Normal KL. It shares the flat parameters and the prediction
    interface (``mean_params``, ``sample_params``) of :class:`~bayesprune.guides.SpikeSlabGuide`.

    Args:
        model: a :class:`bayesprune.models.BayesianNetwork`; its current parameters initialise m.
        init_scale: initial σ of every weight.
    """

    def posteriors(self) -> dict:
        """The variational distribution N(m, σ²) of every site."""
        locs, scales = self._locs_and_scales()
        return {name: dist.Normal(locs[name], scales[name]) for name in self.site_shapes}
