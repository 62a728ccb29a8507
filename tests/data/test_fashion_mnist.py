"""Fashion-MNIST: the IDX reader on tiny files written here in the Debian package's layout, found without a
root, upsampled to 3x32x32 (against bilinear interpolation written out in numpy); the installed package
itself only where it is installed."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesprune.data import fashion_mnist, load_dataset, read_idx
from bayesprune.data.fashion_mnist import FASHION_MNIST_FOLDERS
from helpers import raises_data_error


def _write_idx(path, array, *, packed=True):
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if packed else raw)


def _debian_folder(folder, *, num_train=6, num_test=4):
    """The four gzipped IDX files as the Debian package lays them out, of random images and labels."""
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for prefix, n in (("train", num_train), ("t10k", num_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        _write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)
        arrays[prefix] = images, labels
    return arrays


def _bilinear(image: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resampling with half-pixel centres (the source coordinate of output pixel i is
    (i + 0.5) * in / out - 0.5, clamped to the image), written out pixel by pixel."""
    n = image.shape[0]
    out = np.empty((size, size))
    for i in range(size):
        for j in range(size):
            y = min(max((i + 0.5) * n / size - 0.5, 0), n - 1)
            x = min(max((j + 0.5) * n / size - 0.5, 0), n - 1)
            y0, x0 = int(np.floor(y)), int(np.floor(x))
            y1, x1 = min(y0 + 1, n - 1), min(x0 + 1, n - 1)
            dy, dx = y - y0, x - x0
            top = image[y0, x0] * (1 - dx) + image[y0, x1] * dx
            bottom = image[y1, x0] * (1 - dx) + image[y1, x1] * dx
            out[i, j] = top * (1 - dy) + bottom * dy
    return out


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Tiny Fashion-MNIST files in a folder standing for the Debian package's, searched first."""
    folder = tmp_path / "usr-share-datasets-fashion-mnist"
    arrays = _debian_folder(folder)
    monkeypatch.setattr(fashion_mnist, "FASHION_MNIST_FOLDERS", (str(folder),))
    return arrays


def test_found_without_root(installed):
    data = load_dataset("fashion-mnist")
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10 and data.num_train == 6 and data.num_test == 4
    for part, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = installed[prefix]
        np.testing.assert_allclose(getattr(data, f"x_{part}")[:, 0].numpy(), images / 255.0, rtol=1e-6)
        np.testing.assert_array_equal(getattr(data, f"y_{part}").numpy(), labels)


def test_upsampled_to_3x32x32(installed):
    """Every channel of the 3x32x32 images is the stored image resampled bilinearly to 32x32."""
    data = load_dataset("fashion-mnist", shape="3x32x32", limit_train=2)
    assert data.input_shape == (3, 32, 32) and data.x_train.shape == (2, 3, 32, 32)
    for k in range(2):
        expected = _bilinear(installed["train"][0][k] / 255.0, 32)
        for channel in range(3):
            np.testing.assert_allclose(data.x_train[k, channel].numpy(), expected, atol=1e-5)


def test_training_subset_is_the_first_images(installed):
    data = load_dataset("fashion-mnist", limit_train=3)
    assert data.num_train == 3 and data.num_test == 4
    np.testing.assert_array_equal(data.y_train.numpy(), installed["train"][1][:3])


def test_root_of_idx_files(tmp_path):
    """A root holding the four files, not packed, reads as the package's folder does."""
    rng = np.random.default_rng(2)
    for prefix, n in (("train", 3), ("t10k", 2)):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)), packed=False)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n), packed=False)
    data = load_dataset("fashion-mnist", root=str(tmp_path))
    assert (data.num_train, data.num_test) == (3, 2)


def test_absent_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "FASHION_MNIST_FOLDERS", (str(tmp_path / "absent"),))
    with raises_data_error("data.root", "dataset-fashion-mnist"):
        load_dataset("fashion-mnist")


def test_bad_files_and_options(installed, tmp_path):
    with raises_data_error("data.shape", "3x32x32"):
        load_dataset("fashion-mnist", shape="32x32")
    bad = tmp_path / "bad-idx3-ubyte"
    bad.write_bytes(b"\x00\x00\x08\x03" + struct.pack(">3I", 2, 28, 28) + b"\x00" * 10)
    with raises_data_error(str(bad), "header"):
        read_idx(bad)
    bad.write_bytes(b"PK\x03\x04 not idx")
    with raises_data_error(str(bad), "not an IDX"):
        read_idx(bad)


@pytest.mark.skipif(
    not any(fashion_mnist._idx_folder(Path(folder)) for folder in FASHION_MNIST_FOLDERS),
    reason="the Debian package dataset-fashion-mnist is not installed",
)
def test_installed_package():
    """The real set, where installed: 60,000 + 10,000 images, 6,000 and 1,000 of each class."""
    data = load_dataset("fashion-mnist")
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(data.y_train).tolist() == [6000] * 10
    assert torch.bincount(data.y_test).tolist() == [1000] * 10
