"""Closed-form KL terms of a network-wide posterior in one evaluation with their gradients.

An SVI step of a variational method spends most of its elementwise time on the closed-form KL of
every weight (its logs, exps and sigmoids, then autograd's backward of each, one pass over memory per
operation). :func:`summed_kl` evaluates a method's KL formula and its analytic gradient together in
one eager forward, reusing the intermediates (second moments, p*, σ) between value and gradient,
and returns one sum per site; its backward is one multiplication of the saved gradients by each
site's incoming weight. No value is read back to the host.

:class:`FlatPosterior` holds the flat parameter vectors of the sites and caches that evaluation for a
guide call; :class:`FlatSite` is the per-site distribution's side, read by
:func:`bayesprune.core.objectives.site_kl`. The methods supply only their formulas: the sBNN
(:class:`bayesprune.core.distributions.SpikeSlabPosteriors`, paper 003, eqs. 3.7-3.8), Sparse VD
(:class:`bayesprune.methods.sparse_vd.distributions.AdditiveNormals`, Molchanov et al. 2017, eq. 14)
and PBP (:class:`bayesprune.methods.pbp.distributions.DiracSpikeSlabPosteriors`, paper 000, appendix B.4).

:func:`softplus` and :func:`log1p` give σ = softplus(ρ) from vectorised ``exp``/``log``: on CPU,
PyTorch's ``log1p`` (hence ``F.softplus`` and ``F.logsigmoid``) runs scalar code in AVX-512 builds,
about ten times the cost of ``log``.

Each elementwise formula (softplus, the methods' KL terms) is a pure function run through
:func:`run_kernel`: eagerly, one pass over memory per operation, or compiled by ``torch.compile``
into one loop over the vectors (a C++ loop on CPU, a Triton kernel on CUDA) of the same formula,
equal to float precision. The mode is ``train.kernels`` (:func:`kernel_mode`, set around every training stage):
``"auto"`` compiles the kernels of vectors of at least :data:`AUTO_COMPILE_SIZE` weights where
``torch.compile`` works (a LeNet-300-100, not the digits networks of the tests, whose fits are too
short to repay the first compilation, about 5 s, 14 s with an empty cache, on 2 cores), ``"compiled"``
compiles every kernel, ``"eager"`` none.
"""

import logging
import warnings
from contextlib import contextmanager

import torch

from bayesprune.core.errors import ConfigError

#: ``train.kernels`` values.
KERNEL_MODES = ("auto", "compiled", "eager")
#: Under ``"auto"``, kernels over vectors of at least this many elements are compiled.
AUTO_COMPILE_SIZE = 100_000


class _Kernels:
    mode = "eager"  # outside a training stage
    compiled = {}  # function -> its torch.compile'd version
    broken = None  # why torch.compile failed here, once it has


@contextmanager
def kernel_mode(mode: str):
    """Run the kernels of the block as ``mode`` (:data:`KERNEL_MODES`)."""
    if mode not in KERNEL_MODES:
        raise ConfigError(f"train.kernels must be one of {list(KERNEL_MODES)}, got {mode!r}")
    previous, _Kernels.mode = _Kernels.mode, mode
    try:
        yield
    finally:
        _Kernels.mode = previous


def _compiled(function):
    if function not in _Kernels.compiled:
        _import_cpp_extension_quietly()
        _Kernels.compiled[function] = torch.compile(function, dynamic=True)
    return _Kernels.compiled[function]


def _import_cpp_extension_quietly():
    """Import torch's C++ extension module (the CPU compiler's) with its logger at ERROR: importing it on a machine
    without CUDA logs ``No CUDA runtime is found, using CUDA_HOME=...`` once, a line in every log of a fit that
    compiles on the CPU that asks nothing of the user."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import torch.utils.cpp_extension  # noqa: F401
    finally:
        logger.setLevel(previous)


def run_kernel(function, *tensors, **constants):
    """``function(*tensors, **constants)``, compiled under the current :func:`kernel_mode` (see the
    module's docstring). Under ``"auto"`` a compilation that fails (no C++ compiler) warns once and
    leaves every kernel of the process eager; under ``"compiled"`` it raises."""
    mode = _Kernels.mode
    if mode == "compiled" or (mode == "auto" and _Kernels.broken is None and tensors[0].numel() >= AUTO_COMPILE_SIZE):
        try:
            return _compiled(function)(*tensors, **constants)
        except Exception as error:  # torch.compile's backends raise many kinds; the eager result is the same
            if mode == "compiled":
                raise
            _Kernels.broken = _first_line(error)
            warnings.warn(
                f"train.kernels = 'auto': torch.compile failed ({_Kernels.broken}); kernels run eagerly",
                RuntimeWarning,
                stacklevel=2,
            )
    return function(*tensors, **constants)


def check_compiler(device: torch.device) -> None:
    """Refuse ``train.kernels = "compiled"`` where ``torch.compile`` cannot build a kernel on ``device``,
    in one line, before a fit (by compiling a small one)."""
    try:
        _compiled(_softplus_and_slope)(torch.zeros(8, device=device))
    except Exception as error:
        raise ConfigError(
            f"train.kernels = 'compiled' needs torch.compile on {device.type}, which failed here: {_first_line(error)}"
        ) from None


def _first_line(error: Exception) -> str:
    """The error's type and the first line of its message (torch.compile's run to pages)."""
    message = str(error).strip()
    return f"{type(error).__name__}: {message.splitlines()[0]}" if message else type(error).__name__


def log1p(u: torch.Tensor) -> torch.Tensor:
    """log(1 + u) for u > −1 to within a few ulps, from vectorised operations only (:func:`_log1p_from`)."""
    return _log1p_from(u, u + 1)


def _log1p_from(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """log(1 + u) given w = 1 + u rounded: log w − ((w − 1) − u)/w, exact to first order in the
    rounding error of w."""
    return torch.log(w).sub_((w - 1).sub_(u).div_(w))


def sigmoid_from_exp(x: torch.Tensor, e: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sigmoid(x) from e = exp(−|x|) and w = 1 + e: 1/w for x ≥ 0 and e/w below (to full relative
    precision, unlike 1 − 1/w), without a second exponential or a branch (``torch.where`` is scalar
    code on CPU): e ≤ 1, so max(e, [x ≥ 0]) is 1 or e."""
    return torch.maximum(e, (x >= 0).to(e.dtype)).div_(w)


def _softplus_and_slope(x):
    """softplus(x) and its derivative sigmoid(x), from one exp(−|x|)."""
    e = x.abs().neg_().exp_()
    w = e + 1
    value = _log1p_from(e, w).add_(x.clamp_min(0))
    return value, sigmoid_from_exp(x, e, w)


class _Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        value, slope = run_kernel(_softplus_and_slope, x)
        ctx.save_for_backward(slope)
        return value

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return grad * slope


def softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = max(x, 0) + log(1 + exp(−|x|)), equal to ``F.softplus`` to float precision, with
    the derivative sigmoid(x) saved by the forward."""
    return _Softplus.apply(x)


def _site_sums(value: torch.Tensor, sizes: list) -> torch.Tensor:
    """The sum of a flat elementwise ``value`` over each site (``sizes``, along the last dimension), as one
    vector (``[..., sites]`` for fits stacked along leading dimensions)."""
    return torch.stack([chunk.sum(-1) for chunk in value.split(sizes, -1)], -1)


def _site_expanded(weights: torch.Tensor, sizes: list) -> torch.Tensor:
    """Each site's entry of ``weights`` (``[..., sites]``) repeated over its elements, as a flat vector
    (no host copy on CUDA)."""
    return torch.cat(
        [weights[..., index, None].expand(*weights.shape[:-1], size) for index, size in enumerate(sizes)], -1
    )


class _SummedKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, terms, sizes, constants, *inputs):
        value, grads = run_kernel(terms, *inputs, **constants)
        ctx.sizes = sizes
        ctx.save_for_backward(*grads)
        return _site_sums(value, sizes)

    @staticmethod
    def backward(ctx, weights):
        grads = []
        for saved in ctx.saved_tensors:
            grad = None
            if saved is not None:
                grad = saved * _site_expanded(weights, ctx.sizes)
            grads.append(grad)
        return (None, None, None, *grads)


def summed_kl(terms, sizes: list, *inputs: torch.Tensor, **constants) -> torch.Tensor:
    """The KL of each site of flat ``inputs`` (one value per entry of ``sizes``), differentiable in them;
    inputs ``[..., weights]`` (fits stacked along leading dimensions) give ``[..., sites]``.

    ``terms(*inputs, **constants)``, a module-level function run by :func:`run_kernel`, returns the
    elementwise KL over the flat vectors and its elementwise derivative in each input (``None`` for
    one that needs none), computed without autograd: the function is exact where ``terms`` is, and its
    backward scales each site's saved derivative by that site's gradient (a penalty weight) instead of
    replaying the formula.
    """
    return _SummedKL.apply(terms, list(sizes), constants, *inputs)


def _draw_and_terms(loc, scale, noise, *others, terms, **constants):
    value, grads = terms(loc, scale, *others, **constants)
    return torch.addcmul(loc, scale, noise), value, grads[0], grads[1]


def _draw_backward(d_weights, noise, grad_loc, grad_scale, penalties):
    return torch.addcmul(d_weights, penalties, grad_loc), torch.addcmul(d_weights * noise, penalties, grad_scale)


class _DrawnKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, terms, sizes, constants, noise, loc, scale, *others):
        noise = torch.randn_like(loc) if noise is None else noise
        weights, value, grad_loc, grad_scale = run_kernel(
            _draw_and_terms, loc, scale, noise, *others, terms=terms, **constants
        )
        ctx.sizes, ctx.others = sizes, len(others)
        ctx.save_for_backward(noise, grad_loc, grad_scale)
        return weights, _site_sums(value, sizes)

    @staticmethod
    def backward(ctx, d_weights, d_kl):
        noise, grad_loc, grad_scale = ctx.saved_tensors
        d_weights = torch.zeros_like(noise) if d_weights is None else d_weights
        d_kl = noise.new_zeros(*noise.shape[:-1], len(ctx.sizes)) if d_kl is None else d_kl
        penalties = _site_expanded(d_kl, ctx.sizes)
        d_loc, d_scale = run_kernel(_draw_backward, d_weights, noise, grad_loc, grad_scale, penalties)
        return (None, None, None, None, d_loc, d_scale, *[None] * ctx.others)


def drawn_kl(terms, sizes: list, loc, scale, *others, noise=None, **constants) -> tuple:
    """A draw W = loc + scale ε (ε ~ N(0, I), drawn here from torch's generator unless ``noise`` gives it)
    of flat Gaussian weights and the KL of each site as :func:`summed_kl` gives it, from one kernel:
    ``terms(loc, scale, *others, **constants)``, whose derivatives in ``loc`` and ``scale`` only may be
    non-``None``. The backward is one pass too: ∂/∂loc = ∂W + κ ∂KL/∂loc and ∂/∂scale = ε ∂W + κ
    ∂KL/∂scale, κ each site's penalty weight. Fits stacked along leading dimensions (``[K, weights]``,
    :mod:`bayesprune.core.batched`) give ``[K, sites]`` KLs."""
    return _DrawnKL.apply(terms, list(sizes), constants, noise, loc, scale, *others)


class FlatPosterior:
    """The sites of one network-wide posterior, views of flat vectors, whose summed KLs come from one
    :func:`summed_kl` over the whole vectors, made at the first site's KL, or from the draw of
    :meth:`site_draw` (an object lives for one guide call, so it is never stale).

    Subclasses build their sites with :meth:`make_sites` and define :meth:`kl_terms` (``(terms, inputs,
    constants)`` for :func:`summed_kl`), and :meth:`covers` where a prior is recognised otherwise than as one of the
    ``priors`` given.
    """

    def __init__(self, shapes: dict, priors=()):
        self.names = list(shapes)
        self.shapes = [torch.Size(shape) for shape in shapes.values()]
        self.sizes = [shape.numel() for shape in self.shapes]
        self._priors = {id(prior): prior for prior in priors}
        self._kl = None
        self._draw = None

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
        return [
            chunk if chunk.shape == shape else chunk.view(shape)
            for chunk, shape in zip(flat.split(self.sizes), self.shapes)
        ]

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
            terms, inputs, constants = self.kl_terms()
            self._kl = summed_kl(terms, self.sizes, *inputs, **constants).unbind()
        return self._kl[index]

    def site_draw(self, index: int) -> torch.Tensor:
        """A reparameterised draw of site ``index``: a view of one network-wide :func:`drawn_kl`, whose
        KLs the sites' :meth:`site_kl` then read. Each draw hands out every site once: a site drawn
        again starts the next one. For posteriors whose sites are N(loc, scale²) with ``kl_terms``
        inputs beginning with the flat loc and scale."""
        if self._draw is None or self._draw[index] is None:
            terms, inputs, constants = self.kl_terms()
            weights, kl = drawn_kl(terms, self.sizes, *inputs, **constants)
            self._draw, self._kl = self.site_views(weights), kl.unbind()
        value, self._draw[index] = self._draw[index], None
        return value


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
