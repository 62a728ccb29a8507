"""PBP's prior started from another method's mask, so that any method's pruned network gets a PAC-Bayes
certificate (paper 000, section 6, with stage 1 replaced).

PBP's certificate is valid because its prior P depends on S_P only. Started from another method, stage
1 is that method's whole fit on S_P (and the rows ``train.validation`` held out, never S \\ S_P), with
its own options (``pbp.start_options``), optimiser (``pbp.start_optim``, default the run's ``[optim]``)
and ``pbp.prior_epochs`` as its ``train.epochs``, at PBP's sparsity s where it takes one. Its point
estimate becomes W⁰ and its scores rank the weights of eq. 6, so λ⁰ keeps exactly its mask at s
(block-isotropic, expected sparsity s); stages 2 and 3 and the certificate are PBP's own. The
certificate then bounds the Gibbs risk of a stochastic network around that method's mask, trained by
the bound on S \\ S_P: the same method's mask fitted on all of S is not certified by it.
"""

import pyro

from bayesprune.core.criteria import CRITERIA
from bayesprune.core.errors import ConfigError
from bayesprune.core.optim import OptimConfig
from bayesprune.core.validation import refuse_unknown_keys
from bayesprune.methods import available_methods, get_method, sparsity_option


def is_start_method(name: str) -> bool:
    """Whether ``pbp.start_mask`` names a method (fitted on S_P) rather than a one-shot criterion; a name
    that is both (``magnitude``) is the criterion: PBP's own magnitude start (section 7.1)."""
    return name in available_methods() and name != "pbp" and name not in CRITERIA


def start_method(options) -> tuple:
    """``(method, its options, its optimiser config)`` of ``pbp.start_mask``, validated, its sparsity
    option set to ``pbp.sparsity`` (refused when ``start_options`` asks for another)."""
    method = get_method(options.start_mask)
    if "weight" not in method.prune_levels:
        raise ConfigError(
            f"pbp.start_mask = {options.start_mask!r}: its mask removes whole units, and PBP's prior "
            "keeps or drops single weights (eq. 6)"
        )
    values = dict(options.start_options)
    refuse_unknown_keys("pbp.start_options", values, method.Options, owner=method.name)
    option = sparsity_option(method.name)
    if option is not None:
        wanted = [options.sparsity] if option == "sparsities" else options.sparsity
        if option in values and values[option] != wanted:
            raise ConfigError(
                f"pbp.start_options.{option} = {values[option]!r}: the start mask is taken at "
                f"pbp.sparsity = {options.sparsity}; leave it out"
            )
        values[option] = wanted
    try:
        own = method.Options(**values)
    except ConfigError as error:
        raise ConfigError(f"pbp.start_options: {error}") from None
    refuse_unknown_keys("pbp.start_optim", options.start_optim, OptimConfig)
    try:
        optim = OptimConfig(**options.start_optim) if options.start_optim else None
    except ConfigError as error:
        raise ConfigError(f"pbp.start_optim: {error}") from None
    return method, own, optim


def fit_start(net, data, options, ctx) -> dict:
    """Fit ``pbp.start_mask``'s method on ``data`` (S_P) through ``ctx`` (its stages are checkpointed
    and resumed as PBP's), put its point estimate into ``net`` and return its scores."""
    method, own, optim = start_method(options)
    method.check(net, data, own)
    saved = ctx.epochs, ctx.optim
    ctx.epochs, ctx.optim = options.prior_epochs, optim or ctx.optim
    try:
        fitted = method.fit(net, data, own, ctx)
    finally:
        ctx.epochs, ctx.optim = saved
    pyro.clear_param_store()
    point = fitted.network()
    shapes = {name: tuple(p.shape) for name, p in net.named_parameters()}
    if {name: tuple(p.shape) for name, p in point.named_parameters()} != shapes:
        raise ConfigError(f"pbp.start_mask = {options.start_mask!r}: its fit changed the network's shape")
    net.load_state_dict(point.state_dict())
    return fitted.scores()
