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

import csv
import dataclasses
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.files import check_plain_tree, read_npz
from bayesprune.core.validation import MAX_ELEMENTS
from bayesprune.data.options import _boolean, _choice, _directory, _file, _fraction, _integer
from bayesprune.data.registry import CLASSIFICATION, REGRESSION, Dataset, register_dataset
from bayesprune.data.streaming import ArrayItems, ImageFiles, Rows, augment_option
from bayesprune.data.tables import _input_scaling, _standardize

#: A CSV target of whole numbers with at most this many distinct values is taken for class labels
#: when ``data.task`` is left out.
MAX_INFERRED_CLASSES = 20

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
_NPZ_NAMES = ("feature_names", "class_names")


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# Checks and the shared build step.


def _check_finite(source: str, name: str, a: np.ndarray) -> None:
    """Refuse NaN, infinite values and values float32 cannot hold, naming the first bad row."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(a) | (np.abs(a) > _FLOAT32_MAX)
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
    _several_classes(source, k)
    return k


def _several_classes(source: str, k: int) -> None:
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


def _build(
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
        raise DataError(f"{path}: {_one_line(err)} (save numbers, or strings as a str array)") from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        with open(path, "rb") as handle:
            start = handle.read(6)
        if start == b"\x93NUMPY":
            raise DataError(
                f"{path}: holds one array (.npy), not an .npz archive of x_train, y_train, x_test and y_test"
            ) from None
        if start and not start.startswith(b"PK"):  # a pickle numpy would need to unpickle, or text
            raise DataError(f"{path}: not an .npz archive (numpy.savez); data files are never unpickled") from None
        raise DataError(f"{path}: cannot read it as an .npz archive ({_one_line(err)})") from None
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
    data = _build(
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


# csv: a table with a header line, one column of which is the target.


def _read_csv(option: str, value) -> tuple[str, list[str], list[list[str]], list[int]]:
    """``(path, header, rows, line numbers)`` of a CSV file; blank lines are skipped."""
    path = _file(option, value)
    header, rows, lines = None, [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                if header is None:
                    header = [cell.strip() for cell in row]
                    continue
                if len(row) != len(header):
                    raise DataError(
                        f"{path}: line {reader.line_num} has {len(row)} fields but the header has {len(header)}"
                    )
                rows.append([cell.strip() for cell in row])
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except csv.Error as err:
        raise DataError(f"{path}: line {reader.line_num}: {_one_line(err)}") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or _one_line(err)})") from None
    if header is None:
        raise DataError(f"{path}: empty (expected a header line naming the columns, then rows)")
    if not all(header):
        raise DataError(f"{path}: the header names no column {header.index('') + 1}")
    duplicate = next((name for i, name in enumerate(header) if name in header[:i]), None)
    if duplicate is not None:
        raise DataError(f"{path}: the header names column {duplicate!r} twice")
    if not rows:
        raise DataError(f"{path}: no rows after the header")
    return path, header, rows, lines


def _number(cell: str) -> float | None:
    """The number a cell holds, or ``None`` (Python's ``float`` also reads ``1_000`` and other scripts'
    digits, ``١٢``; a CSV does not)."""
    if "_" in cell or not cell.isascii():
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def _features(path: str, header: list[str], rows: list[list[str]], lines: list[int], columns: list[str]) -> np.ndarray:
    """The named columns as float64 ``(N, D)``, refusing a non-numeric, empty or non-finite cell."""
    x = np.empty((len(rows), len(columns)))
    for j, name in enumerate(columns):
        k = header.index(name)
        for i, row in enumerate(rows):
            value = _number(row[k])
            if value is None:
                what = "an empty cell" if not row[k] else f"{row[k]!r}"
                raise DataError(
                    f"{path}: column {name!r} is not numeric (line {lines[i]}: {what}); feature columns must hold numbers"
                )
            if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
                raise DataError(f"{path}: column {name!r} has a NaN, infinite or too large value on line {lines[i]}")
            x[i, j] = value
    return x


def _label_key(values: list[str]):
    """How labels compare: as numbers when every label is one (``1`` and ``1.0`` are one class), else as text."""
    if all(_number(v) is not None for v in values):
        return _number
    return str


def _class_name(label) -> str:
    if isinstance(label, float):
        return str(int(label)) if label == round(label) else format(label, "g")
    return label


def _csv_task(task, where: str, column: str, values: list[str], lines: list[int]) -> str:
    """The task given, or the one the target's values suggest (text or few whole numbers: classification)."""
    numbers = [_number(v) for v in values]
    text = next((i for i, n in enumerate(numbers) if n is None), None)
    if task is None:
        if text is not None:
            return CLASSIFICATION
        whole = all(math.isfinite(n) and n == round(n) for n in numbers)
        return CLASSIFICATION if whole and len(set(numbers)) <= MAX_INFERRED_CLASSES else REGRESSION
    if task == REGRESSION and text is not None:
        shown = repr(values[text]) if values[text] else "an empty cell"
        raise DataError(
            f"{where}: target column {column!r} is not numeric (line {lines[text]}: {shown}); data.task = 'regression' "
            "needs numbers"
        )
    return task


@register_dataset("csv")
def load_csv(
    *,
    path: str | os.PathLike | None = None,
    train: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    target: str,
    task: str | None = None,
    test_fraction: float | None = None,
    seed: int | None = None,
    normalize: bool = True,
) -> Dataset:
    """A CSV table: one file split at random, or a training and a test file.

    The first line names the columns. ``target`` is the target column; every other column is a
    numeric feature (named in ``feature_names``). Classes are the training target's distinct
    values in sorted order (numeric order for numbers), named in ``class_names``; a test value
    absent from training is refused.

    Args:
        path: One CSV file, split into train and test sets (or give ``train`` and ``test``).
        train: The training CSV file (with ``test``, instead of ``path``).
        test: The test CSV file, with the same columns as ``train``.
        target: The target column's name.
        task: ``"classification"`` or ``"regression"``. ``None``: classification for a target of
            text or of whole numbers with at most :data:`MAX_INFERRED_CLASSES` distinct values,
            regression otherwise.
        test_fraction: With ``path``: fraction of the rows held out, in ``(0, 1)`` (default 0.2).
        seed: With ``path``: seed of the split (default 0). The split is stratified by class for
            classification (as ``digits``) and a random permutation for regression (as the
            simulators).
        normalize: Standardise features and regression targets with the training split's mean
            and std.

    Returns:
        A :class:`Dataset` named ``"csv/<file name without .csv>"`` (of ``train`` for two files).
    """
    if not isinstance(target, str) or not target:
        raise DataError(f"data.target must be a column name, got {target!r}")
    task = None if task is None else _choice("task", task, (CLASSIFICATION, REGRESSION))
    normalize = _boolean("normalize", normalize)
    if path is not None and (train is not None or test is not None):
        raise DataError("data.path is one file split in two; give it or data.train and data.test, not both")
    if path is None:
        if train is None or test is None:
            missing = "path" if train is None and test is None else "test" if test is None else "train"
            raise DataError(
                f"data.{missing} is required for dataset 'csv' (give data.path, or data.train and data.test)"
            )
        for option, value in (("test_fraction", test_fraction), ("seed", seed)):
            if value is not None:
                raise DataError(f"data.{option} splits data.path; data.train and data.test are already split")
    test_fraction = 0.2 if test_fraction is None else _fraction("test_fraction", test_fraction)
    seed = 0 if seed is None else _integer("seed", seed, minimum=0)

    parts = [_read_csv("path", path)] if path is not None else [_read_csv("train", train), _read_csv("test", test)]
    first, header = parts[0][0], parts[0][1]
    if target not in header:
        numeric = all(_number(name) is not None for name in header)
        hint = "; the first line must name the columns" if numeric else ""
        raise DataError(f"data.target: no column {target!r} in {first} (columns: {', '.join(header)}){hint}")
    if len(parts) == 2:
        other, other_header = parts[1][0], parts[1][1]
        if set(other_header) != set(header):
            name = next(iter(sorted(set(header) - set(other_header)) or sorted(set(other_header) - set(header))))
            where = other if name in header else first
            raise DataError(f"{other}: columns differ from {first}'s ({where} lacks column {name!r})")
    columns = [name for name in header if name != target]
    if not columns:
        raise DataError(f"{first}: no feature column besides the target {target!r}")

    xs, ys, sources = [], [], []
    for source, part_header, rows, lines in parts:
        xs.append(_features(source, part_header, rows, lines, columns))
        k = part_header.index(target)
        values = [row[k] for row in rows]
        empty = next((i for i, v in enumerate(values) if not v), None)
        if empty is not None:
            raise DataError(f"{source}: target column {target!r} has an empty cell on line {lines[empty]}")
        ys.append((values, lines))
        sources.append(source)
    task = _csv_task(
        task, first, target, [v for values, _ in ys for v in values], [n for _, lines in ys for n in lines]
    )

    class_names = num_classes = None
    if task == CLASSIFICATION:
        for (values, lines), source in zip(ys, sources):
            bad = next(
                (i for i, v in enumerate(values) if _number(v) is not None and not math.isfinite(_number(v))), None
            )
            if bad is not None:
                raise DataError(
                    f"{source}: target column {target!r} has the label {values[bad]!r} on line {lines[bad]}; "
                    "a class label must be finite"
                )
        key = _label_key([v for values, _ in ys for v in values])
        classes = sorted({key(v) for v in ys[0][0]})  # numeric order for numbers, text order otherwise
        index = {label: i for i, label in enumerate(classes)}
        num_classes, class_names = len(classes), tuple(_class_name(c) for c in classes)
        _several_classes(sources[0], num_classes)
        for (values, lines), source in zip(ys[1:], sources[1:]):
            unknown = next((i for i, v in enumerate(values) if key(v) not in index), None)
            if unknown is not None:
                raise DataError(
                    f"{source}: line {lines[unknown]} has class {values[unknown]!r}, which {sources[0]} never has "
                    f"(classes: {', '.join(class_names[:10])}{', ...' if num_classes > 10 else ''})"
                )
        targets = [np.array([index[key(v)] for v in values], dtype=np.int64) for values, _ in ys]
    else:
        targets = []
        for (values, lines), source in zip(ys, sources):
            y = np.array([float(v) for v in values])
            bad = np.flatnonzero(~np.isfinite(y) | (np.abs(y) > _FLOAT32_MAX))
            if bad.size:
                raise DataError(
                    f"{source}: target column {target!r} has a NaN, infinite or too large value on line {lines[bad[0]]}"
                )
            targets.append(y)

    if len(parts) == 2:
        (x_train, x_test), (y_train, y_test) = xs, targets
    else:
        x, y = xs[0], targets[0]
        n = x.shape[0]
        if task == CLASSIFICATION:
            from sklearn.model_selection import train_test_split

            counts = np.bincount(y, minlength=num_classes)
            if counts.min() < 2:
                raise DataError(
                    f"{first}: class {class_names[int(counts.argmin())]!r} has one row; the split by data.test_fraction "
                    "is stratified by class and needs two (give data.train and data.test instead)"
                )
            try:
                train_rows, test_rows = train_test_split(
                    np.arange(n), test_size=test_fraction, random_state=seed, stratify=y
                )
            except ValueError as err:
                raise DataError(
                    f"data.test_fraction={test_fraction!r} gives no stratified split of the {n} rows of {first}: "
                    f"{_one_line(err)}"
                ) from None
        else:
            num_test = round(n * test_fraction)
            if not 0 < num_test < n:
                raise DataError(
                    f"data.test_fraction={test_fraction!r} leaves an empty train or test set of the {n} rows of {first}"
                )
            order = np.random.default_rng(seed).permutation(n)
            train_rows, test_rows = order[num_test:], order[:num_test]
        x_train, x_test, y_train, y_test = x[train_rows], x[test_rows], y[train_rows], y[test_rows]
    return _build(
        f"csv/{Path(first).stem}",
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=num_classes,
        normalize_inputs=normalize,
        normalize_targets=normalize,
        feature_names=tuple(columns),
        class_names=class_names,
    )


# image-folder: torchvision's ImageFolder layout, root/{train,test}/<class>/<image>.


def _image_size(size) -> tuple[int, int] | None:
    if size is None:
        return None
    pair = [size, size] if not isinstance(size, (list, tuple)) else list(size)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise DataError(f"data.size must be a positive integer or [height, width], got {size!r}")
    return pair[0], pair[1]


def _image_folder(root: str, part: str, transform):
    from torchvision.datasets import ImageFolder

    folder = os.path.join(root, part)
    if not os.path.isdir(folder):
        raise DataError(
            f"data.root: {folder} is not a directory (expected {part}/<class>/<image>, torchvision's ImageFolder layout)"
        )
    check_plain_tree(folder)
    try:
        return ImageFolder(folder, transform=transform)
    except OSError as err:  # no class folder, or a class folder without images
        raise DataError(f"{folder}: {_one_line(err)}") from None


def _read_images(images, shape: list) -> torch.Tensor:
    """Every image of an ImageFolder as one tensor, refusing an unreadable one or one of another size."""
    from PIL import Image

    tensors = []
    for i, (path, _) in enumerate(images.samples):
        try:
            x, _ = images[i]
        except Image.UnidentifiedImageError:
            raise DataError(f"{path}: cannot read the image (not a format Pillow reads)") from None
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DataError(f"{path}: cannot read the image ({_one_line(err)})") from None
        if not shape:
            shape.extend([tuple(x.shape), path])
        elif tuple(x.shape) != shape[0]:
            (c, h, w), (c0, h0, w0) = x.shape, shape[0]
            raise DataError(
                f"{path}: image is {h}x{w} with {c} channels but {shape[1]} is {h0}x{w0} with {c0}; "
                "set data.size to resize every image"
            )
        tensors.append(x)
    return torch.stack(tensors)


@register_dataset("image-folder")
def load_image_folder(
    *,
    root: str | os.PathLike,
    size: int | list[int] | None = None,
    grayscale: bool = False,
    stream: bool = False,
    workers: int = 0,
    augment: list[str] | None = None,
    crop_padding: int | None = None,
) -> Dataset:
    """Images in torchvision's ``ImageFolder`` layout: ``root/train/<class>/*`` and ``root/test/<class>/*``.

    Read with :class:`torchvision.datasets.ImageFolder` (RGB) and its transforms into ``(C, H, W)``
    float tensors in ``[0, 1]``, held in memory (the training ones left on disk with ``stream``). The
    classes are ``train``'s class folders in sorted order, named in ``class_names``; ``test`` may hold a
    subset of them, and a test class that ``train`` lacks is refused.

    Args:
        root: Directory holding ``train/`` and ``test/``.
        size: ``[height, width]`` (or one int for a square) every image is resized to; ``None``:
            keep the sizes, which must then all agree.
        grayscale: One luminance channel instead of three (RGB).
        stream: Leave the training images on disk: ``x_train`` is
            :class:`~bayesprune.data.streaming.Rows` decoding each minibatch's files as it is needed
            (the test images are still read into memory).
        workers: With ``stream``: processes decoding the files (0: the training process).
        augment: ``["crop", "flip"]`` or either: the training minibatches' augmentation
            (:class:`~bayesprune.data.streaming.Augment`); off by default.
        crop_padding: zeros added on each side before the random crop (default 4).

    Returns:
        A classification :class:`Dataset` named ``"image-folder/<root's name>"``.
    """
    from torchvision import transforms

    root = _directory("root", root)
    size = _image_size(size)
    grayscale = _boolean("grayscale", grayscale)
    stream = _boolean("stream", stream)
    workers = _integer("workers", workers, minimum=0)
    if workers and not stream:
        raise DataError("data.workers decode the files of data.stream = true; it is false")
    steps = [transforms.Grayscale(num_output_channels=1)] if grayscale else []
    if size is not None:
        steps.append(transforms.Resize(size))
    transform = transforms.Compose([*steps, transforms.ToTensor()])
    train = _image_folder(root, "train", transform)
    test = _image_folder(root, "test", transform)
    unknown = [name for name in test.classes if name not in train.class_to_idx]
    if unknown:
        raise DataError(
            f"{os.path.join(root, 'test', unknown[0])}: class {unknown[0]!r} has no folder in "
            f"{os.path.join(root, 'train')} (classes: {', '.join(train.classes)})"
        )
    _several_classes(os.path.join(root, "train"), len(train.classes))
    held = len(test.samples) + (0 if stream else len(train.samples))
    if size is not None:
        values = held * (1 if grayscale else 3) * size[0] * size[1]
        if values > MAX_ELEMENTS:
            raise DataError(
                f"data.size {list(size)}: {held} images of that size hold "
                f"{values:,} values, more than {MAX_ELEMENTS:,} (data.stream = true leaves the training images on disk)"
            )
    shape: list = []
    if stream:  # every file's header checked now, the pixels decoded when a batch is read
        test_files = ImageFiles(test.samples, transform)
        shape.extend([tuple(test_files[0].shape), test.samples[0][0]])
        test_files.check(None if size is not None else shape[0][1:])
        x_test = Rows(test_files, shape[0], where=os.path.join(root, "test"), workers=workers)
    else:
        x_test = _read_images(test, shape)
    augmentation = augment_option(augment, crop_padding, shape[0], f"image-folder {root}")
    if stream:
        folder = os.path.join(root, "train")
        files = ImageFiles(train.samples, transform)
        files.check(None if size is not None else shape[0][1:])
        x_train = Rows(files, shape[0], where=folder, workers=workers)
    else:
        x_train = _read_images(train, shape)
    to_train = torch.tensor([train.class_to_idx[name] for name in test.classes], dtype=torch.int64)
    return Dataset(
        name=f"image-folder/{Path(root).resolve().name}",
        task=CLASSIFICATION,
        x_train=x_train,
        y_train=torch.tensor(train.targets, dtype=torch.int64),
        x_test=x_test,
        y_test=to_train[torch.tensor(test.targets, dtype=torch.int64)],
        input_shape=tuple(x_train.shape[1:]),
        num_classes=len(train.classes),
        class_names=tuple(train.classes),
        augment=augmentation,
    )
