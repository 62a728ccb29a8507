"""Tests of bayesprune.data against independent oracles (numpy statistics, files written here)."""

import dataclasses
import hashlib
import pickle
import struct

import numpy as np
import pytest
import torch

from bayesprune.data import DATASETS, Dataset, load_dataset, uci_num_splits, validate
from helpers import raises_data_error

SIMULATORS = ["linear-regression", "feature-importance-2var", "feature-importance-many", "feature-selection"]


# Registry and validation.


def test_registry_names():
    expected = {"digits", "mnist", "fashion-mnist", "cifar10", "uci", *SIMULATORS}
    assert expected <= set(DATASETS)


def test_unknown_dataset_lists_known_names():
    with raises_data_error("'foo'", "digits", "mnist"):
        load_dataset("foo")


def test_unknown_option_is_named():
    with raises_data_error("data.bogus", "digits"):
        load_dataset("digits", bogus=1)


def test_missing_required_option_is_named():
    with raises_data_error("data.root", "cifar10"):
        load_dataset("cifar10")


def test_loaders_leave_global_rng_state_alone():
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    load_dataset("feature-selection", n=20, num_features=5)
    load_dataset("digits")
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert torch.equal(torch.get_rng_state(), torch_state)


def _tiny_classification():
    return Dataset(
        name="tiny",
        task="classification",
        x_train=torch.zeros(4, 3),
        y_train=torch.tensor([0, 1, 2, 1]),
        x_test=torch.zeros(2, 3),
        y_test=torch.tensor([2, 0]),
        input_shape=(3,),
        num_classes=3,
    )


def _tiny_regression():
    return Dataset(
        name="tiny",
        task="regression",
        x_train=torch.zeros(4, 3),
        y_train=torch.zeros(4),
        x_test=torch.zeros(2, 3),
        y_test=torch.zeros(2),
        input_shape=(3,),
        num_classes=None,
    )


def test_dataset_properties():
    classification, regression = _tiny_classification(), _tiny_regression()
    validate(classification)
    validate(regression)
    assert (classification.output_dim, classification.num_train, classification.num_test) == (3, 4, 2)
    assert (regression.output_dim, regression.num_train, regression.num_test) == (1, 4, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        classification.name = "other"


@pytest.mark.parametrize(
    "make, changes, needle",
    [
        (_tiny_classification, {"y_train": torch.tensor([0, 1, 3, 1])}, "y_train has label 3"),
        (_tiny_classification, {"y_test": torch.tensor([-1, 0])}, "y_test has label -1"),
        (_tiny_classification, {"y_train": torch.tensor([0.0, 1.0, 2.0, 1.0])}, "y_train has dtype"),
        (_tiny_classification, {"x_train": torch.tensor([[float("nan")] * 3] * 4)}, "x_train has NaN"),
        (_tiny_classification, {"x_test": torch.full((2, 3), float("inf"))}, "x_test has NaN"),
        (_tiny_classification, {"y_train": torch.tensor([0, 1, 2])}, "y_train has shape"),
        (
            _tiny_classification,
            {"x_test": torch.zeros(0, 3), "y_test": torch.zeros(0, dtype=torch.int64)},
            "x_test is empty",
        ),
        (_tiny_classification, {"x_train": torch.zeros(4, 5)}, "input_shape"),
        (_tiny_classification, {"x_train": torch.zeros(4, 3, dtype=torch.float64)}, "x_train has dtype"),
        (_tiny_classification, {"num_classes": None}, "num_classes"),
        (_tiny_classification, {"task": "ranking"}, "task"),
        (_tiny_regression, {"y_test": torch.tensor([0.0, float("nan")])}, "y_test has NaN"),
        (_tiny_regression, {"y_train": torch.zeros(4, dtype=torch.int64)}, "y_train has dtype"),
        (_tiny_regression, {"num_classes": 2}, "num_classes"),
        (_tiny_regression, {"target_std": 0.0}, "target_std"),
    ],
)
def test_validate_rejects(make, changes, needle):
    with raises_data_error("'tiny'", needle):
        validate(dataclasses.replace(make(), **changes))


# scikit-learn digits.


def test_digits_images_and_split():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    data = load_dataset("digits")
    assert data.task == "classification" and data.num_classes == 10 and data.input_shape == (1, 8, 8)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert data.x_train.shape[1:] == (1, 8, 8)
    assert data.num_train + data.num_test == len(y)
    assert data.num_test == pytest.approx(0.2 * len(y), abs=1)
    assert 0.0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1.0
    # Train and test together are exactly the digits, pixels divided by 16.
    ours = np.concatenate([data.x_train.reshape(-1, 64).numpy(), data.x_test.reshape(-1, 64).numpy()])
    ours = np.column_stack([ours * 16, np.concatenate([data.y_train, data.y_test])])
    expected = np.column_stack([x, y])
    assert np.array_equal(np.unique(ours, axis=0), np.unique(expected, axis=0))
    # Stratified: each class has about the same share in the test set.
    test_counts = np.bincount(data.y_test.numpy(), minlength=10)
    assert np.allclose(test_counts / np.bincount(y), 0.2, atol=0.03)


def test_digits_flatten_and_seed():
    images, flat = load_dataset("digits", seed=3), load_dataset("digits", seed=3, flatten=True)
    assert flat.input_shape == (64,) and flat.x_test.shape[1:] == (64,)
    assert torch.equal(flat.x_train, images.x_train.reshape(-1, 64))
    assert not torch.equal(load_dataset("digits", seed=4).y_train, images.y_train)


def test_digits_as_3x32x32_are_the_8x8_images_upsampled_in_three_equal_channels():
    """``shape = "3x32x32"``: each channel is the 8x8 image interpolated linearly along rows and columns at the
    source coordinates (i + 1/2)/4 − 1/2 of output pixel i (half-pixel centres, clamped at the border), written
    here as a 32x8 matrix A: A X Aᵀ; the split and labels are the 8x8 set's."""
    small, large = load_dataset("digits"), load_dataset("digits", shape="3x32x32")
    assert large.input_shape == (3, 32, 32) and large.x_test.shape[1:] == (3, 32, 32)
    assert torch.equal(large.y_train, small.y_train) and torch.equal(large.y_test, small.y_test)
    matrix = torch.zeros(32, 8, dtype=torch.float64)
    for i in range(32):
        source = max((i + 0.5) / 4 - 0.5, 0.0)
        low = int(source)
        matrix[i, low] += 1 - (source - low)
        matrix[i, min(low + 1, 7)] += source - low
    expected = matrix @ small.x_test[:, 0].double() @ matrix.T
    for channel in range(3):
        torch.testing.assert_close(large.x_test[:, channel].double(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"test_fraction": 1.0}, "data.test_fraction"),
        ({"test_fraction": 0.001}, "data.test_fraction"),
        ({"seed": -1}, "data.seed"),
        ({"flatten": "yes"}, "data.flatten"),
        ({"shape": "3x28x28"}, "data.shape"),
        ({"shape": "3x32x32", "flatten": True}, "data.flatten"),
    ],
)
def test_digits_bad_options(options, needle):
    with raises_data_error(needle):
        load_dataset("digits", **options)


# torchvision image datasets, written in their on-disk formats.


def _write_idx(path, array):
    """Write a uint8 array in the big-endian IDX format MNIST ships in."""
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _fake_mnist(root, folder, *, num_train=5, num_test=3, max_label=9):
    rng = np.random.default_rng(0)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    arrays = {}
    for prefix, n in (("train", num_train), ("t10k", num_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, max_label + 1, size=n, dtype=np.uint8)
        labels[0] = max_label
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
        arrays[prefix] = images, labels
    return arrays


@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fashion-mnist", "FashionMNIST")])
def test_mnist_like_reads_idx_files(tmp_path, name, folder):
    arrays = _fake_mnist(tmp_path, folder)
    data = load_dataset(name, root=str(tmp_path))
    assert data.name == name and data.num_classes == 10 and data.input_shape == (1, 28, 28)
    for part, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = arrays[prefix]
        x, y = getattr(data, f"x_{part}"), getattr(data, f"y_{part}")
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        np.testing.assert_allclose(x[:, 0].numpy(), images / 255.0, rtol=1e-6)
        np.testing.assert_array_equal(y.numpy(), labels)


def test_mnist_limits_take_the_first_examples(tmp_path):
    arrays = _fake_mnist(tmp_path, "MNIST")
    data = load_dataset("mnist", root=tmp_path, limit_train=2, limit_test=1)
    assert data.num_train == 2 and data.num_test == 1
    np.testing.assert_allclose(data.x_train[:, 0].numpy(), arrays["train"][0][:2] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(data.y_test.numpy(), arrays["t10k"][1][:1])


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_image_root_missing_or_empty(tmp_path, name):
    with raises_data_error("data.root", "missing"):
        load_dataset(name, root=str(tmp_path / "missing"))
    with raises_data_error("data.root", str(tmp_path)):
        load_dataset(name, root=str(tmp_path))


def test_mnist_malformed_file(tmp_path):
    _fake_mnist(tmp_path, "MNIST")
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08")
    with raises_data_error("data.root", str(tmp_path)):
        load_dataset("mnist", root=tmp_path)


def test_mnist_label_out_of_range(tmp_path):
    _fake_mnist(tmp_path, "MNIST", max_label=12)
    with raises_data_error("'mnist'", "label 12"):
        load_dataset("mnist", root=tmp_path)


def test_mnist_bad_limit(tmp_path):
    _fake_mnist(tmp_path, "MNIST")
    with raises_data_error("data.limit_train"):
        load_dataset("mnist", root=tmp_path, limit_train=0)


class _Py2Array:
    """Pickles as Python 2 wrote numpy arrays (CIFAR-10's batches): byte strings as str, read back as latin-1."""

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        constructor, (cls, shape, kind), (*state, raw) = self.array.__reduce__()
        return constructor, (cls, shape, kind.decode("latin1")), (*state, raw.decode("latin1"))


def _fake_cifar10(root, monkeypatch, *, test_batch=None):
    """Write CIFAR-10's six batch files (two images each) and make their md5 sums the expected ones."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    batches, md5 = {}, {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"batch_label": name, "data": rng.integers(0, 256, size=(2, 3072), dtype=np.uint8), "labels": [0, 9]}
        content = pickle.dumps({**entry, "data": _Py2Array(entry["data"])}, protocol=2)
        if name == "test_batch" and test_batch is not None:
            content = test_batch
        (folder / name).write_bytes(content)
        batches[name], md5[name] = entry, hashlib.md5(content).hexdigest()
    monkeypatch.setattr("bayesprune.data.images.CIFAR10_MD5", md5)
    return batches


def test_cifar10_channel_layout(tmp_path, monkeypatch):
    batches = _fake_cifar10(tmp_path, monkeypatch)
    data = load_dataset("cifar10", root=tmp_path, limit_train=3)
    assert data.input_shape == (3, 32, 32) and data.num_classes == 10
    assert data.num_train == 3 and data.num_test == 2
    # CIFAR rows are 1024 red, then green, then blue values, each 32x32 row-major.
    expected = batches["test_batch"]["data"].reshape(2, 3, 32, 32) / 255.0
    np.testing.assert_allclose(data.x_test.numpy(), expected, rtol=1e-6)
    second_batch = batches["data_batch_2"]["data"].reshape(2, 3, 32, 32)
    np.testing.assert_allclose(data.x_train[2].numpy() * 255, second_batch[0], rtol=1e-6)
    np.testing.assert_array_equal(data.y_train.numpy(), [0, 9, 0])


def test_cifar10_md5_mismatch_is_named(tmp_path, monkeypatch):
    _fake_cifar10(tmp_path, monkeypatch)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes() + b"\0")
    with raises_data_error(str(path), "md5"):
        load_dataset("cifar10", root=tmp_path)


def test_cifar10_batch_that_would_run_code_is_refused(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    program = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    _fake_cifar10(tmp_path, monkeypatch, test_batch=program)
    with raises_data_error("test_batch", "refusing to unpickle os.system"):
        load_dataset("cifar10", root=tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "batch, needle",
    [
        ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "uint8 'data'"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "integer 'labels'"),
        ([1, 2], "uint8 'data'"),
    ],
)
def test_cifar10_malformed_batch_is_named(tmp_path, monkeypatch, batch, needle):
    _fake_cifar10(tmp_path, monkeypatch, test_batch=pickle.dumps(batch, protocol=4))
    with raises_data_error("test_batch", needle):
        load_dataset("cifar10", root=tmp_path)


# UCI regression benchmarks.

FEATURES, TARGET = [0, 2, 3], 1
SPLITS = {0: ([6, 0, 2, 4, 8, 1, 9], [3, 5, 7]), 1: ([1, 3, 5, 7, 9, 0, 2], [4, 6, 8])}


def _uci_table():
    rng = np.random.default_rng(1)
    table = np.round(rng.normal(5.0, 3.0, size=(10, 5)), 4)
    table[:, 4] = 7.5  # a column that is not a feature
    return table


def _write_uci(root, name="toy", *, float_indices=False, delimiter=" "):
    folder = root / name
    folder.mkdir(parents=True)
    table = _uci_table()
    fmt = "{:.1f}" if float_indices else "{:d}"

    def write_indices(filename, indices):
        (folder / filename).write_text("".join(fmt.format(i) + "\n" for i in indices))

    (folder / "data.txt").write_text("".join(delimiter.join(f"{v:.4f}" for v in row) + "\n" for row in table))
    write_indices("index_features.txt", FEATURES)
    write_indices("index_target.txt", [TARGET])
    for split, (train, test) in SPLITS.items():
        write_indices(f"index_train_{split}.txt", train)
        write_indices(f"index_test_{split}.txt", test)
    (folder / "n_splits.txt").write_text(f"{len(SPLITS)}\n")
    return folder, table


@pytest.mark.parametrize("float_indices, delimiter", [(False, " "), (True, "\t")])
@pytest.mark.parametrize("split", [0, 1])
def test_uci_returns_the_indexed_rows(tmp_path, split, float_indices, delimiter):
    _, table = _write_uci(tmp_path, float_indices=float_indices, delimiter=delimiter)
    data = load_dataset("uci", root=str(tmp_path), name="toy", split=split, normalize=False)
    train, test = SPLITS[split]
    assert data.name == "uci/toy" and data.task == "regression" and data.num_classes is None
    assert data.input_shape == (3,) and data.feature_names == ("x0", "x1", "x2")
    assert (data.target_mean, data.target_std) == (0.0, 1.0)
    np.testing.assert_allclose(data.x_train.numpy(), table[np.ix_(train, FEATURES)], rtol=1e-6)
    np.testing.assert_allclose(data.x_test.numpy(), table[np.ix_(test, FEATURES)], rtol=1e-6)
    np.testing.assert_allclose(data.y_train.numpy(), table[train, TARGET], rtol=1e-6)
    np.testing.assert_allclose(data.y_test.numpy(), table[test, TARGET], rtol=1e-6)


def test_uci_standardises_with_training_statistics(tmp_path):
    _, table = _write_uci(tmp_path)
    data = load_dataset("uci", root=tmp_path, name="toy")
    train, test = SPLITS[0]
    x_train, x_test = table[np.ix_(train, FEATURES)], table[np.ix_(test, FEATURES)]
    y_train, y_test = table[train, TARGET], table[test, TARGET]
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.float32
    np.testing.assert_allclose(data.x_train.numpy().mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(data.x_train.numpy().std(0), 1.0, rtol=1e-5)
    expected_test = (x_test - x_train.mean(0)) / x_train.std(0)
    np.testing.assert_allclose(data.x_test.numpy(), expected_test, rtol=1e-5, atol=1e-5)
    assert data.target_mean == pytest.approx(y_train.mean())
    assert data.target_std == pytest.approx(y_train.std())
    restored = data.y_test.numpy() * data.target_std + data.target_mean
    np.testing.assert_allclose(restored, y_test, rtol=1e-5)


def test_uci_constant_feature_is_centred_not_scaled(tmp_path):
    folder, _ = _write_uci(tmp_path)
    (folder / "index_features.txt").write_text("0\n4\n")  # column 4 is constant
    data = load_dataset("uci", root=tmp_path, name="toy")
    assert torch.isfinite(data.x_train).all()
    assert torch.equal(data.x_train[:, 1], torch.zeros(7)) and torch.equal(data.x_test[:, 1], torch.zeros(3))


def test_uci_num_splits(tmp_path):
    _write_uci(tmp_path)
    assert uci_num_splits(tmp_path, "toy") == 2


def _replace_line(path, line_number, text):
    lines = path.read_text().splitlines()
    lines[line_number - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "damage, options, needles",
    [
        (lambda f: None, {"name": "absent"}, ["data.name", "absent"]),
        (lambda f: None, {"split": 2}, ["data.split", "2"]),
        (lambda f: None, {"split": -1}, ["data.split"]),
        (lambda f: None, {"normalize": 1}, ["data.normalize"]),
        (lambda f: (f / "data.txt").unlink(), {}, ["data.txt"]),
        (lambda f: (f / "index_test_0.txt").unlink(), {}, ["index_test_0.txt"]),
        (lambda f: (f / "n_splits.txt").unlink(), {}, ["n_splits.txt"]),
        (lambda f: _replace_line(f / "data.txt", 3, "1 2 abc 4 5"), {}, ["data.txt", "line 3", "not a number"]),
        (lambda f: _replace_line(f / "data.txt", 4, "1 2 3"), {}, ["data.txt", "line 4", "3 values"]),
        (lambda f: _replace_line(f / "data.txt", 5, "1 nan 3 4 5"), {}, ["data.txt", "line 5", "NaN"]),
        (lambda f: _replace_line(f / "data.txt", 5, "1 inf 3 4 5"), {}, ["data.txt", "line 5", "infinite"]),
        (lambda f: (f / "data.txt").write_text("\n"), {}, ["data.txt", "no data"]),
        (lambda f: (f / "data.txt").write_bytes(b"1 2 3 4 5\n\xff\xfe 2 3 4 5\n"), {}, ["data.txt", "line 2"]),
        (lambda f: (f / "index_train_0.txt").write_text("0\n10\n"), {}, ["index_train_0.txt", "10"]),
        (lambda f: (f / "index_train_0.txt").write_text("0\n1.5\n"), {}, ["index_train_0.txt", "whole"]),
        (lambda f: (f / "index_features.txt").write_text("0\n5\n"), {}, ["index_features.txt", "5"]),
        (lambda f: (f / "index_target.txt").write_text("1\n2\n"), {}, ["index_target.txt", "one"]),
        (lambda f: (f / "n_splits.txt").write_text("two\n"), {}, ["n_splits.txt"]),
    ],
)
def test_uci_errors_name_the_file_or_option(tmp_path, damage, options, needles):
    folder, _ = _write_uci(tmp_path)
    damage(folder)
    with raises_data_error(*needles):
        load_dataset("uci", **{"root": tmp_path, "name": "toy", **options})


def test_uci_root_must_be_a_directory(tmp_path):
    with raises_data_error("data.root", "nowhere"):
        load_dataset("uci", root=tmp_path / "nowhere", name="toy")


# Simulated regression (paper 003, section 4.1).


def _wiggle(x):
    return np.exp(np.abs(x)) - 2 * x + np.sin(2 * np.pi * x)


def _all_rows(data):
    """Train and test rows together, in raw units when loaded with normalize=False."""
    x = np.concatenate([data.x_train.numpy(), data.x_test.numpy()]).astype(np.float64)
    y = np.concatenate([data.y_train.numpy(), data.y_test.numpy()]).astype(np.float64)
    return x, y


def _least_squares(design, y):
    """Coefficients of y on design with an intercept (dropped from the result)."""
    design = np.column_stack([np.ones(len(y)), design])
    return np.linalg.lstsq(design, y, rcond=None)[0][1:]


def test_linear_regression_recovers_coefficients():
    data = load_dataset("linear-regression", normalize=False, coefficient=1.5, num_relevant=3)
    assert data.x_train.shape == (800, 10) and data.x_test.shape == (200, 10)
    assert data.extras["relevant"].dtype == torch.bool
    assert data.extras["relevant"].tolist() == [True] * 3 + [False] * 7
    x, y = _all_rows(data)
    np.testing.assert_allclose(_least_squares(x, y), [1.5] * 3 + [0.0] * 7, atol=0.15)
    np.testing.assert_allclose(data.extras["beta"].numpy(), [1.5] * 3 + [0.0] * 7)
    np.testing.assert_allclose(x.mean(0), 0.0, atol=0.15)  # x ~ N(0, 1)
    np.testing.assert_allclose(x.std(0), 1.0, atol=0.1)


@pytest.mark.parametrize("name", SIMULATORS)
def test_simulators_standardise_with_training_statistics(name):
    raw, scaled = load_dataset(name, n=500, normalize=False), load_dataset(name, n=500)
    x_train = raw.x_train.double().numpy()
    np.testing.assert_allclose(scaled.x_train.numpy().mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(scaled.x_train.numpy().std(0), 1.0, rtol=1e-4)
    expected_test = (raw.x_test.double().numpy() - x_train.mean(0)) / x_train.std(0)
    np.testing.assert_allclose(scaled.x_test.numpy(), expected_test, rtol=1e-4, atol=1e-4)
    assert scaled.target_mean == pytest.approx(raw.y_train.double().mean().item(), rel=1e-5, abs=1e-5)
    assert scaled.target_std == pytest.approx(raw.y_train.double().std(unbiased=False).item(), rel=1e-5)
    restored = scaled.y_test.double() * scaled.target_std + scaled.target_mean
    np.testing.assert_allclose(restored.numpy(), raw.y_test.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_feature_importance_2var_formula(alpha):
    data = load_dataset("feature-importance-2var", alpha=alpha, normalize=False)
    assert data.x_train.shape == (1600, 2) and data.num_test == 400
    x, y = _all_rows(data)
    np.testing.assert_allclose(_least_squares(x, y), [1 - alpha, alpha], atol=0.08)
    importance = 1 - np.sum((y - alpha * x[:, 1]) ** 2) / np.sum(y**2)
    assert data.extras["importance"] == pytest.approx(importance, abs=1e-5)


def test_feature_importance_2var_importance_rises_with_alpha():
    values = [load_dataset("feature-importance-2var", alpha=a).extras["importance"] for a in (0.0, 0.5, 1.0)]
    assert values[0] == pytest.approx(0.0, abs=0.05) and values[0] < values[1] < values[2]


@pytest.mark.parametrize("f, link", [("linear", lambda x: x), ("nonlinear", _wiggle)])
def test_feature_importance_many_formula(f, link):
    data = load_dataset("feature-importance-many", num_features=6, alpha=2.0, f=f, normalize=False)
    beta = np.arange(1, 7) / 2.0
    np.testing.assert_allclose(data.extras["beta"].numpy(), beta)
    x, y = _all_rows(data)
    np.testing.assert_allclose(_least_squares(link(x), y), beta, atol=0.1)


def test_feature_selection_formula():
    data = load_dataset("feature-selection", num_features=12, alpha=4.0, pi=0.5, normalize=False, seed=5)
    active, beta = data.extras["active"], data.extras["beta"]
    assert active.dtype == torch.bool and active.shape == (12,)
    np.testing.assert_allclose(beta.numpy(), np.arange(1, 13) / 4.0)
    x, y = _all_rows(data)
    np.testing.assert_allclose(_least_squares(_wiggle(x), y), beta.numpy() * active.numpy(), atol=0.1)


def test_feature_selection_paper_defaults():
    data = load_dataset("feature-selection")
    assert data.x_train.shape == (1600, 100) and data.x_test.shape == (400, 100)
    assert data.extras["active"].shape == (100,)


@pytest.mark.parametrize("pi", [0.1, 0.5])
def test_feature_selection_active_fraction_is_pi(pi):
    data = load_dataset("feature-selection", n=10, num_features=5000, pi=pi)
    assert data.extras["active"].double().mean().item() == pytest.approx(pi, abs=0.03)


def test_feature_selection_pi_zero_is_pure_noise():
    data = load_dataset("feature-selection", num_features=5, pi=0.0, normalize=False)
    assert not data.extras["active"].any()
    _, y = _all_rows(data)
    assert y.std() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("name", SIMULATORS)
def test_simulators_are_reproducible(name):
    first, again, other = (load_dataset(name, n=100, seed=s) for s in (7, 7, 8))
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(first, field), getattr(again, field))
        assert not torch.equal(getattr(first, field), getattr(other, field))
    assert first.extras.keys() == again.extras.keys()
    for key, value in first.extras.items():
        assert torch.equal(torch.as_tensor(value), torch.as_tensor(again.extras[key]))
    assert (first.target_mean, first.target_std) == (again.target_mean, again.target_std)


def test_feature_selection_seed_changes_active_set():
    actives = [load_dataset("feature-selection", n=10, seed=s).extras["active"] for s in (0, 1)]
    assert not torch.equal(*actives)


@pytest.mark.parametrize("name", SIMULATORS)
@pytest.mark.parametrize(
    "options, needle",
    [
        ({"n": -3}, "data.n"),
        ({"n": 10.0}, "data.n"),
        ({"n": True}, "data.n"),
        ({"seed": -1}, "data.seed"),
        ({"test_fraction": 0.0}, "data.test_fraction"),
        ({"n": 2, "test_fraction": 0.2}, "data.test_fraction"),
        ({"noise": -1.0}, "data.noise"),
        ({"noise": float("nan")}, "data.noise"),
        ({"normalize": "no"}, "data.normalize"),
    ],
)
def test_simulator_shared_option_errors(name, options, needle):
    with raises_data_error(needle):
        load_dataset(name, **options)


@pytest.mark.parametrize(
    "name, options, needle",
    [
        ("linear-regression", {"num_features": 0}, "data.num_features"),
        ("linear-regression", {"num_relevant": 11}, "data.num_relevant"),
        ("linear-regression", {"coefficient": "2"}, "data.coefficient"),
        ("feature-importance-2var", {"alpha": 1.5}, "data.alpha"),
        ("feature-importance-2var", {"alpha": -0.1}, "data.alpha"),
        ("feature-importance-many", {"alpha": 0.0}, "data.alpha"),
        ("feature-importance-many", {"f": "cubic"}, "data.f"),
        ("feature-selection", {"pi": 1.5}, "data.pi"),
        ("feature-selection", {"f": "quadratic"}, "data.f"),
        ("feature-selection", {"num_features": -2}, "data.num_features"),
    ],
)
def test_simulator_specific_option_errors(name, options, needle):
    with raises_data_error(needle):
        load_dataset(name, **options)
