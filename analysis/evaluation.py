"""Test metrics of a fitted network as weights are removed by their scores (paper 003, Tables 2 and 5)."""
from bayesprune.predict import metric
from bayesprune.pruning import Budget, expand_unit_masks, prune


def pruning_curve(fitted, dataset, *, droprates, device=None, budget=None) -> list:
    """Test metric of the point estimate and, for a method with a posterior, of the Monte-Carlo predictive at each droprate.

    Args:
        fitted: a :class:`bayesprune.methods.Fitted`; its ``scores()`` rank the weights (lowest removed
            first) and its ``predictive_samples`` draws give the Monte-Carlo predictive.
        dataset: a :class:`bayesprune.data.Dataset`; its test split is scored.
        droprates: fractions of all weights (or units) to remove.
        budget: ``droprate -> Budget`` (e.g. :meth:`bayesprune.config.PruneConfig.budget`); by default
            the global weight-level ``Budget(fraction=droprate)``.

    Returns:
        One dict per droprate with ``droprate``, ``n_weights_kept`` and the metric under its name
        (``test_error`` in percent, or ``test_rmse``) for the point estimate, and with suffix ``_mc``
        for the Monte-Carlo predictive when ``fitted.predictive_samples > 0``.
    """
    name = metric_name(dataset.task)
    x = dataset.x_test.to(device) if device is not None else dataset.x_test
    scores = fitted.scores()
    total = sum(shape.numel() for shape in fitted.sites.values())
    evaluations = [("", 0)] + ([("_mc", fitted.predictive_samples)] if fitted.predictive_samples > 0 else [])
    rows = []
    for droprate in droprates:
        rule = budget(droprate) if budget is not None else Budget(fraction=droprate)
        masks = prune(scores, rule, net=fitted.net)
        if rule.level == "unit":
            masks = expand_unit_masks(fitted.net, masks)
        removed = sum(int((~mask).sum()) for mask in masks.values())
        row = {"droprate": droprate, "n_weights_kept": total - removed}
        for suffix, samples in evaluations:
            prediction = fitted.predict(x, num_samples=samples, masks=masks).cpu()
            row[name + suffix] = metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std)
        rows.append(row)
    return rows


def metric_name(task: str) -> str:
    """``test_error`` (percent) for classification, ``test_rmse`` for regression."""
    return "test_error" if task == "classification" else "test_rmse"
