"""A fit's start, and independent fits of one network shape trained together (issue 51, item 1).

:func:`start_fit` readies one fit (its network, context and start metric), as a run fits it alone; the
others ready several and train them as one stacked model (:meth:`~bayesprune.methods.Method.fit_together`,
:mod:`bayesprune.core.batched`): a run's seeds (:func:`fit_seeds_together`), its chains after the first
(:func:`fit_chains_together`), the cells of a comparison or sweep that differ only in their seed
(:func:`fit_runs_together`), and a run's splits after the first (:func:`fit_splits_together`). Each fit
ends where its separate fit ends.
"""

import copy
import gc
import sys
from dataclasses import replace

import torch

from bayesprune.analysis.inference_data import PREDICTIVE_TEST_POINTS
from bayesprune.core.batched import check_stackable
from bayesprune.core.early_stopping import hold_out
from bayesprune.core.errors import ConfigError
from bayesprune.core.predict import DrawOutputs
from bayesprune.core.tasks import network_test_metric
from bayesprune.methods import FitContext, get_method
from bayesprune.pipeline.checks import check_before_fit, run_chains
from bayesprune.pipeline.start import start_network


def held_out(config, dataset, seed: int) -> tuple:
    """``(dataset, validation)`` of a fit from ``seed``: its training rows, and the rows ``train.validation``
    holds out by that seed (``None``: none held out)."""
    if config.train.validation > 0:
        dataset, *validation = hold_out(dataset, config.train.validation, seed=seed)
        return dataset, validation
    return dataset, None


def start_fit(
    config, dataset, validation, *, seed, device, progress, first_chain=True, draws=False, **services
) -> tuple:
    """``(net, baseline_net, start, ctx)`` of one fit from ``seed``: its starting network, a copy of it and
    its test metric (the first chain's only), and its context (``services``: checkpoint, resume) with the
    calibration of ``prune.recalibrate`` on ``dataset``'s training rows and, where ``draws`` (the run's
    first fit, whose posterior predictive in ``posterior.nc`` reuses the pruning curve's draws), a recorder
    of those draws."""
    net = start_network(config, dataset, device=device, seed=seed)
    baseline_net = copy.deepcopy(net) if first_chain else None
    start = network_test_metric(net, dataset) if first_chain else None
    ctx = FitContext.from_config(
        config,
        dataset,
        device=device,
        seed=seed,
        progress=progress,
        validation=None if validation is None else tuple(validation),
        calibration=config.prune.calibration(
            dataset.x_train, batch_size=config.for_data(dataset.num_train).data.batch_size
        ),
        unpruned_draws=DrawOutputs(rows=PREDICTIVE_TEST_POINTS) if draws else None,
        **services,
    )
    return net, baseline_net, start, ctx


def fit_seeds_together(config, method, datasets, device, seeds, *, progress, draws=None) -> dict:
    """Seed → ``(net, baseline_net, start, ctx, fitted)`` of the first fit of every seed of the run, trained
    together (:meth:`~bayesprune.methods.Method.fit_together`, no checkpoint while training) when the method
    supports it and the run has several seeds, one split and one chain; else empty. Networks the stack
    refuses (batch norm, dropout: :func:`~bayesprune.core.batched.check_stackable`) fit one at a time.
    ``draws``: the seeds whose fit records the draws of a run's first fit (default the first seed's; every
    seed's when each is a run of its own)."""
    if len(seeds) < 2 or not method.fits_together or len(datasets) > 1 or run_chains(config, datasets[0]) > 1:
        return {}

    def begin(seed):
        dataset, validation = held_out(config, datasets[0], seed)
        start = start_fit(
            config, dataset, validation, seed=seed, device=device, progress=progress, draws=seed in (draws or seeds[:1])
        )
        return dataset, start

    return fit_stack(config, method, list(seeds), begin)


def fit_runs_together(configs: list) -> list | None:
    """``(net, baseline_net, start, ctx, fitted)`` of each run of ``configs`` (runs of one seed each that differ
    only in it: a comparison's or a sweep's cells), trained together as :func:`fit_seeds_together` trains a
    run's seeds, each recording what a run's first fit records; :func:`~bayesprune.pipeline.runner.run` of
    each config with its fit (``fitted``) writes the run directory it writes alone. ``None`` when they cannot
    train together (fewer than two, a method that does not opt in, several splits or chains, networks the stack
    refuses: said in one line); then nothing was fitted.

    Raises:
        ConfigError: the configs differ in more than their seed, or one of them has several seeds.
    """
    alike = {replace(config, seed=0).to_toml() for config in configs}
    if len(alike) > 1 or any(len(config.seeds) > 1 for config in configs):
        raise ConfigError("runs trained together must be runs of one seed each that differ only in it")
    config, seeds = configs[0], [config.seed for config in configs]
    datasets = check_before_fit(config)
    method = get_method(config.method)
    fits = fit_seeds_together(config, method, datasets, config.torch_device, seeds, progress=False, draws=seeds)
    return [fits[seed] for seed in seeds] if fits else None


def fit_splits_together(config, method, datasets: list, device, progress) -> dict:
    """Split index → ``(net, baseline_net, start, ctx, fitted)`` of a run's splits after the first (each from
    seed ``config.seed + index`` on its own rows, no checkpoint: the first split alone writes one), trained
    together as :func:`fit_seeds_together` trains a run's seeds, when the method supports it; else empty."""
    if len(datasets) < 3 or not method.fits_together:
        return {}

    def begin(seed):
        dataset, validation = held_out(config, datasets[seed - config.seed], seed)
        return dataset, start_fit(config, dataset, validation, seed=seed, device=device, progress=progress)

    fits = fit_stack(config, method, [config.seed + index for index in range(1, len(datasets))], begin)
    return {seed - config.seed: fit for seed, fit in fits.items()}


def fit_chains_together(config, method, dataset, validation, chains: int, device, progress) -> dict:
    """Chain → ``(net, baseline_net, start, ctx, fitted)`` of the first split's chains after the first (seeds
    ``config.seed + chain``, no checkpoint: only the first chain writes one), trained together as
    :func:`fit_seeds_together` trains a run's seeds, when the method supports it; else empty."""
    if not method.fits_together:
        return {}

    def begin(seed):
        return dataset, start_fit(
            config, dataset, validation, seed=seed, device=device, progress=progress, first_chain=False
        )

    fits = fit_stack(config, method, [config.seed + chain for chain in range(1, chains)], begin)
    return {seed - config.seed: fit for seed, fit in fits.items()}


def fit_stack(config, method, seeds: list, begin) -> dict:
    """:func:`fit_seeds_together` of ``seeds`` (``begin(seed)``: the fit's rows and :func:`start_fit`); a
    stack the device has no memory for is fitted again as two halves, each from its fits' start (``begin``
    again), and networks the stack refuses (other shapes, dropout, batch norm) one at a time, each said in
    one line. The halves train once the failed stack is gone: the error's traceback holds the frames that
    hold its tensors, so they are not retried inside the ``except``."""
    begun = [begin(seed) for seed in seeds]
    nets = [start[0] for _, start in begun]
    try:
        check_stackable(nets)
    except ConfigError as error:
        print(f"bayesprune: {len(seeds)} seeds fitted one at a time: {error}", file=sys.stderr)
        return {}
    try:
        fits = method.fit_together(nets, [rows for rows, _ in begun], config.method_options, [s[3] for _, s in begun])
        return {seed: (*start, fitted) for seed, (_, start), fitted in zip(seeds, begun, fits)}
    except torch.cuda.OutOfMemoryError:
        if len(seeds) == 1:
            raise
    del begun, nets
    gc.collect()  # cycles through the failed stack's frames
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = (len(seeds) + 1) // 2
    print(f"bayesprune: {len(seeds)} fits together ran out of device memory; fitting {half} at a time", file=sys.stderr)
    return {**fit_stack(config, method, seeds[:half], begin), **fit_stack(config, method, seeds[half:], begin)}
