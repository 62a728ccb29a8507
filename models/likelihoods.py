"""Likelihoods own the data plate and the N/B minibatch rescaling (``dataset_size`` given once)."""

import math

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule, PyroParam
from torch.distributions import constraints

from bayesprune.core.precision import full_precision


class Likelihood(PyroModule):
    """Observes targets under ``pyro.plate("data", dataset_size)``.

    A minibatch of B rows is scored with weight N/B, so the summed log-likelihood is an unbiased
    estimate of the full-data log-likelihood whatever the batch size.

    Args:
        dataset_size: number N of training examples.
    """

    def __init__(self, dataset_size: int):
        super().__init__()
        self.dataset_size = int(dataset_size)

    def distribution(self, output: torch.Tensor):
        """Distribution of the targets given the network output."""
        raise NotImplementedError

    def mean(self, output: torch.Tensor) -> torch.Tensor:
        """Predictive mean given one network output (class probabilities or regression mean)."""
        raise NotImplementedError

    def forward(self, output, y=None):
        rows = torch.arange(output.shape[0], device=output.device)
        with pyro.plate("data", size=self.dataset_size, subsample=rows):
            return pyro.sample("obs", self.distribution(full_precision(output)), obs=y)


class Categorical(Likelihood):
    """Categorical likelihood on the network's logits (classification)."""

    def distribution(self, output):
        return dist.Categorical(logits=output)

    def mean(self, output):
        return torch.softmax(output, dim=-1)


class Gaussian(Likelihood):
    """Gaussian likelihood N(y; f(x), s²) for regression on a single output.

    Args:
        dataset_size: number N of training examples.
        scale: the noise standard deviation s if fixed; ``None`` learns it as a point estimate
            (type-II maximum likelihood), starting from ``init_scale``.
        init_scale: starting value of a learned scale.
    """

    def __init__(self, dataset_size: int, *, scale: float | None = None, init_scale: float = 1.0):
        super().__init__(dataset_size)
        if scale is None:
            self.scale = PyroParam(torch.tensor(float(init_scale)), constraint=constraints.positive)
        else:
            self.scale = float(scale)

    def distribution(self, output):
        return dist.Normal(output.squeeze(-1), self.scale)

    def mean(self, output):
        return output.squeeze(-1)


LIKELIHOODS = {"classification": Categorical, "regression": Gaussian}


class _BoundedCrossEntropy(dist.Categorical):
    """A categorical whose ``log_prob`` is log max(p_y, p_min) / log(1/p_min): minus a loss in [0, 1].

    It samples the categorical; ``log_prob`` is not normalised (it is a loss, not a density).
    """

    def __init__(self, logits, min_prob: float, validate_args=None):
        super().__init__(logits=logits, validate_args=validate_args)
        if self._validate_args and not 0.0 < min_prob < 1.0:
            raise ValueError(
                f"Expected parameter min_prob of distribution {type(self).__name__} to lie in (0, 1), got {min_prob}"
            )
        self.min_prob = min_prob

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance=self._get_checked_instance(_BoundedCrossEntropy, _instance))
        new.min_prob = self.min_prob
        return new

    def log_prob(self, value):
        chosen = super().log_prob(value)  # the normalised log p_y, validated and broadcast as the categorical's
        return chosen.clamp_min(math.log(self.min_prob)) / -math.log(self.min_prob)


class BoundedCategorical(Categorical):
    """The bounded cross-entropy −log max(p_y, p_min) / log(1/p_min) ∈ [0, 1] as a likelihood (paper 000,
    appendix A.3, after Pérez-Ortiz et al.): the (N/B)-scaled sum over a batch is N times the surrogate
    empirical risk that a PAC-Bayes bound for [0, 1]-valued losses takes. p_min = 1e-4 in the paper."""

    def __init__(self, dataset_size: int, *, min_prob: float = 1e-4):
        super().__init__(dataset_size)
        self.min_prob = float(min_prob)

    def distribution(self, output):
        return _BoundedCrossEntropy(output, self.min_prob)
