"""What a run checks before anything is written: the data it loads, the size and shape of its network,
its validation fraction and memory layout, and the services and keys its method supports."""

import torch

from bayesprune.core.errors import ConfigError
from bayesprune.core.fused import check_compiler
from bayesprune.core.graphs import check_graphs
from bayesprune.core.layout import resolve_memory_format
from bayesprune.core.precision import check_precision
from bayesprune.core.sites import site_names
from bayesprune.core.validation import MAX_ELEMENTS
from bayesprune.data import load_dataset, uci_num_splits
from bayesprune.methods import get_method
from bayesprune.models import new_net
from bayesprune.models.module_priors import assign_tables, read_tables


def check_before_fit(config, *, resuming: bool = False, datasets=None) -> list:
    """Every check a run makes before anything is written (the method's services and keys, the data, the
    network's size, inputs, outputs and units, the method's own :meth:`~bayesprune.methods.Method.check`),
    raising :class:`~bayesprune.core.errors.ConfigError` in one line; returns the data sets, loaded
    unless ``datasets`` are given. ``bayesprune run`` and every cell of a grid check through it."""
    method = get_method(config.method)
    refuse_unsupported(config, method, resuming=resuming)
    datasets = load_datasets(config) if datasets is None else datasets
    check_size(config, datasets[0])
    check_validation(config, datasets)
    check_importance(config, datasets[0])
    check_memory_format(config, datasets[0])
    net = new_net(config, datasets[0].input_shape, datasets[0].output_dim, seed=config.seed)
    check_network(net, datasets[0])
    check_units(config, net, datasets[0])
    assign_tables(
        net, read_tables(config.model.priors), site_names(net, expose=config.model.expose, hide=config.model.hide)
    )
    method.check(net, datasets[0], config.method_options)
    return datasets


def load_datasets(config) -> list:
    """The dataset of the config, or one per split when ``data.splits`` is set (UCI)."""
    data = config.data
    if data.splits is None:
        return [load_dataset(data.dataset, **data.options)]
    options = {key: value for key, value in data.options.items() if key != "split"}
    first = load_dataset(data.dataset, **options)
    splits = range(uci_num_splits(options["root"], options["name"])) if data.splits == "all" else data.splits
    return [first if split == 0 else load_dataset(data.dataset, **options, split=split) for split in splits]


def check_size(config, data):
    """Refuse, before allocating it, a network of more than :data:`~bayesprune.core.validation.MAX_ELEMENTS`
    (2**31) parameters, 8 GiB of float32 weights before any optimiser state or posterior, or ``chains``
    of them above it together: it is built on PyTorch's ``meta`` device (shapes only, no memory) and
    its parameters counted."""
    try:
        with torch.device("meta"):
            net = new_net(config, data.input_shape, data.output_dim, seed=config.seed, weights=False)
        count = sum(param.numel() for param in net.parameters())
    except Exception:  # noqa: BLE001 - a network that does not build on meta is built (and checked) for real
        return
    if count > MAX_ELEMENTS:
        raise ConfigError(
            f"model: the network has {count:,} parameters, more than the {MAX_ELEMENTS:,} (2**31) "
            "bayesprune accepts; make model.hidden (or the architecture) smaller"
        )
    chains = run_chains(config, data)
    if count * chains > MAX_ELEMENTS:  # the run holds every chain's fit until it writes the posterior
        raise ConfigError(
            f"chains: {chains:,} fits of {count:,} parameters hold more than the {MAX_ELEMENTS:,} (2**31) "
            "bayesprune accepts; ask for fewer chains"
        )


#: Loaders of the user's own tables, whose runs pool ``Method.table_chains`` restarts under ``chains = "auto"``.
TABLE_LOADERS = ("csv", "npz")


def run_chains(config, data) -> int:
    """The run's number of chains: ``config.chains``, or for ``"auto"`` the method's ``table_chains``
    (restarts its feature importance pools) when ``data`` is the user's own table of 1-D inputs, else 1."""
    if config.chains != "auto":
        return config.chains
    table = config.data.dataset in TABLE_LOADERS and len(data.input_shape) == 1
    return getattr(get_method(config.method), "table_chains", 1) if table else 1


def check_importance(config, data, *, selection=None, copies=None, key="importance.selection"):
    """Refuse, before anything is written, ``importance.groups`` naming something that is no input of the
    table (or groups of inputs that are no table), and a selection rule that needs more training rows than
    the table has (knockoffs: a fit on the inputs beside their copies needs at least as many rows as it has
    inputs, :func:`~bayesprune.analysis.knockoffs.rows_needed`)."""
    from bayesprune.analysis.groups import named_groups
    from bayesprune.analysis.knockoffs import KNOCKOFF_COPIES, rows_needed

    settings = config.importance
    table = len(data.input_shape) == 1
    if settings.groups is not None:
        if not table or data.feature_names is None:
            raise ConfigError(
                f"importance.groups: groups are of a table's named inputs; the inputs are {data.input_shape}"
            )
        try:
            named_groups(settings.groups, list(data.feature_names))
        except ValueError as error:
            raise ConfigError(str(error)) from None
    selection = settings.selection if selection is None else selection
    copies = KNOCKOFF_COPIES if copies is None else copies
    if selection == "knockoff":
        import importlib.util

        if importlib.util.find_spec("knockpy") is None:
            raise ConfigError(f"{key}: knockoff selection needs knockpy: pip install 'bayesprune[importance]'")
    if selection == "knockoff" and table and data.num_train < rows_needed(data.input_shape[0], copies):
        raise ConfigError(
            f"{key}: knockoff selection needs at least {rows_needed(data.input_shape[0], copies)} training rows "
            f"(inputs x (copies + 1)) for {data.input_shape[0]} inputs and {copies} copies; the table has "
            f"{data.num_train}"
        )


def check_validation(config, datasets):
    """Refuse a ``train.validation`` fraction that would leave no training example of a split."""
    fraction = config.train.validation
    for dataset in datasets if fraction > 0 else ():
        if max(1, round(fraction * dataset.num_train)) >= dataset.num_train:
            raise ConfigError(f"train.validation = {fraction} leaves no training example of {dataset.num_train}")


def check_memory_format(config, data):
    """Refuse ``train.memory_format = "channels_last"`` for inputs that are not images (one line naming the key)."""
    resolve_memory_format(config.train.memory_format, data.input_shape, config.torch_device)


def check_units(config, net, data):
    """Refuse unit-level pruning (``prune.level = "unit"``, and every method that gates units) of a
    network without hidden units (``model.hidden = []``): there is nothing it could remove; of one
    Torch-Pruning cannot trace (its units are unknown: the pruning curve would fail after training);
    or of one whose units are ill-defined (an attention's ``num_heads`` that does not divide its width)."""
    if config.prune.level != "unit":
        return
    from bayesprune.core.structure import unit_groups

    try:
        groups = unit_groups(net, data.input_shape)
    except ValueError as error:
        raise ConfigError(f"prune.level = 'unit': {error}") from None
    if not groups:
        raise ConfigError(
            "prune.level = 'unit': the network has no hidden units to remove (model.hidden = [] or "
            "an architecture without hidden layers)"
        )
    if config.prune.macs:
        from bayesprune.core.macs import MacsBelowFloors, check_reachable
        from bayesprune.core.pruning import Budget

        try:
            budget = Budget(macs=min(config.prune.macs), level="unit", min_keep=config.prune.min_keep)
            check_reachable(net, budget, input_shape=data.input_shape)
        except MacsBelowFloors as error:
            raise ConfigError(f"prune.macs: {error}") from None


def check_network(net, data):
    """Refuse, before anything is written, a network that does not map two of the data's inputs to
    outputs of the width the data need (``num_classes``, or 1 for regression), or one without a layer to
    prune (a Linear, bilinear or convolution layer). The network is left in the mode it came in."""
    from bayesprune.core.sites import PRUNABLE

    if not any(isinstance(module, PRUNABLE) for module in net.modules()):
        raise ConfigError("model: the network has no Linear or convolution layer; bayesprune prunes their weights")
    training = net.training
    net.eval()
    try:
        with torch.no_grad():
            output = net(data.x_train[:2])
    except Exception as error:  # the user's network, whatever it raises
        message = " ".join(str(error).split())[:200]
        raise ConfigError(
            f"model: the network does not take inputs of shape {list(data.input_shape)} "
            f"({type(error).__name__}: {message})"
        ) from None
    finally:
        net.train(training)  # fit_method trains the network it was given: in the mode it came in
    if not torch.is_tensor(output) or tuple(output.shape) != (2, data.output_dim):
        shape = list(output.shape[1:]) if torch.is_tensor(output) else type(output).__name__
        raise ConfigError(f"model: the network's output per example is {shape}; the data need [{data.output_dim}]")


def refuse_unsupported(config, method, *, resuming: bool = False):
    """Refuse, before anything is written, a config that asks ``method`` for a service or sets a key it
    does not use (:attr:`~bayesprune.methods.Method.unsupported`), in one line naming the key."""
    if config.prune.level not in method.prune_levels:
        raise ConfigError(
            f"prune.level must be one of {list(method.prune_levels)} for method {method.name!r}, "
            f"got {config.prune.level!r}"
        )
    services = {
        "validation": ("train.validation", config.train.validation > 0),
        "checkpoint": ("train.checkpoint_every", config.train.checkpoint_every != 1),
        "resume": ("--resume", resuming),
    }
    if config.model.priors and not method.places_priors:
        raise ConfigError(f"model.priors is not supported by method {method.name!r}: it places no per-module prior")
    for name, why in method.unsupported_for(config.method_options).items():
        key, asked = services[name] if name in services else (name, _set(config, name))
        if asked:
            raise ConfigError(f"{key} is not supported by method {method.name!r}: {why}")
    if config.train.kernels == "compiled":
        check_compiler(config.torch_device)
    check_graphs(config.train.graphs, config.torch_device)
    check_precision(config.train.precision, config.torch_device)


def _set(config, key: str) -> bool:
    """Whether ``key`` (``"optim.momentum"``) holds another value than its section's default."""
    section, field = key.split(".")
    values = getattr(config, section)
    return getattr(values, field) != getattr(type(values)(), field)
