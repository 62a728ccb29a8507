"""Tabular regression: standardising and building a regression :class:`Dataset` from arrays, and
the UCI benchmarks in the split format of Hernandez-Lobato and Adams (2015)."""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.data.options import _boolean, _directory, _integer
from bayesprune.data.registry import REGRESSION, Dataset, register_dataset

# Shared numeric steps.


def _standardize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardise ``train`` and ``test`` along axis 0 with the training mean and std.

    Columns that are constant on the training set (std zero up to rounding) are centred but
    left unscaled.

    Returns:
        ``(train, test, mean, std)`` with ``std`` the scale actually used.
    """
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 1e-12 * np.abs(mean), std, 1.0)
    return (train - mean) / std, (test - mean) / std, mean, std


def _regression_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    normalize: bool,
    feature_names: tuple[str, ...] | None = None,
    extras: dict | None = None,
    export_inputs: str | None = None,
) -> Dataset:
    """Build a tabular regression :class:`Dataset`, standardising inputs and targets if asked (the
    statistics kept in the dataset); ``export_inputs``: :attr:`Dataset.export_inputs`."""
    target_mean, target_std, scaling = 0.0, 1.0, {}
    if normalize:
        x_train, x_test, x_mean, x_std = _standardize(x_train, x_test)
        y_train, y_test, y_mean, y_std = _standardize(y_train, y_test)
        target_mean, target_std, scaling = float(y_mean), float(y_std), _input_scaling(x_mean, x_std)
    return Dataset(
        name=name,
        task=REGRESSION,
        x_train=torch.from_numpy(np.ascontiguousarray(x_train)).float(),
        y_train=torch.from_numpy(np.ascontiguousarray(y_train)).float(),
        x_test=torch.from_numpy(np.ascontiguousarray(x_test)).float(),
        y_test=torch.from_numpy(np.ascontiguousarray(y_test)).float(),
        input_shape=(x_train.shape[1],),
        num_classes=None,
        target_mean=target_mean,
        target_std=target_std,
        feature_names=feature_names,
        extras=extras or {},
        export_inputs=export_inputs,
        **scaling,
    )


def _input_scaling(mean: np.ndarray, std: np.ndarray) -> dict:
    """The :class:`Dataset` fields ``input_mean`` and ``input_std`` of :func:`_standardize`'s statistics."""
    return {
        "input_mean": torch.from_numpy(np.asarray(mean, dtype=np.float32)),
        "input_std": torch.from_numpy(np.asarray(std, dtype=np.float32)),
    }


def _feature_names(num_features: int) -> tuple[str, ...]:
    return tuple(f"x{j}" for j in range(num_features))


# UCI regression benchmarks in the Hernandez-Lobato and Adams (2015) split format.


def _uci_path(root, name: str, filename: str) -> str:
    path = os.path.join(root, name, filename)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    return path


def _read_table(path: str) -> np.ndarray:
    """Read whitespace-separated numbers, one row per non-blank line, as a 2-D float64 array."""
    rows = []
    # Undecodable bytes become U+FFFD, which then fails float() with the line number.
    with open(path, encoding="ascii", errors="replace") as f:
        for line_number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            try:
                row = [float(v) for v in fields]
            except ValueError:
                raise DataError(f"{path}: line {line_number} has a value that is not a number") from None
            if rows and len(row) != len(rows[0]):
                raise DataError(f"{path}: line {line_number} has {len(row)} values, expected {len(rows[0])}")
            if not all(map(math.isfinite, row)):
                raise DataError(f"{path}: line {line_number} has NaN or infinite values")
            rows.append(row)
    if not rows:
        raise DataError(f"{path}: no data")
    return np.array(rows)


def _read_indices(path: str, bound: int, what: str) -> np.ndarray:
    """Read 0-based indices below ``bound``, written as integers or integral floats like ``3.0``."""
    values = _read_table(path).ravel()
    if not np.all(values == np.round(values)):
        raise DataError(f"{path}: indices must be whole numbers")
    indices = values.astype(np.int64)
    bad = indices[(indices < 0) | (indices >= bound)]
    if bad.size:
        raise DataError(f"{path}: {what} index {bad[0]} out of range [0, {bound})")
    return indices


def uci_num_splits(root: str | os.PathLike, name: str) -> int:
    """Number of train/test splits of a UCI dataset, read from ``root/name/n_splits.txt``.

    Args:
        root: Directory with one folder per dataset.
        name: The dataset's folder, e.g. ``"bostonHousing"``.

    Returns:
        The number of splits.

    Raises:
        DataError: The file is missing or does not hold one positive integer.
    """
    path = _uci_path(root, name, "n_splits.txt")
    values = _read_table(path).ravel()
    if values.size != 1 or values[0] != round(values[0]) or values[0] < 1:
        raise DataError(f"{path}: expected one positive integer")
    return int(values[0])


@register_dataset("uci")
def load_uci(
    *,
    root: str | os.PathLike,
    name: str,
    split: int = 0,
    normalize: bool = True,
) -> Dataset:
    """A UCI regression benchmark in the standard split format (paper 003, Experiment 5, section 4.2).

    The format of Hernandez-Lobato and Adams (2015): ``root/name/`` holds ``data.txt``
    (whitespace-separated rows), ``index_features.txt`` and ``index_target.txt`` (0-based column
    indices), ``index_train_{split}.txt`` and ``index_test_{split}.txt`` (0-based row indices)
    and ``n_splits.txt``.

    Args:
        root: Directory with one folder per dataset.
        name: The dataset's folder, e.g. ``"bostonHousing"``.
        split: Which train/test split, in ``[0, n_splits)``.
        normalize: Standardise features and target with the training split's mean and std.

    Returns:
        A regression :class:`Dataset` named ``"uci/<name>"``.
    """
    root = _directory("root", root)
    if not isinstance(name, str) or not name:
        raise DataError(f"data.name must be a dataset folder name, got {name!r}")
    folder = os.path.join(root, name)
    if not os.path.isdir(folder):
        raise DataError(f"data.name: {folder} is not a directory")
    split = _integer("split", split, minimum=0)
    normalize = _boolean("normalize", normalize)
    num_splits = uci_num_splits(root, name)
    if split >= num_splits:
        raise DataError(f"data.split must be below {num_splits} (n_splits.txt of {folder}), got {split}")

    data = _read_table(_uci_path(root, name, "data.txt"))
    num_rows, num_columns = data.shape
    features = _read_indices(_uci_path(root, name, "index_features.txt"), num_columns, "column")
    target_path = _uci_path(root, name, "index_target.txt")
    target = _read_indices(target_path, num_columns, "column")
    if target.size != 1:
        raise DataError(f"{target_path}: expected one column index, got {target.size}")
    train = _read_indices(_uci_path(root, name, f"index_train_{split}.txt"), num_rows, "row")
    test = _read_indices(_uci_path(root, name, f"index_test_{split}.txt"), num_rows, "row")

    columns = [*features.tolist(), int(target[0])]
    with np.errstate(over="ignore", invalid="ignore"):
        spread = data[train][:, columns].std(axis=0)
    magnitude = np.abs(data[:, columns]).max(axis=0)
    bad = np.flatnonzero(~np.isfinite(spread) | (magnitude > np.finfo(np.float32).max))
    if bad.size:  # standardising or storing in float32 would turn the column into inf or NaN
        raise DataError(
            f"{_uci_path(root, name, 'data.txt')}: column {columns[bad[0]]} has values too large to use "
            f"(up to {magnitude[bad[0]]:.3g}; float32 holds up to 3.4e38)"
        )
    x, y = data[:, features], data[:, target[0]]
    return _regression_dataset(
        f"uci/{name}",
        x[train],
        y[train],
        x[test],
        y[test],
        normalize=normalize,
        feature_names=_feature_names(len(features)),
    )
