"""Which parameters of a network are sites: the tensors priors, masks, scores and sparsity counts are
about. By default, the parameters of the prunable layers (``Linear``, ``Bilinear`` and convolutions)
and the query/key/value projections of ``nn.MultiheadAttention``; normalisation layers and any other
parameter stay point estimates unless exposed, as TyXe's ``hide``/``expose`` do."""

from fnmatch import fnmatchcase

from torch import nn

from bayesprune.core.errors import ConfigError
from bayesprune.core.structure import ATTENTION

#: The config keys a method that trains a plain network by its mean loss under masks of the
#: :func:`weight_sites` does not read (:attr:`bayesprune.methods.Method.unsupported`).
UNREAD_BY_MASKED_TRAINING = {
    "model.noise_scale": "it trains by mean squared error, which no noise scale changes",
    "model.expose": "its masks cover the weights of the Linear and convolution layers, whatever the sites",
    "model.hide": "its masks cover the weights of the Linear and convolution layers, whatever the sites",
    "train.kernels": "it has no per-weight variational formulas to compile",
}

#: Layer types whose parameters are sites by default.
PRUNABLE = (nn.Linear, nn.Bilinear, nn.modules.conv._ConvNd)

#: The projection parameters of ``nn.MultiheadAttention``, held by the attention module itself rather
#: than by a ``Linear`` (its output projection is one, a site already): the packed query/key/value
#: weight and bias, or the three separate weights when keys and values have their own sizes. The
#: learned key/value biases (``bias_k``, ``bias_v``) are extra tokens, not weights, and stay out.
ATTENTION_PROJECTIONS = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight")


def _is_site_by_default(module: nn.Module, param_name: str) -> bool:
    # an attention that lost heads (HeadsRemovedAttention) keeps its projections' names and sites
    return isinstance(module, PRUNABLE) or (isinstance(module, ATTENTION) and param_name in ATTENTION_PROJECTIONS)


def parameter_owners(net: nn.Module) -> dict:
    """Every parameter name of ``net`` (a shared parameter once, under its first name) → ``(module name,
    module)`` of the module holding it."""
    owners = {}
    for module_name, module in net.named_modules():
        for param_name, _ in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            owners.setdefault(name, (module_name, module))
    return {name: owners[name] for name, _ in net.named_parameters()}


def matching_parameters(owners: dict, pattern: str) -> set:
    """The parameter names of ``owners`` (:func:`parameter_owners`) that ``pattern`` matches: a parameter
    name or a glob over them (``"*.bn1.*"``), a module name or a glob over them (``"classifier"``: its
    weight and bias), or a module type name (``"BatchNorm2d"``)."""
    return {
        name
        for name, (module_name, module) in owners.items()
        if fnmatchcase(name, pattern) or fnmatchcase(module_name, pattern) or type(module).__name__ == pattern
    }


def site_names(net: nn.Module, *, expose=(), hide=()) -> list:
    """The names of ``net``'s site parameters, in network order (a parameter shared by several modules
    once, under its first name).

    ``expose`` adds and ``hide`` removes parameters, each entry as :func:`matching_parameters` reads it (a
    parameter or module name, a glob over them, or a module type name); ``hide`` wins. An entry that
    matches no parameter raises :class:`~bayesprune.core.errors.ConfigError` naming ``model.expose``/``model.hide``.
    """
    owners = parameter_owners(net)
    default = {name for name, (_, module) in owners.items() if _is_site_by_default(module, name.rpartition(".")[2])}
    chosen = {}
    for key, patterns in (("model.expose", expose), ("model.hide", hide)):
        chosen[key] = set()
        for pattern in patterns:
            found = matching_parameters(owners, pattern)
            if not found:
                raise ConfigError(f"{key}: {pattern!r} matches no parameter of the network")
            chosen[key] |= found
    return [
        name
        for name in owners
        if (name in default or name in chosen["model.expose"]) and name not in chosen["model.hide"]
    ]


def weight_sites(net: nn.Module) -> list:
    """The weight tensors of the prunable layers, the sites a pruning criterion scores and a weight mask
    covers (biases are never pruned by the criteria)."""
    return [name for name in site_names(net) if name.endswith("weight")]
