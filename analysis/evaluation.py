"""Test metrics of a fitted network as weights are removed by their scores (paper 003, Tables 2 and 5)."""
from bayesprune.predict import metric
from bayesprune.pruning import Budget, prune


def pruning_curve(fitted, dataset, *, droprates, device=None) -> list:
    """Test metric of the point estimate and, for a method with a posterior, of the Monte-Carlo predictive at each droprate.

    Args:
        fitted: a :class:`bayesprune.methods.Fitted`; its ``scores()`` rank the weights (lowest removed
            first) and its ``predictive_samples`` draws give the Monte-Carlo predictive.
        dataset: a :class:`bayesprune.data.Dataset`; its test split is scored.
        droprates: fractions of all weights to remove.

    Returns:
        One dict per droprate with ``droprate``, ``n_weights_kept`` and the metric under its name
        (``test_error`` in percent, or ``test_rmse``) for the point estimate, and with suffix ``_mc``
        for the Monte-Carlo predictive when ``fitted.predictive_samples > 0``.
    """
    name = metric_name(dataset.task)
    x = dataset.x_test.to(device) if device is not None else dataset.x_test
    scores = fitted.scores()
    evaluations = [("", 0)] + ([("_mc", fitted.predictive_samples)] if fitted.predictive_samples > 0 else [])
    rows = []
    for droprate in droprates:
        masks = prune(scores, Budget(fraction=droprate))
        row = {"droprate": droprate, "n_weights_kept": int(sum(mask.sum() for mask in masks.values()))}
        for suffix, samples in evaluations:
            prediction = fitted.predict(x, num_samples=samples, masks=masks).cpu()
            row[name + suffix] = metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std)
        rows.append(row)
    return rows


def metric_name(task: str) -> str:
    """``test_error`` (percent) for classification, ``test_rmse`` for regression."""
    return "test_error" if task == "classification" else "test_rmse"
