"""Test metrics of a fitted network as weights are removed by their scores (paper 003, Tables 2 and 5)."""
from bayesprune.predict import metric, predict
from bayesprune.pruning import global_masks


def pruning_curve(model, guide, dataset, *, scores: dict, droprates, num_samples: int, device=None) -> list:
    """Test metric of the posterior-mean network and of the Monte-Carlo predictive at each droprate.

    Args:
        model, guide: the fitted network and posterior.
        dataset: a :class:`bayesprune.data.Dataset`; its test split is scored.
        scores: site name → importance (e.g. inclusion probabilities); the lowest are removed first.
        droprates: fractions of all weights to remove.
        num_samples: draws W ~ q(W) for the Monte-Carlo predictive.

    Returns:
        One dict per droprate with ``droprate``, ``n_weights_kept`` and the metric under its name
        (``test_error`` in percent, or ``test_rmse``) for the posterior mean, and with suffix ``_mc``
        for the Monte-Carlo predictive.
    """
    name = metric_name(dataset.task)
    x = dataset.x_test.to(device) if device is not None else dataset.x_test
    rows = []
    for droprate in droprates:
        masks = global_masks(scores, droprate)
        row = {"droprate": droprate, "n_weights_kept": int(sum(mask.sum() for mask in masks.values()))}
        for suffix, samples in (("", 0), ("_mc", num_samples)):
            prediction = predict(model, guide, x, num_samples=samples, masks=masks).cpu()
            row[name + suffix] = metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std)
        rows.append(row)
    return rows


def metric_name(task: str) -> str:
    """``test_error`` (percent) for classification, ``test_rmse`` for regression."""
    return "test_error" if task == "classification" else "test_rmse"
