"""Fashion-MNIST (Xiao, Rasul, Vollgraf 2017): 60,000 training and 10,000 test 28x28 greyscale images of
ten kinds of clothing. Found without a ``root`` where the Debian package ``dataset-fashion-mnist`` put
it (:data:`FASHION_MNIST_FOLDERS`), read from its four gzipped IDX files; or from a ``root`` the user gives.
Never downloaded."""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.preprocessing import Pixels
from bayesprune.data.images import _torchvision_images
from bayesprune.data.options import _choice, _directory, _optional_positive_integer
from bayesprune.data.registry import CLASSIFICATION, Dataset, register_dataset

#: Where ``apt-get install dataset-fashion-mnist`` puts the four files (Debian and Ubuntu), searched in order.
FASHION_MNIST_FOLDERS = ("/usr/share/datasets/fashion-mnist",)
#: The files of each part, as the original distribution names them (gzipped, or not).
FASHION_MNIST_FILES = {"train": "train", "test": "t10k"}
#: ``data.shape``: the images as stored, or bilinearly upsampled to 32x32 with the grey channel repeated
#: three times, the input torchvision's ImageNet networks (resnet18, mobilenet) are built for.
SHAPES = {"1x28x28": (1, 28, 28), "3x32x32": (3, 32, 32)}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def read_idx(path: Path) -> np.ndarray:
    """The uint8 array of an IDX file (``path``, gzipped when it ends in ``.gz``): a big-endian header
    ``0x00 0x00 0x08 ndim``, ``ndim`` big-endian uint32 sizes, then the bytes (LeCun's MNIST format).

    Raises:
        DataError: the file is unreadable, not IDX of unsigned bytes, or shorter or longer than its header says.
    """
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: cannot read ({getattr(error, 'strerror', None) or error})") from None
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08" or not 1 <= raw[3] <= 4:
        raise DataError(f"{path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: its IDX header is cut short")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    if len(raw) - header != int(np.prod(shape)):
        raise DataError(f"{path}: holds {len(raw) - header} bytes where its header says {int(np.prod(shape))}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _idx_file(folder: Path, stem: str) -> Path | None:
    return next((folder / f"{stem}{end}" for end in (".gz", "") if (folder / f"{stem}{end}").is_file()), None)


def _idx_folder(folder: Path) -> bool:
    """Whether ``folder`` holds the four files (the Debian package's layout)."""
    return all(
        _idx_file(folder, f"{prefix}-{kind}") is not None
        for prefix in FASHION_MNIST_FILES.values()
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")
    )


def read_fashion_mnist(folder: Path) -> dict:
    """``x_train``, ``y_train``, ``x_test``, ``y_test`` of the four IDX files in ``folder``: uint8 images
    ``(N, 28, 28)`` and int64 labels in 0..9, one per image (checked; a problem names the file)."""
    arrays = {}
    for part, prefix in FASHION_MNIST_FILES.items():
        images_file = _idx_file(folder, f"{prefix}-images-idx3-ubyte")
        labels_file = _idx_file(folder, f"{prefix}-labels-idx1-ubyte")
        images, labels = read_idx(images_file), read_idx(labels_file)
        if images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) == 0:
            raise DataError(f"{images_file}: not 28x28 images, got shape {images.shape}")
        if labels.shape != images.shape[:1] or labels.max() > 9:
            raise DataError(f"{labels_file}: not one label in 0..9 per image of {images_file.name}")
        arrays[f"x_{part}"], arrays[f"y_{part}"] = images, labels.astype(np.int64)
    return arrays


def _installed_folder() -> Path:
    for folder in map(Path, FASHION_MNIST_FOLDERS):
        if _idx_folder(folder):
            return folder
    raise DataError(
        f"data.root: Fashion-MNIST is not installed in {', '.join(FASHION_MNIST_FOLDERS)} "
        "(apt-get install dataset-fashion-mnist); or give data.root, a folder of its four IDX files "
        "or of torchvision's FashionMNIST layout"
    )


def _images(stored: torch.Tensor, pixels: Pixels) -> torch.Tensor:
    """uint8 ``(N, 1, 28, 28)`` images as float32 images in ``[0, 1]`` of ``pixels.shape`` (:meth:`Pixels.apply`:
    bilinear upsampling, the grey channel repeated), converted a slice at a time so that 60,000 images
    never sit twice in memory."""
    images = torch.empty(len(stored), *pixels.shape)
    for start in range(0, len(stored), 4096):
        images[start : start + 4096] = pixels.apply(stored[start : start + 4096])
    return images


@register_dataset("fashion-mnist")
def load_fashion_mnist(
    *,
    root: str | os.PathLike | None = None,
    limit_train: int | None = None,
    limit_test: int | None = None,
    shape: str = "1x28x28",
) -> Dataset:
    """Fashion-MNIST: the standard 60,000 training and 10,000 test images, never downloaded.

    Args:
        root: A folder holding the four IDX files (``train-images-idx3-ubyte[.gz]``, ...), or torchvision's
            layout ``root/FashionMNIST/raw``; ``None``: the Debian package's folder (:data:`FASHION_MNIST_FOLDERS`).
        limit_train: Keep only the first this many training images (``None``: all): the training subset of
            a comparison sized for a small machine (each class is 9.4-10.3 % of the first 10,000).
        limit_test: Keep only the first this many test images (``None``: all).
        shape: ``"1x28x28"`` (as stored) or ``"3x32x32"`` (upsampled, three channels; :data:`SHAPES`).

    Returns:
        A classification :class:`Dataset` of images in ``[0, 1]``, the pixels 0-255 divided by 255
        (:class:`~bayesprune.core.preprocessing.Pixels`, which an export applies inside its file).
    """
    size = SHAPES[_choice("shape", shape, tuple(SHAPES))]
    limits = {"train": _optional_positive_integer("limit_train", limit_train)}
    limits["test"] = _optional_positive_integer("limit_test", limit_test)
    folder = _installed_folder() if root is None else Path(_directory("root", root))
    if _idx_folder(folder):
        arrays = {name: torch.from_numpy(value.copy()) for name, value in read_fashion_mnist(folder).items()}
    else:
        arrays = _torchvision_images("fashion-mnist", "FashionMNIST", root)
    tensors, pixels = {}, Pixels(255.0, (1, 28, 28), size)
    for part, limit in limits.items():
        tensors[f"x_{part}"] = _images(arrays[f"x_{part}"][:limit].unsqueeze(1), pixels)
        tensors[f"y_{part}"] = arrays[f"y_{part}"][:limit].long().contiguous()
    return Dataset(
        name="fashion-mnist",
        task=CLASSIFICATION,
        input_shape=size,
        num_classes=10,
        class_names=CLASS_NAMES,
        pixels=pixels,
        raw_x_test=arrays["x_test"][: limits["test"]].unsqueeze(1).contiguous(),
        **tensors,
    )
