"""The user's own data: arrays in an ``.npz`` archive, a CSV table, or a folder of images.

Each loader is reached from a config (``[data]`` with ``dataset = "npz"`` and ``path = "..."``) or
from Python (``load_dataset("npz", path="...")``):

- ``npz`` (:func:`load_npz`): ``data.path``, an archive written by :func:`numpy.savez` with the
  arrays ``x_train``, ``y_train``, ``x_test`` and ``y_test`` (optionally ``feature_names`` and
  ``class_names``, string arrays). Integer (or boolean) targets are class labels ``0..K-1``, ``K``
  the largest label plus one over both splits, every class with a training example; floating
  targets are regression. Inputs keep their shape: ``(N, D)`` tables, ``(N, C, H, W)`` images.
  The file is read with ``allow_pickle=False``: an object array is refused, never unpickled.
- ``csv`` (:func:`load_csv`): one table ``data.path`` split by ``data.test_fraction`` (default
  0.2) with ``data.seed`` (stratified by class for classification, as ``digits``; a random
  permutation for regression, as the simulators), or two tables ``data.train`` and ``data.test``
  with the same columns. The first line names the columns; ``data.target`` names the target and
  every other column is a numeric feature. ``data.task`` is ``"classification"`` or
  ``"regression"``; left out, a target of text or of whole numbers with at most
  :data:`MAX_INFERRED_CLASSES` distinct values is classification, any other numeric target
  regression. The classes are the training target's distinct values in sorted order (numeric order
  for numbers), kept as :attr:`~bayesprune.data.Dataset.class_names`.
- ``image-folder`` (:func:`load_image_folder`): ``data.root`` holding ``train/`` and ``test/`` in
  torchvision's :class:`~torchvision.datasets.ImageFolder` layout (``train/<class>/<image>``),
  read with torchvision into memory. The classes are the training folder's class folders in sorted
  order (the test folder may hold a subset). ``data.size`` (``[height, width]``, or one int for a
  square) resizes every image; ``data.grayscale`` keeps one channel instead of three. Pixels lie in
  ``[0, 1]``, as in the built-in image sets. ``data.stream = true`` leaves the training images on disk,
  decoded a minibatch at a time in ``data.workers`` processes (:mod:`~bayesprune.data.streaming`).

``data.augment`` (``image-folder``, ``npz`` images) lists ``"crop"`` (after ``data.crop_padding`` zeros,
default 4) and ``"flip"``: the augmentation of the training minibatches
(:class:`~bayesprune.data.streaming.Augment`), refused for inputs that are not images.

``data.normalize`` (``npz``, ``csv``) standardises with the training split's mean and standard
deviation, as the UCI loader's option of that name: the inputs, per feature (per pixel for images),
and regression targets; the statistics are kept (``input_mean``, ``input_std``, ``target_mean``,
``target_std``: :mod:`bayesprune.core.preprocessing`), so that an export takes raw rows and gives the
target's units. Its default is true for tables; for ``npz`` inputs of another shape (images) it leaves
the inputs as given and standardises only regression targets.

Every defect (a missing file or array, an unreadable file, mismatched rows or shapes, NaN or
infinite values, labels that are not ``0..K-1``, a single class, an empty split, a non-numeric feature
column, a test class the training split lacks, a symbolic link or anything but a regular file in an
image folder) is one :class:`~bayesprune.core.errors.DataError` line naming the file or the option.
"""

from __future__ import annotations

import dataclasses
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.files import read_npz
from bayesprune.data.options import _boolean, _file
from bayesprune.data.registry import CLASSIFICATION, REGRESSION, Dataset, register_dataset
from bayesprune.data.streaming import ArrayItems, Rows, augment_option
from bayesprune.data.tables import _input_scaling, _standardize

#: A CSV target of whole numbers with at most this many distinct values is taken for class labels
#: when ``data.task`` is left out.
MAX_INFERRED_CLASSES = 20


FLOAT32_MAX = float(np.finfo(np.float32).max)


_NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


_NPZ_NAMES = ("feature_names", "class_names")


def error_text(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# Checks and the shared build step.


def _check_finite(source: str, name: str, a: np.ndarray) -> None:
    """Refuse NaN, infinite values and values float32 cannot hold, naming the first bad row."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(a) | (np.abs(a) > FLOAT32_MAX)
    rows = np.flatnonzero(bad.reshape(a.shape[0], -1).any(axis=1))
    if rows.size:
        what = "NaN or infinite values" if not np.isfinite(a).all() else "values beyond float32's range (3.4e38)"
        raise DataError(f"{source}: {name} has {what}, first in row {rows[0]}")


def _inputs(source: str, name: str, x: np.ndarray) -> np.ndarray:
    """Check a numeric array of shape ``(N, ...)`` with ``N >= 1`` and finite values; return it unchanged."""
    if x.dtype.kind not in "biuf":
        raise DataError(f"{source}: {name} has dtype {x.dtype}; inputs must be numbers")
    if x.ndim < 2:
        raise DataError(
            f"{source}: {name} has shape {x.shape}; inputs need a row per example and at least one more "
            "axis, e.g. (N, D) or (N, C, H, W)"
        )
    if x.shape[0] == 0:
        raise DataError(f"{source}: {name} is empty (no rows)")
    if math.prod(x.shape[1:]) == 0:
        raise DataError(f"{source}: {name} has shape {x.shape}: no feature in a row")
    if x.dtype.kind == "f" and not isinstance(x, np.memmap):  # a memory map's rows are checked as read
        _check_finite(source, name, x)
    return x


def _targets(source: str, name: str, y: np.ndarray, rows: int, x_name: str) -> np.ndarray:
    """One numeric target per input row: shape ``(N,)`` (or ``(N, 1)``, flattened)."""
    if y.dtype.kind not in "biuf":
        raise DataError(f"{source}: {name} has dtype {y.dtype}; targets must be numbers")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataError(f"{source}: {name} has shape {y.shape}, expected ({rows},): one target per row of {x_name}")
    if y.shape[0] != rows:
        raise DataError(f"{source}: {name} has {y.shape[0]} rows but {x_name} has {rows}")
    if y.dtype.kind == "f":
        _check_finite(source, name, y)
    return y


def _num_classes(source: str, y_train: np.ndarray, y_test: np.ndarray, hint: str = "") -> int:
    """``K`` for labels ``0..K-1``: the largest label plus one over both splits, every class in training."""
    for name, y in (("y_train", y_train), ("y_test", y_test)):
        if y.min() < 0:
            raise DataError(f"{source}: {name} has label {int(y.min())}; class labels must be 0..K-1{hint}")
    k = int(max(y_train.max(), y_test.max())) + 1
    present = np.unique(y_train)
    gaps = np.flatnonzero(present != np.arange(present.size))
    missing = int(gaps[0]) if gaps.size else present.size
    if missing < k:
        raise DataError(
            f"{source}: y_train has no example of class {missing}; labels must be 0..K-1 with every class "
            f"in the training split (K = {k}, the largest label + 1){hint}"
        )
    several_classes(source, k)
    return k


def several_classes(source: str, k: int) -> None:
    """Refuse ``k`` < 2 classes: a classifier of one class learns nothing and is always right."""
    if k < 2:
        raise DataError(
            f"{source}: the targets hold one class only; a classifier needs two or more "
            "(numeric targets of a regression: set data.task = 'regression')"
        )


def _names(source: str, name: str, values, expected: int, what: str) -> tuple[str, ...]:
    if values.dtype.kind not in "US" or values.ndim != 1 or values.shape[0] != expected:
        raise DataError(
            f"{source}: {name} must be {expected} strings, one per {what}; got dtype {values.dtype} and shape {values.shape}"
        )
    return tuple(str(v.decode() if isinstance(v, bytes) else v) for v in values)


def build_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    num_classes: int | None,
    normalize_inputs: bool,
    normalize_targets: bool,
    feature_names: tuple[str, ...] | None = None,
    class_names: tuple[str, ...] | None = None,
) -> Dataset:
    """The :class:`Dataset` of checked numeric inputs and targets (``num_classes`` None: regression).

    Standardising works in float64; inputs left as given go to float32 directly (no float64 copy of
    a large image set).
    """
    target_mean, target_std, scaling = 0.0, 1.0, {}
    if normalize_inputs:
        x_train, x_test, x_mean, x_std = _standardize(x_train.astype(np.float64), x_test.astype(np.float64))
        scaling = _input_scaling(x_mean, x_std)
    if num_classes is None:
        y_train, y_test = y_train.astype(np.float64), y_test.astype(np.float64)
        if normalize_targets:
            y_train, y_test, y_mean, y_std = _standardize(y_train, y_test)
            target_mean, target_std = float(y_mean), float(y_std)
        labels = {"y_train": torch.from_numpy(y_train).float(), "y_test": torch.from_numpy(y_test).float()}
    else:
        labels = {
            "y_train": torch.from_numpy(y_train.astype(np.int64)),
            "y_test": torch.from_numpy(y_test.astype(np.int64)),
        }
    return Dataset(
        name=name,
        task=REGRESSION if num_classes is None else CLASSIFICATION,
        x_train=torch.from_numpy(np.ascontiguousarray(x_train, dtype=np.float32)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_test, dtype=np.float32)),
        input_shape=tuple(x_train.shape[1:]),
        num_classes=num_classes,
        target_mean=target_mean,
        target_std=target_std,
        feature_names=feature_names,
        class_names=class_names,
        **labels,
        **scaling,
    )


# npz: four arrays written by numpy.savez.


def _npz_arrays(path: str, mapped=()) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, read without unpickling and headers checked (:func:`~bayesprune.core.files.read_npz`)."""
    try:
        arrays = read_npz(path, mapped=mapped)
    except ValueError as err:
        raise DataError(f"{path}: {error_text(err)} (save numbers, or strings as a str array)") from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        with open(path, "rb") as handle:
            start = handle.read(6)
        if start == b"\x93NUMPY":
            raise DataError(
                f"{path}: holds one array (.npy), not an .npz archive of x_train, y_train, x_test and y_test"
            ) from None
        if start and not start.startswith(b"PK"):  # a pickle numpy would need to unpickle, or text
            raise DataError(f"{path}: not an .npz archive (numpy.savez); data files are never unpickled") from None
        raise DataError(f"{path}: cannot read it as an .npz archive ({error_text(err)})") from None
    names = list(arrays)
    missing = [n for n in _NPZ_ARRAYS if n not in names]
    if missing:
        raise DataError(
            f"{path}: no array {missing[0]!r} (expected x_train, y_train, x_test and y_test; "
            f"found {', '.join(names) or 'none'})"
        )
    unknown = [n for n in names if n not in _NPZ_ARRAYS + _NPZ_NAMES]
    if unknown:
        raise DataError(f"{path}: unexpected array {unknown[0]!r} (known: {', '.join(_NPZ_ARRAYS + _NPZ_NAMES)})")
    return arrays


@register_dataset("npz")
def load_npz(
    *,
    path: str | os.PathLike,
    normalize: bool | None = None,
    stream: bool = False,
    augment: list[str] | None = None,
    crop_padding: int | None = None,
) -> Dataset:
    """Arrays ``x_train``, ``y_train``, ``x_test``, ``y_test`` of an ``.npz`` archive (:func:`numpy.savez`).

    Integer or boolean targets are class labels ``0..K-1`` (``K`` the largest label plus one over
    both splits; every class must have a training example); floating targets are regression. Inputs
    keep their shape (``input_shape`` is ``x_train.shape[1:]``). Optional string arrays
    ``feature_names`` (one per column of 2-d inputs) and ``class_names`` (one per class) are kept;
    any other array is refused. Read with ``allow_pickle=False``.

    Args:
        path: The ``.npz`` file.
        normalize: Standardise inputs and regression targets with the training split's mean and
            std. ``None``: true for ``(N, D)`` inputs; for other shapes only regression targets
            are standardised and the inputs are kept as given.
        stream: Memory-map ``x_train`` (stored uncompressed, as :func:`numpy.savez` writes it): rows
            are read from the file a minibatch at a time (:class:`~bayesprune.data.streaming.Rows`),
            never standardised.
        augment: for images ``(N, C, H, W)``: ``["crop", "flip"]`` or either, the training minibatches'
            augmentation (:class:`~bayesprune.data.streaming.Augment`); off by default.
        crop_padding: zeros added on each side before the random crop (default 4).

    Returns:
        A :class:`Dataset` named ``"npz/<file name without .npz>"``.
    """
    path = _file("path", path)
    normalize = None if normalize is None else _boolean("normalize", normalize)
    stream = _boolean("stream", stream)
    arrays = _npz_arrays(path, mapped=("x_train",) if stream else ())
    x_train = _inputs(path, "x_train", arrays["x_train"])
    x_test = _inputs(path, "x_test", arrays["x_test"])
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(f"{path}: x_test has example shape {x_test.shape[1:]} but x_train has {x_train.shape[1:]}")
    augmentation = augment_option(augment, crop_padding, x_train.shape[1:], path)
    y_train = _targets(path, "y_train", arrays["y_train"], x_train.shape[0], "x_train")
    y_test = _targets(path, "y_test", arrays["y_test"], x_test.shape[0], "x_test")
    kinds = {y_train.dtype.kind == "f", y_test.dtype.kind == "f"}
    if len(kinds) == 2:
        raise DataError(
            f"{path}: y_train has dtype {y_train.dtype} but y_test {y_test.dtype}; integer targets are class "
            "labels and floating ones regression, so both must be one or the other"
        )
    classification = kinds == {False}
    num_classes = (
        _num_classes(path, y_train, y_test, "; save floating targets for regression") if classification else None
    )
    feature_names = class_names = None
    if "feature_names" in arrays:
        if x_train.ndim != 2:
            raise DataError(
                f"{path}: feature_names given for inputs of shape {x_train.shape}; they name the columns of (N, D) inputs"
            )
        feature_names = _names(path, "feature_names", arrays["feature_names"], x_train.shape[1], "column of x_train")
    if "class_names" in arrays:
        if not classification:
            raise DataError(f"{path}: class_names given for floating (regression) targets")
        class_names = _names(path, "class_names", arrays["class_names"], num_classes, "class")
    tabular = x_train.ndim == 2
    normalize_inputs = tabular if normalize is None else normalize
    if stream and normalize_inputs:
        raise DataError(
            f"data.normalize standardises x_train of {path} as a whole, and data.stream reads it a minibatch at a "
            "time: set data.normalize = false (and standardise the file's inputs yourself)"
        )
    data = build_dataset(
        f"npz/{Path(path).stem}",
        np.array(x_train[:1]) if stream else x_train,
        y_train,
        x_test,
        y_test,
        num_classes=num_classes,
        normalize_inputs=normalize_inputs,
        normalize_targets=True if normalize is None else normalize,
        feature_names=feature_names,
        class_names=class_names,
    )
    if stream:
        data = dataclasses.replace(data, x_train=Rows(ArrayItems(x_train), x_train.shape[1:], where=f"{path}: x_train"))
    return dataclasses.replace(data, augment=augmentation)
