"""Image datasets: scikit-learn's digits, MNIST-like folders in torchvision's layout (Fashion-MNIST)
and CIFAR-10's python batches, read with :class:`NumpyOnlyUnpickler`. MNIST itself is in
:mod:`bayesprune.data.mnist`."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from collections.abc import Sequence

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.preprocessing import Pixels
from bayesprune.data.options import _boolean, _choice, _directory, _fraction, _integer, _optional_positive_integer
from bayesprune.data.registry import CLASSIFICATION, Dataset, register_dataset

# scikit-learn digits.


@register_dataset("digits")
def load_digits(*, test_fraction: float = 0.2, seed: int = 0, flatten: bool = False, shape: str = "1x8x8") -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes; no network).

    Pixels are divided by 16 to lie in ``[0, 1]`` (:class:`~bayesprune.core.preprocessing.Pixels`, which an
    export applies inside its file: it takes the values 0-16). The split is stratified by class.

    Args:
        test_fraction: Fraction of the images held out for testing, in ``(0, 1)``.
        seed: Seed of the split.
        flatten: Give inputs of shape ``(64,)`` instead of ``(1, 8, 8)``.
        shape: ``"1x8x8"`` (as stored) or ``"3x32x32"``: bilinearly upsampled to 32x32, the grey channel
            repeated, the input of torchvision's CNNs (as Fashion-MNIST's ``shape``).

    Returns:
        A classification :class:`Dataset`.
    """
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    test_fraction = _fraction("test_fraction", test_fraction)
    seed = _integer("seed", seed, minimum=0)
    flatten = _boolean("flatten", flatten)
    upsampled = _choice("shape", shape, ("1x8x8", "3x32x32")) == "3x32x32"
    if flatten and upsampled:
        raise DataError("data.flatten: true refuses data.shape = '3x32x32' (images of three channels)")
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
    shape = (64,) if flatten else (3, 32, 32) if upsampled else (1, 8, 8)
    pixels = Pixels(16.0, (64,) if flatten else (1, 8, 8), shape)

    def stored(a: np.ndarray) -> torch.Tensor:  # the values 0-16 as scikit-learn holds them, one image a row
        return torch.from_numpy(a).float().reshape(-1, *pixels.stored)

    return Dataset(
        name="digits",
        task=CLASSIFICATION,
        x_train=pixels.apply(stored(x_train)),
        y_train=torch.from_numpy(y_train).long(),
        x_test=pixels.apply(stored(x_test)),
        y_test=torch.from_numpy(y_test).long(),
        input_shape=shape,
        num_classes=10,
        pixels=pixels,
        raw_x_test=stored(x_test),
    )


# torchvision image datasets.

# torchvision raises these on missing (RuntimeError) or malformed (the rest) files.
_TORCHVISION_READ_ERRORS = (
    RuntimeError,
    OSError,
    EOFError,
    pickle.UnpicklingError,
    AssertionError,
    TypeError,
    ValueError,
    KeyError,
)


def _torchvision_images(name: str, class_name: str, root) -> dict:
    """``x_train``, ``y_train``, ``x_test``, ``y_test`` of an MNIST-like torchvision dataset in ``root``, never
    downloaded: the pixels as its IDX files hold them, uint8 ``(N, H, W)``, and int64 labels."""
    import torchvision.datasets

    root = _directory("root", root)
    arrays = {}
    for part in ("train", "test"):
        try:
            source = getattr(torchvision.datasets, class_name)(root, train=part == "train", download=False)
        except _TORCHVISION_READ_ERRORS as err:
            message = " ".join(str(err).split())
            raise DataError(f"data.root: cannot read {name} from {root}: {message}") from err
        arrays[f"x_{part}"] = torch.as_tensor(np.asarray(source.data), dtype=torch.uint8)
        arrays[f"y_{part}"] = torch.as_tensor(np.asarray(source.targets), dtype=torch.int64)
    return arrays


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
        A classification :class:`Dataset` of ``(3, 32, 32)`` images in ``[0, 1]``, the pixels 0-255 divided by
        255 (:class:`~bayesprune.core.preprocessing.Pixels`, which an export applies inside its file).
    """
    root = _directory("root", root)
    limit_train = _optional_positive_integer("limit_train", limit_train)
    limit_test = _optional_positive_integer("limit_test", limit_test)
    x_train, y_train = _read_cifar10_batches(root, [f"data_batch_{i}" for i in range(1, 6)])
    x_test, y_test = _read_cifar10_batches(root, ["test_batch"])
    pixels, raw_x_test = Pixels(255.0, (3, 32, 32), (3, 32, 32)), torch.from_numpy(x_test[:limit_test])
    return Dataset(
        name="cifar10",
        task=CLASSIFICATION,
        x_train=pixels.apply(torch.from_numpy(x_train[:limit_train])),
        y_train=torch.from_numpy(y_train[:limit_train]),
        x_test=pixels.apply(raw_x_test),
        y_test=torch.from_numpy(y_test[:limit_test]),
        input_shape=(3, 32, 32),
        num_classes=10,
        pixels=pixels,
        raw_x_test=raw_x_test,
    )
