"""One call from Python: any registered method on the user's own network and data.

Example::

    import bayesprune as bp

    fitted = bp.fit_method("sparse-vd", net, (x_train, y_train), (x_test, y_test), epochs=50)
    masks = bp.prune(fitted.scores(), bp.Budget(sparsity=0.9))
"""

from dataclasses import replace

import torch
from torch.utils.data import DataLoader

from bayesprune.core.errors import ConfigError, DataError
from bayesprune.core.loop import resolve_device
from bayesprune.core.tasks import is_classification, task_of
from bayesprune.data import CLASSIFICATION, REGRESSION, Dataset, validate
from bayesprune.data.streaming import loader_rows, loader_tensors
from bayesprune.methods import FitContext, get_method
from bayesprune.pipeline.checks import check_network, refuse_unsupported
from bayesprune.pipeline.config import RunConfig


def fit_method(
    name: str,
    net: torch.nn.Module,
    train,
    test=None,
    *,
    options=None,
    epochs: int | None = None,
    batch_size: int = 128,
    optim: dict | None = None,
    device: str = "auto",
    precision: str = "float32",
    seed: int = 0,
    validation=None,
    patience: int | None = None,
    progress: bool = False,
    expose=(),
    hide=(),
    priors=(),
    noise_scale: float | None = None,
    stream: bool | None = None,
):
    """Fit the method registered as ``name`` on ``net`` and return its :class:`~bayesprune.methods.Fitted`.

    Args:
        name: a registered method (``bayesprune list`` shows their configs).
        net: any ``torch.nn.Module``; it is trained in place (a method that shrinks it returns the
            smaller network as ``fitted.net``).
        train, test: ``(x, y)`` tensors or ``DataLoader``s of ``(x, y)`` batches (read once into
            tensors); integer ``y`` is classification (classes 0 … K − 1), floating ``y`` regression
            (taken as given: standardise it yourself). ``test`` is what the methods that report a
            test error along the way (PFT, ProbMask, ...) evaluate on; without it, they use ``train``.
        options: the method's options, a dict of its TOML table (``{"pi": 0.3}``) or its ``Options``.
        epochs: length of the method's main stage (``train.epochs``; default 200).
        batch_size, optim: minibatch size and the ``[optim]`` table (``{"name": "sgd", "lr": 0.01}``).
        precision: ``"bfloat16"`` trains under mixed precision (``train.precision``,
            :mod:`bayesprune.core.precision`).
        validation: ``(x, y)`` held out for early stopping, where the method supports it.
        expose, hide: parameters added to the sites or taken out, as ``model.expose`` and
            ``model.hide`` of a config (names, globs or module type names; ``hide`` wins;
            :func:`bayesprune.core.sites.site_names`).
        priors: per-module priors, as ``[[model.priors]]`` of a config: a list of dicts, each with
            ``modules`` (names, globs or module type names), ``prior`` and its hyper-parameters, e.g.
            ``[{"modules": "Conv2d", "prior": "group-horseshoe"}, {"modules": "fc", "prior":
            "spike-slab"}]`` (:mod:`bayesprune.models.module_priors`; methods that place priors: ``sbnn``).
        stream: read a ``train`` DataLoader's rows as each minibatch needs them (decoded in its
            ``num_workers`` processes, in the fit's own shuffled order) instead of into one tensor
            (:func:`bayesprune.data.streaming.loader_rows`: its labels read in one pass, or from its
            dataset's ``targets``). By default (``None``) a DataLoader over a map-style dataset streams;
            ``False`` reads it into memory (faster where the rows fit), as an iterable dataset always is.

    ``noise_scale`` fixes the Gaussian noise of regression (``model.noise_scale``); ``None`` learns it.

    The returned fit carries ``train``'s inputs as its ``calibration``: ``fitted.predict(x, masks=...)``
    re-estimates batch-norm statistics for the masked network on 20 batches of them (set
    ``fitted.calibration = None`` to keep the fit's own).
    """
    data = _user_dataset(train, test, stream=stream, net=net)
    check_network(net, data)
    method = get_method(name)
    config = RunConfig.from_dict(
        {
            "method": name,
            "seed": seed,
            "device": device,
            "optim": dict(optim or {}),
            "data": {"batch_size": batch_size},
            "model": {"expose": expose, "hide": hide, "priors": list(priors), "noise_scale": noise_scale},
            "train": {"epochs": 200 if epochs is None else epochs, "precision": precision},
            "prune": {"level": method.prune_levels[0]},
            **({name: dict(options)} if isinstance(options, dict) else {}),
        }
    )
    if options is not None and not isinstance(options, dict):
        if not isinstance(options, method.Options):
            raise ConfigError(f"options must be a dict or a {method.Options.__name__}, got {type(options).__name__}")
        config = replace(config, method_options=options)
    refuse_unsupported(config, method)
    method.check(net, data, config.method_options)
    if validation is not None and "validation" in method.unsupported_for(config.method_options):
        raise ConfigError(
            f"validation is not supported by method {name!r}: {method.unsupported_for(config.method_options)['validation']}"
        )
    ctx = FitContext.from_config(
        config,
        data,
        device=resolve_device(device),
        progress=progress,
        validation=None if validation is None else _tensors(validation, "validation"),
        calibration=config.prune.calibration(data.x_train, batch_size=batch_size),
    )
    ctx.patience = patience
    return method.fit(net, data, config.method_options, ctx)


def export(run_or_fitted, *, out, budget=None, data=None, repeats: int = 30, force: bool = False, finetune_epochs=None):
    """Write a fitted network as a file that runs with torch alone and a trainable file (``bayesprune export``).

    Args:
        run_or_fitted: a run directory (``bayesprune run --out``), or a :class:`~bayesprune.methods.Fitted`
            (``fit_method``'s) with ``data``.
        out: the ``.pt2`` file to write; ``OUT_STEM.trainable.pt`` is written beside it.
        budget: a :class:`~bayesprune.core.pruning.Budget` pruning further than the method did, or ``None``.
        data: for a ``Fitted``, the ``(x, y)`` tensors (or ``DataLoader``) its test metric is measured on.
        repeats: timed forward passes per batch size; force: overwrite files at ``out``.
        finetune_epochs: for a run directory, epochs of fine-tuning of the exported network in place of the
            run's ``prune.finetune_epochs`` (``bayesprune export --finetune-epochs``).

    Returns the :class:`~bayesprune.pipeline.export.Exported` measurements (``.report``, as
    ``bayesprune export --json`` prints them).

    Example::

        exported = bp.export("runs/digits", out="net.pt2", budget=bp.Budget(sparsity=0.5))
        exported.report["exported"]["parameters"]
    """
    from bayesprune.methods import Fitted
    from bayesprune.pipeline.export import export_fitted, export_run

    if isinstance(run_or_fitted, Fitted):
        if data is None:
            raise DataError("data: give the (x, y) tensors the exported network is measured on")
        dataset = _user_dataset(data, data, net=run_or_fitted.network())
        try:
            check_network(run_or_fitted.network(), dataset)
        except ConfigError as error:
            raise DataError(f"data: does not suit the fitted network; {error}") from None
        return export_fitted(run_or_fitted, dataset, out=out, budget=budget, repeats=repeats, force=force)
    if data is not None:
        raise DataError("data: a run directory exports with its own data; give data with a Fitted only")
    return export_run(
        run_or_fitted, out=out, budget=budget, repeats=repeats, force=force, finetune_epochs=finetune_epochs
    )


def _user_dataset(train, test=None, *, stream: bool | None = False, net=None) -> Dataset:
    """The checked :class:`~bayesprune.data.Dataset` of the user's ``(x, y)`` tensors or loaders: integer
    ``y`` is classification, floating ``y`` regression; ``stream``: a ``train`` DataLoader's inputs read on demand
    (``None``: where its dataset is map-style).
    With ``net``, a classification's classes are its outputs: a label (train or test) beyond them is refused."""
    if stream and not isinstance(train, DataLoader):
        raise DataError("stream: reads the rows of a train DataLoader; train is not one")
    if stream is None:  # a DataLoader is what a user passes when the data do not fit: its rows read by index
        stream = isinstance(train, DataLoader) and not isinstance(train.dataset, torch.utils.data.IterableDataset)
    x_train, y_train = loader_rows(train, "train") if stream else _tensors(train, "train")
    x_test, y_test = (x_train, y_train) if test is None else _tensors(test, "test")
    classification = is_classification(task_of(y_train))
    classes = int(max(y_train.max(), y_test.max())) + 1 if classification else None
    width = _output_width(net, x_train) if classification and net is not None else None
    if width is not None:
        for which, y in (("train", y_train), ("test", y_test)):
            if int(y.max()) >= width:
                raise DataError(
                    f"{which}: labels go up to {int(y.max())}, but the network gives {width} outputs (classes 0 … {width - 1})"
                )
        classes = max(classes, width)
    data = Dataset(
        name="user data",
        task=CLASSIFICATION if classification else REGRESSION,
        x_train=x_train.float(),
        y_train=y_train.long() if classification else y_train.float(),
        x_test=x_test.float(),
        y_test=y_test.long() if classification else y_test.float(),
        input_shape=tuple(x_train.shape[1:]),
        num_classes=classes,
    )
    validate(data)
    return data


def _output_width(net, x) -> int | None:
    """The width of ``net``'s output on two rows of ``x``, or ``None`` where it gives no ``(2, k)`` tensor
    (:func:`~bayesprune.pipeline.checks.check_network` says why)."""
    training = net.training
    try:
        with torch.no_grad():
            output = net.eval()(x[:2].float())
    except Exception:  # noqa: BLE001 - the user's network: check_network names what it raises
        return None
    finally:
        net.train(training)
    return output.shape[1] if torch.is_tensor(output) and output.dim() == 2 and len(output) == 2 else None


def _tensors(part, which: str) -> tuple:
    if isinstance(part, DataLoader):
        return loader_tensors(part, which)
    if isinstance(part, (tuple, list)) and len(part) == 2 and all(torch.is_tensor(t) for t in part):
        return part[0], part[1]
    raise DataError(f"{which}: give (x, y) tensors or a DataLoader of (x, y) batches")
