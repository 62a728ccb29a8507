"""Local reparameterization trick (Kingma et al., 2015): sample pre-activations, not weights.

For a layer whose weight and bias have independent Gaussian posteriors, the pre-activation of each
example is Gaussian with mean ``f(x, m_W, m_b)`` and variance ``f(x², σ_W², σ_b²)`` for the linear
map f. Sampling it directly is an unbiased estimator of the same expected log-likelihood for ``linear``
layers, with lower variance (noise is independent across examples) at the cost of two linear maps per
layer. It is not for ``conv2d``: the output positions of one example share a kernel, so their
pre-activations are correlated, and drawing them independently changes the expected loss (measured
as a 16-standard-error shift on a small conv net). Convolutions are refused.
"""

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_CONVOLUTIONS = (F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)


class LocalReparameterization(TorchFunctionMode):
    """Replaces ``F.linear`` on known weight tensors by a pre-activation draw; raises ``ValueError``
    for a convolution of a known weight (not exact, see the module's docstring).

    The exact trick that :class:`~bayesprune.core.objectives.AnalyticKLELBO` applies on request; Sparse VD's
    approximate one for convolutions, with keep-masks, is
    :class:`bayesprune.methods.sparse_vd.model.MaskedLocalReparameterization`.

    Args:
        posteriors: maps ``id(tensor)`` of a sampled weight or bias to its Gaussian posterior
            (any distribution with ``loc`` and ``scale``). Tensors not in it are used as given.
    """

    def __init__(self, posteriors: dict):
        super().__init__()
        self.posteriors = posteriors

    def _moments(self, tensor):
        if tensor is None:
            return None, None
        posterior = self.posteriors.get(id(tensor))
        if posterior is None:
            return tensor, None
        return posterior.loc, posterior.scale**2

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sampled = len(args) > 1 and id(args[1]) in self.posteriors
        if sampled and func in _CONVOLUTIONS:
            raise ValueError(
                f"local reparameterization is not exact for {func.__name__} (output positions share "
                "a kernel); sample the weights instead"
            )
        if func is not F.linear or not sampled:
            return func(*args, **kwargs)
        x, weight, *rest = args
        bias = rest[0] if rest else kwargs.pop("bias", None)
        rest = rest[1:]
        weight_mean, weight_var = self._moments(weight)
        bias_mean, bias_var = self._moments(bias)
        mean = func(x, weight_mean, bias_mean, *rest, **kwargs)
        var = func(x**2, weight_var, bias_var, *rest, **kwargs)
        return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)
