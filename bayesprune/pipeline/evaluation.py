"""Test metrics of a fitted network as weights are removed by their scores (paper 003, Tables 2 and 5)."""

from contextlib import nullcontext

import torch

from bayesprune.core.macs import resolve_macs
from bayesprune.core.predict import metric
from bayesprune.core.pruning import Budget, bias_sites, expand_unit_masks, prune, prune_each
from bayesprune.core.tasks import metric_name  # noqa: F401  (the run's metric, read from here by the pipeline)


def pruning_curve(
    fitted,
    dataset,
    *,
    sparsities,
    device=None,
    budget=None,
    include_biases=True,
    finetuned=None,
    predictive="every",
    unpruned_draws=None,
) -> list:
    """Test metric of the point estimate and, for a method with a posterior, of the Monte-Carlo predictive at each sparsity.

    Args:
        fitted: a :class:`bayesprune.methods.Fitted`; its ``scores()`` rank the weights (lowest removed
            first) and its ``predictive_samples`` draws give the Monte-Carlo predictive.
        dataset: a :class:`bayesprune.data.Dataset`; its test split is scored.
        sparsities: fractions of all weights (or units) to remove.
        budget: ``sparsity -> Budget`` (e.g. :meth:`bayesprune.pipeline.config.PruneConfig.budget`); by default
            the global weight-level ``Budget(sparsity=sparsity)``.
        include_biases: rank the biases with the weights (the sparsity is a fraction of all
            parameters); ``False`` keeps every bias and the sparsity is a fraction of the weights.
            Unit-level budgets remove a unit's bias with the unit either way.
        finetuned: ``masks -> metric``, the test metric of the point network fine-tuned with ``masks`` (parameter
            → bool, ``True`` = kept: the sparsity's, a unit's batch-norm entries, the network's own zeros) held fixed
            (:class:`bayesprune.pipeline.finetune.FineTunedMetrics`), reported as ``<metric>_finetuned``;
            ``None``: not fine-tuned.
        predictive: ``"every"`` evaluates the Monte-Carlo predictive at every sparsity; ``"unpruned"`` at
            sparsity 0 alone (``<metric>_mc`` is ``None`` at the others), the point estimate at every one.
        unpruned_draws: a :class:`~bayesprune.core.predict.DrawOutputs` that keeps the network's outputs under
            the Monte-Carlo predictive's draws at sparsity 0 (the unpruned model), for the posterior predictive
            of ``posterior.nc`` to reuse; ``None``: not kept.

    Returns:
        One dict per sparsity with ``droprate`` (the sparsity asked for, under the name the curve has always
        had, so that runs written before read alike), ``n_weights_kept`` (parameters kept, biases
        included), ``sparsity`` (the sparsity reached: 1 − kept / all parameters), ``sparsity_weights``
        (the same over the weights alone, biases left out of both counts; a parameter the network already holds at
        exactly zero, as a sparse method's does, counts as removed at every sparsity) and the metric under its name
        (``test_error`` in percent, or ``test_rmse``) for the point estimate, and with suffix ``_mc``
        for the Monte-Carlo predictive when ``fitted.predictive_samples > 0``.

    The scores are ranked once for every sparsity. Each masked network is scored through
    :meth:`~bayesprune.methods.Fitted.predictions`, so a network with batch norms is scored with
    statistics estimated again for it where ``fitted.calibration`` is set, once for its point estimate
    and its Monte-Carlo predictive (the full model, whose masks remove nothing, is scored unmasked with its
    own). A test split read on demand is scored a batch at a time (:func:`batched_predictions`).
    """
    name = metric_name(dataset.task)
    x = dataset.x_test.to(device) if device is not None else dataset.x_test
    scores = fitted.scores()
    biases = bias_sites(fitted.net) & set(fitted.sites)
    total = fitted.n_weights
    total_weights = total - sum(fitted.sites[name].numel() for name in biases)
    point = dict(fitted.network().named_parameters())
    zeros = {site: (point[site].detach() == 0).cpu() for site in fitted.sites}
    evaluations = [("", 0)] + ([("_mc", fitted.predictive_samples)] if fitted.predictive_samples > 0 else [])
    rules = [budget(sparsity) if budget is not None else Budget(sparsity=sparsity) for sparsity in sparsities]
    unit = rules[0].level == "unit" if rules else False
    ranked = scores if include_biases or unit else {k: v for k, v in scores.items() if k not in biases}
    rows = []
    for sparsity, masks in zip(sparsities, prune_each(ranked, rules, net=fitted.net)):
        if unit:
            masks = expand_unit_masks(fitted.net, masks)
        gone = {site: zero | ~masks[site].cpu() if site in masks else zero for site, zero in zeros.items()}
        removed = sum(int(site_gone.sum()) for site_gone in gone.values())
        removed_weights = sum(int(site_gone.sum()) for site, site_gone in gone.items() if site not in biases)
        row = {
            "droprate": sparsity,
            "n_weights_kept": total - removed,
            "sparsity": round(removed / total, 6),
            "sparsity_weights": round(removed_weights / total_weights, 6),
        }
        evaluated = evaluations if predictive == "every" or sparsity == 0 else evaluations[:1]
        removes = any(not bool(mask.all()) for mask in masks.values())  # else the same numbers unmasked, cheaper
        unpruned = sparsity == 0 and not removes
        with unpruned_draws.recording() if unpruned_draws is not None and unpruned else nullcontext():
            predictions = batched_predictions(
                fitted, x, masks=masks if removes else None, samples=[samples for _, samples in evaluated]
            )
        for suffix, _ in evaluations:
            row[name + suffix] = None
        for (suffix, _), prediction in zip(evaluated, predictions):
            row[name + suffix] = metric(dataset.task, prediction.cpu(), dataset.y_test, target_std=dataset.target_std)
        if finetuned is not None:
            kept = {site: ~site_gone for site, site_gone in gone.items() if site_gone.any()}
            row[name + "_finetuned"] = finetuned({**masks, **kept})  # with a unit's batch-norm entries
        rows.append(row)
    return rows


def macs_curve(fitted, dataset, *, targets, dense_macs: int, device=None, min_keep=None, finetuned=None) -> list:
    """Test metric of the point estimate at each MAC target: units removed by ``fitted``'s unit scores until
    the network costs at most ``target · dense_macs`` MACs on one input of ``dataset.input_shape``
    (:func:`bayesprune.core.macs.resolve_macs`, the floors of ``min_keep``; ``dense_macs``: the network the fit started from, which a fit that removes units
    while training has already made smaller).

    Returns:
        One dict per target with ``macs_target``, ``macs`` (the count of the network without those units,
        :func:`bayesprune.core.export.count_macs`), ``macs_fraction`` (of ``dense_macs``), ``units_removed``
        (of the units ``fitted.net`` has), the metric under its name and, with ``finetuned``, ``<metric>_finetuned``.
    """
    name = metric_name(dataset.task)
    x = dataset.x_test.to(device) if device is not None else dataset.x_test
    scores, rows = fitted.scores(), []
    for target in targets:
        budget = Budget(macs=target, dense_macs=dense_macs, level="unit", min_keep=min_keep)
        keep, macs = resolve_macs(scores, budget, fitted.net, input_shape=dataset.input_shape)
        masks = prune(scores, keep, net=fitted.net, input_shape=dataset.input_shape)
        units = sum(mask.numel() for mask in masks.values())
        removed = units - sum(int(mask.sum()) for mask in masks.values())
        weights = expand_unit_masks(fitted.net, masks)
        (prediction,) = batched_predictions(fitted, x, masks=weights if removed else None)
        row = {
            "macs_target": target,
            "macs": macs,
            "macs_fraction": round(macs / dense_macs, 6),
            "units_removed": round(removed / units, 6),
            name: metric(dataset.task, prediction.cpu(), dataset.y_test, target_std=dataset.target_std),
        }
        if finetuned is not None:
            row[name + "_finetuned"] = finetuned(weights)
        rows.append(row)
    return rows


def batched_predictions(fitted, x, *, masks=None, samples=(0,), batch_size: int = 4096) -> list:
    """``fitted.predictions(x, masks=masks, samples=samples)``, with ``x`` a tensor or rows read on demand
    (:class:`~bayesprune.data.streaming.Rows`, anything with ``batches(size)``), then predicted
    ``batch_size`` rows at a time, never held as one tensor.

    Every batch is predicted from the same state of torch's generator (put back before each), so each
    sees the same posterior draws and the predictions are those of the whole tensor, whose methods
    evaluate each draw in chunks of 4096 rows; the generator ends where the whole tensor leaves it.
    """
    if torch.is_tensor(x):
        return fitted.predictions(x, masks=masks, samples=samples)
    start = torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    parts = []
    for batch in x.batches(batch_size):
        torch.set_rng_state(start[0])
        if start[1] is not None:
            torch.cuda.set_rng_state_all(start[1])
        parts.append([prediction.cpu() for prediction in fitted.predictions(batch, masks=masks, samples=samples)])
    return [torch.cat(predictions) for predictions in zip(*parts)]


# The sparsity of a pruned classifier that stays within half a point of the full model's test error
# (the yardstick of paper 003's Tables 7 and 8).
ERROR_MARGIN = 0.5
ERROR_MARGIN_KEY = "sparsity_at_0.5_points_worse"


def first_sparsity_worse_by(curve: list, metric: str, margin: float, *, key: str = "sparsity"):
    """The ``key`` of the first point of ``curve`` (in sparsity order) whose ``metric`` exceeds the
    first point's (the full model's) by more than ``margin``; ``None`` if no point does."""
    full = curve[0][metric]
    return next((row[key] for row in curve if row[metric] > full + margin), None)
