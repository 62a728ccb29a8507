"""The user's CSV tables (``data.dataset = "csv"``, :mod:`bayesprune.data.user` describes the format):
the columns read, the task inferred, the targets and the split."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np

from bayesprune.core.errors import DataError
from bayesprune.data.options import _boolean, _choice, _file, _fraction, _integer
from bayesprune.data.registry import CLASSIFICATION, REGRESSION, Dataset, register_dataset
from bayesprune.data.user import FLOAT32_MAX, MAX_INFERRED_CLASSES, build_dataset, error_text, several_classes

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
        raise DataError(f"{path}: line {reader.line_num}: {error_text(err)}") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or error_text(err)})") from None
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
            if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
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


def _check_csv_files(path, train, test, test_fraction, seed) -> None:
    """Refuse ``data.path`` beside ``data.train``/``data.test``, one of these two alone, or a split's options
    beside two files that are already split."""
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


def _class_targets(ys: list, sources: list, target: str) -> tuple:
    """Each part's class indices and the class names: the training part's distinct values in sorted order
    (numeric order for numbers); a label that is not finite, or a test class training lacks, refused."""
    for (values, lines), source in zip(ys, sources):
        bad = next((i for i, v in enumerate(values) if _number(v) is not None and not math.isfinite(_number(v))), None)
        if bad is not None:
            raise DataError(
                f"{source}: target column {target!r} has the label {values[bad]!r} on line {lines[bad]}; "
                "a class label must be finite"
            )
    key = _label_key([v for values, _ in ys for v in values])
    classes = sorted({key(v) for v in ys[0][0]})  # numeric order for numbers, text order otherwise
    index = {label: i for i, label in enumerate(classes)}
    num_classes, class_names = len(classes), tuple(_class_name(c) for c in classes)
    several_classes(sources[0], num_classes)
    for (values, lines), source in zip(ys[1:], sources[1:]):
        unknown = next((i for i, v in enumerate(values) if key(v) not in index), None)
        if unknown is not None:
            raise DataError(
                f"{source}: line {lines[unknown]} has class {values[unknown]!r}, which {sources[0]} never has "
                f"(classes: {', '.join(class_names[:10])}{', ...' if num_classes > 10 else ''})"
            )
    return [np.array([index[key(v)] for v in values], dtype=np.int64) for values, _ in ys], class_names


def _regression_targets(ys: list, sources: list, target: str) -> list:
    """Each part's targets as floats; a NaN, infinite or beyond-float32 value refused, naming its line."""
    targets = []
    for (values, lines), source in zip(ys, sources):
        y = np.array([float(v) for v in values])
        bad = np.flatnonzero(~np.isfinite(y) | (np.abs(y) > FLOAT32_MAX))
        if bad.size:
            raise DataError(
                f"{source}: target column {target!r} has a NaN, infinite or too large value on line {lines[bad[0]]}"
            )
        targets.append(y)
    return targets


def _split_csv(x, y, task: str, test_fraction: float, seed: int, first: str, class_names) -> tuple:
    """``(x_train, y_train, x_test, y_test)`` of one table: stratified by class for classification (as
    ``digits``), a random permutation for regression (as the simulators)."""
    n = x.shape[0]
    if task == CLASSIFICATION:
        from sklearn.model_selection import train_test_split

        counts = np.bincount(y, minlength=len(class_names))
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
                f"{error_text(err)}"
            ) from None
    else:
        num_test = round(n * test_fraction)
        if not 0 < num_test < n:
            raise DataError(
                f"data.test_fraction={test_fraction!r} leaves an empty train or test set of the {n} rows of {first}"
            )
        order = np.random.default_rng(seed).permutation(n)
        train_rows, test_rows = order[num_test:], order[:num_test]
    return x[train_rows], y[train_rows], x[test_rows], y[test_rows]


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
    _check_csv_files(path, train, test, test_fraction, seed)
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

    if task == CLASSIFICATION:
        targets, class_names = _class_targets(ys, sources, target)
        num_classes = len(class_names)
    else:
        targets, class_names, num_classes = _regression_targets(ys, sources, target), None, None

    if len(parts) == 2:
        (x_train, x_test), (y_train, y_test) = xs, targets
    else:
        x_train, y_train, x_test, y_test = _split_csv(xs[0], targets[0], task, test_fraction, seed, first, class_names)
    return build_dataset(
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
