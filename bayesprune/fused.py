"""Closed-form KL terms of a network-wide posterior in one evaluation with their gradients.

An SVI step of a variational method spends most of its elementwise time on the closed-form KL of
every weight (its logs, exps and sigmoids, then autograd's backward of each, one pass over memory per
operation). :func:`summed_kl` evaluates a method's KL formula and its analytic gradient together in
one eager forward, reusing the intermediates (second moments, p*, σ) between value and gradient,
and returns one sum per site; its backward is one multiplication of the saved gradients by each
site's incoming weight. No value is read back to the host.

:class:`FlatPosterior` holds the flat parameter vectors of the sites and caches that evaluation for a
guide call; :class:`FlatSite` is the per-site distribution's side, read by
:func:`bayesprune.objectives.site_kl`. The methods supply only their formulas: the sBNN
(:class:`bayesprune.distributions.SpikeSlabPosteriors`, paper 003, eqs. 3.7-3.8), Sparse VD
(:class:`bayesprune.methods.sparse_vd.distributions.AdditiveNormals`, Molchanov et al. 2017, eq. 14)
and PBP (:class:`bayesprune.distributions.DiracSpikeSlabPosteriors`, paper 000, appendix B.4).

:func:`softplus` and :func:`log1p` give σ = softplus(ρ) from vectorised ``exp``/``log``: on CPU,
PyTorch's ``log1p`` (hence ``F.softplus`` and ``F.logsigmoid``) runs scalar code in AVX-512 builds,
about ten times the cost of ``log``.
"""
import torch


def log1p(u: torch.Tensor) -> torch.Tensor:
    """log(1 + u) for u > −1 to within a few ulps, from vectorised operations only: with w = 1 + u
    rounded, log(1 + u) = log w − ((w − 1) − u)/w to first order in the rounding error of w."""
    w = u + 1
    return torch.log(w).sub_((w - 1).sub_(u).div_(w))


class _Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        value = log1p(x.abs().neg_().exp_()).add_(x.clamp_min(0))
        ctx.save_for_backward(torch.sigmoid(x))
        return value

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return grad * slope


def softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = max(x, 0) + log(1 + exp(−|x|)), equal to ``F.softplus`` to float precision, with
    the derivative sigmoid(x) saved by the forward."""
    return _Softplus.apply(x)


class _SummedKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, terms, sizes, *inputs):
        value, grads = terms(*inputs)
        ctx.sizes = sizes
        ctx.save_for_backward(*grads)
        return torch.stack([chunk.sum() for chunk in value.split(sizes)])

    @staticmethod
    def backward(ctx, weights):
        grads = []
        for saved in ctx.saved_tensors:
            grad = None
            if saved is not None:
                grad = torch.empty_like(saved)
                for chunk, out, weight in zip(saved.split(ctx.sizes), grad.split(ctx.sizes), weights):
                    torch.mul(chunk, weight, out=out)
            grads.append(grad)
        return (None, None, *grads)


def summed_kl(terms, sizes: list, *inputs: torch.Tensor) -> torch.Tensor:
    """The KL of each site of flat ``inputs`` (one value per entry of ``sizes``), differentiable in them.

    ``terms(*inputs)`` returns the elementwise KL over the flat vectors and its elementwise derivative
    in each input (``None`` for one that needs none), computed without autograd: the function is
    exact where ``terms`` is, and its backward scales each site's saved derivative by that site's
    gradient (a penalty weight) instead of replaying the formula.
    """
    return _SummedKL.apply(terms, list(sizes), *inputs)


class FlatPosterior:
    """The sites of one network-wide posterior, views of flat vectors, whose summed KLs come from one
    :func:`summed_kl` over the whole vectors, made at the first site's KL (an object lives for one
    guide call, so it is never stale).

    Subclasses build their sites with :meth:`make_sites` and define :meth:`kl_terms` (``(terms, inputs)``
    for :func:`summed_kl`), and :meth:`covers` where a prior is recognised otherwise than as one of the
    ``priors`` given.
    """

    def __init__(self, shapes: dict, priors=()):
        self.names = list(shapes)
        self.shapes = [torch.Size(shape) for shape in shapes.values()]
        self.sizes = [shape.numel() for shape in self.shapes]
        self._priors = {id(prior): prior for prior in priors}
        self._kl = None

    def make_sites(self, distribution, *flats):
        """``self.sites``: site name → ``distribution(*views)`` on that site's views of the flat vectors
        ``flats``, each a :class:`FlatSite` of this posterior."""
        self.sites = {}
        for index, (name, *views) in enumerate(zip(self.names, *map(self.site_views, flats))):
            site = distribution(*views)
            site._segment = (self, index)
            self.sites[name] = site

    def site_views(self, flat: torch.Tensor) -> list:
        """The site tensors of a flat vector: one ``split`` (one autograd node, whose backward is one
        concatenation), and a view only where a site is not 1-dimensional."""
        return [chunk if chunk.shape == shape else chunk.view(shape)
                for chunk, shape in zip(flat.split(self.sizes), self.shapes)]

    def covers(self, prior) -> bool:
        """Is ``prior`` one the fused formula is written for: one of the ``priors`` this posterior was built for."""
        return self._priors.get(id(prior)) is prior

    def kl_terms(self) -> tuple:
        raise NotImplementedError

    def site_kl(self, prior, index: int):
        """Σ KL of site ``index`` to ``prior`` (0-dim), or ``None`` where ``prior`` is not covered."""
        if not self.covers(prior):
            return None
        if self._kl is None:
            terms, inputs = self.kl_terms()
            self._kl = summed_kl(terms, self.sizes, *inputs).unbind()
        return self._kl[index]


class FlatSite:
    """Mixin of a site distribution that may be a site of a :class:`FlatPosterior`."""

    _segment = None  # (FlatPosterior, site index), set by the posterior; expand() leaves a plain site

    def summed_kl(self, prior):
        """Σ KL(self ‖ prior) over the site from its network-wide evaluation, or ``None`` (a plain site,
        or a prior the fused formula does not cover): the caller sums the registered KL then."""
        if self._segment is None:
            return None
        posterior, index = self._segment
        return posterior.site_kl(prior, index)
