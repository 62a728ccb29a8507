"""The user's own data (npz, csv, image-folder) against numpy oracles and files written here; every
defect one DataError line naming the file or option, and exit status 2 from the command line."""

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from bayesprune.cli import main
from bayesprune.data import MAX_INFERRED_CLASSES, Dataset, load_dataset, validate
from helpers import image_folder, raises_data_error


def digits_arrays(n_train=120, n_test=40, image=True):
    """Scikit-learn's digits in [0, 1], as (N, 1, 8, 8) images or (N, 64) rows."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8) if image else x
    return {
        "x_train": x[:n_train],
        "y_train": y[:n_train],
        "x_test": x[n_train : n_train + n_test],
        "y_test": y[n_train : n_train + n_test],
    }


def regression_arrays(rng=None, n_train=50, n_test=20, d=3):
    rng = rng or np.random.default_rng(0)
    x_train, x_test = rng.normal(2.0, 3.0, (n_train, d)), rng.normal(2.0, 3.0, (n_test, d))
    return {"x_train": x_train, "y_train": 10 + 4 * x_train[:, 0], "x_test": x_test, "y_test": 10 + 4 * x_test[:, 0]}


def write_npz(path, arrays):
    np.savez(path, **arrays)
    return str(path)


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return str(path)


def table(n=40):
    """Rows ``a, b, label`` with text labels cat/dog/emu and a float target ``y``."""
    return ["a", "b", "label", "y"], [[i, (3 * i) % 7, ("emu", "cat", "dog")[i % 3], 0.5 * i + 1] for i in range(n)]


# npz.


def test_npz_images_keep_their_shape_and_values(tmp_path):
    arrays = digits_arrays()
    data = load_dataset("npz", path=write_npz(tmp_path / "digits.npz", arrays))
    assert data.name == "npz/digits" and data.task == "classification"
    assert data.input_shape == (1, 8, 8) and data.x_train.shape == (120, 1, 8, 8)
    assert data.num_classes == 10 and data.output_dim == 10
    assert torch.equal(data.x_train, torch.from_numpy(arrays["x_train"]))  # images are not standardised by default
    assert torch.equal(data.y_test, torch.from_numpy(arrays["y_test"]).long())


def test_npz_images_standardised_on_request_with_training_statistics(tmp_path):
    arrays = digits_arrays()
    data = load_dataset("npz", path=write_npz(tmp_path / "d.npz", arrays), normalize=True)
    mean, std = arrays["x_train"].astype(np.float64).mean(0), arrays["x_train"].astype(np.float64).std(0)
    std = np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(data.x_test.numpy(), (arrays["x_test"] - mean) / std, rtol=1e-5, atol=1e-5)


def test_npz_tabular_regression_is_standardised_like_uci(tmp_path):
    arrays = regression_arrays()
    data = load_dataset("npz", path=write_npz(tmp_path / "r.npz", arrays))
    assert data.task == "regression" and data.num_classes is None and data.input_shape == (3,)
    x_mean, x_std = arrays["x_train"].mean(0), arrays["x_train"].std(0)
    np.testing.assert_allclose(data.x_test.numpy(), (arrays["x_test"] - x_mean) / x_std, rtol=1e-5, atol=1e-5)
    assert data.target_mean == pytest.approx(arrays["y_train"].mean())
    assert data.target_std == pytest.approx(arrays["y_train"].std())
    restored = data.y_test.double().numpy() * data.target_std + data.target_mean
    np.testing.assert_allclose(restored, arrays["y_test"], rtol=1e-5)


def test_npz_normalize_false_keeps_values(tmp_path):
    arrays = regression_arrays()
    data = load_dataset("npz", path=write_npz(tmp_path / "r.npz", arrays), normalize=False)
    np.testing.assert_allclose(data.x_train.numpy(), arrays["x_train"], rtol=1e-6)
    np.testing.assert_allclose(data.y_train.numpy(), arrays["y_train"], rtol=1e-6)
    assert (data.target_mean, data.target_std) == (0.0, 1.0)


def test_npz_image_regression_standardises_only_the_targets_by_default(tmp_path):
    arrays = digits_arrays()
    arrays["y_train"], arrays["y_test"] = arrays["y_train"] * 2.5, arrays["y_test"] * 2.5
    data = load_dataset("npz", path=write_npz(tmp_path / "d.npz", arrays))
    assert data.task == "regression" and torch.equal(data.x_train, torch.from_numpy(arrays["x_train"]))
    assert data.target_std == pytest.approx(arrays["y_train"].std())


def test_npz_names_and_column_targets(tmp_path):
    arrays = digits_arrays(image=False)
    arrays["y_train"] = arrays["y_train"].reshape(-1, 1)  # (N, 1) targets are flattened
    arrays["feature_names"] = np.array([f"pixel{j}" for j in range(64)])
    arrays["class_names"] = np.array(list("0123456789"))
    data = load_dataset("npz", path=write_npz(tmp_path / "t.npz", arrays))
    assert data.feature_names[3] == "pixel3" and data.class_names == tuple("0123456789")
    assert data.y_train.shape == (120,)


def test_npz_other_dtypes_big_endian_and_bytes(tmp_path):
    arrays = regression_arrays()
    arrays["x_train"], arrays["x_test"] = arrays["x_train"].astype(">f8"), arrays["x_test"].astype(np.int16)
    arrays["feature_names"] = np.array([b"u", b"v", b"w"])
    data = load_dataset("npz", path=write_npz(tmp_path / "o.npz", arrays), normalize=False)
    assert data.x_train.dtype == torch.float32 and data.feature_names == ("u", "v", "w")
    np.testing.assert_allclose(data.x_train.numpy(), arrays["x_train"], rtol=1e-6)
    np.testing.assert_array_equal(data.x_test.numpy(), arrays["x_test"])


def test_npz_boolean_targets_are_two_classes(tmp_path):
    arrays = regression_arrays()
    arrays["y_train"], arrays["y_test"] = arrays["x_train"][:, 0] > 2, arrays["x_test"][:, 0] > 2
    data = load_dataset("npz", path=write_npz(tmp_path / "b.npz", arrays))
    assert data.num_classes == 2 and data.y_train.dtype == torch.int64


def test_npz_object_array_is_refused_and_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(marker),)

    arrays = regression_arrays()
    arrays["x_test"] = np.array([Payload()], dtype=object)
    path = write_npz(tmp_path / "evil.npz", arrays)
    with raises_data_error(path, "'x_test'", "object array", "never unpickled"):
        load_dataset("npz", path=path)
    assert not marker.exists()


def _npz_case(tmp_path, change):
    arrays = digits_arrays()
    change(arrays)
    return write_npz(tmp_path / "bad.npz", arrays)


def _set(name, value):
    return lambda arrays: arrays.__setitem__(name, value)


def _nan_in_x(arrays):
    arrays["x_train"] = arrays["x_train"].copy()
    arrays["x_train"][7, 0, 3, 3] = np.nan


NPZ_DEFECTS = {
    "missing array": (lambda a: a.pop("x_test"), ["'x_test'", "found x_train, y_train, y_test"]),
    "unknown array": (_set("x_val", np.zeros((2, 3))), ["'x_val'"]),
    "row counts": (lambda a: a.__setitem__("y_train", a["y_train"][:-1]), ["y_train has 119 rows", "x_train has 120"]),
    "NaN in inputs": (_nan_in_x, ["x_train", "NaN", "row 7"]),
    "inf in targets": (_set("y_test", np.full(40, np.inf)), ["y_test", "infinite"]),
    "huge input": (
        lambda a: a.__setitem__("x_test", np.full(a["x_test"].shape, 1e300)),
        ["x_test", "beyond float32's range", "row 0"],
    ),
    "train/test shapes": (
        lambda a: a.__setitem__("x_test", a["x_test"][:, :, :7]),
        ["x_test", "(1, 7, 8)", "(1, 8, 8)"],
    ),
    "negative label": (lambda a: a.__setitem__("y_test", a["y_test"] - 1), ["y_test has label -1", "0..K-1"]),
    "1-based labels": (
        lambda a: [a.__setitem__(k, a[k] + 1) for k in ("y_train", "y_test")],
        ["no example of class 0", "K = 11"],
    ),
    "test class unseen in training": (
        lambda a: a.__setitem__("y_test", np.full(40, 12)),
        ["no example of class 10", "K = 13"],
    ),
    "empty split": (lambda a: [a.__setitem__(k, a[k][:0]) for k in ("x_test", "y_test")], ["x_test is empty"]),
    "integer and float targets": (
        lambda a: a.__setitem__("y_test", a["y_test"] * 1.0),
        ["y_train has dtype int", "y_test float64"],
    ),
    "1-d inputs": (_set("x_train", np.zeros(120)), ["x_train has shape (120,)"]),
    "text inputs": (_set("x_train", np.array([["a"]] * 120)), ["x_train has dtype <U1", "numbers"]),
    "2-d targets": (_set("y_train", np.zeros((120, 2), dtype=int)), ["y_train has shape (120, 2)", "(120,)"]),
    "class names count": (_set("class_names", np.array(["a", "b"])), ["class_names must be 10 strings"]),
    "feature names of images": (_set("feature_names", np.array(["a"])), ["feature_names", "(N, D)"]),
}


@pytest.mark.parametrize("case", list(NPZ_DEFECTS))
def test_npz_defect_is_one_line_naming_the_file(case, tmp_path):
    change, needles = NPZ_DEFECTS[case]
    path = _npz_case(tmp_path, change)
    with raises_data_error(path, *needles):
        load_dataset("npz", path=path)


def test_npz_files_that_are_not_archives(tmp_path):
    with raises_data_error("data.path", "no such file"):
        load_dataset("npz", path=str(tmp_path / "absent.npz"))
    with raises_data_error("data.path", "not a file"):
        load_dataset("npz", path=str(tmp_path))
    text = tmp_path / "table.npz"
    text.write_text("a,b\n1,2\n")
    with raises_data_error(str(text), "not an .npz archive"):
        load_dataset("npz", path=str(text))
    single = tmp_path / "one.npy"
    np.save(single, np.zeros(3))
    with raises_data_error(str(single), "one array (.npy)"):
        load_dataset("npz", path=str(single))
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with raises_data_error(str(truncated), "cannot read"):
        load_dataset("npz", path=str(truncated))
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    with raises_data_error(str(empty), "cannot read"):
        load_dataset("npz", path=str(empty))
    with raises_data_error("data.normalize"):
        load_dataset("npz", path=write_npz(tmp_path / "d.npz", digits_arrays()), normalize="yes")


# csv.


def test_csv_text_labels_sorted_and_split_stratified(tmp_path):
    header, rows = table(60)
    path = write_csv(tmp_path / "animals.csv", header[:3], [row[:3] for row in rows])
    data = load_dataset("csv", path=path, target="label", test_fraction=0.25, seed=3, normalize=False)
    assert data.name == "csv/animals" and data.task == "classification"
    assert data.class_names == ("cat", "dog", "emu") and data.num_classes == 3
    assert data.feature_names == ("a", "b") and data.input_shape == (2,)
    assert (data.num_train, data.num_test) == (45, 15)
    assert torch.bincount(data.y_test).tolist() == [5, 5, 5]  # stratified
    for x, y in ((data.x_train, data.y_train), (data.x_test, data.y_test)):  # column a is the row's index i
        assert [("emu", "cat", "dog")[int(i) % 3] for i in x[:, 0]] == [data.class_names[k] for k in y.tolist()]
    assert sorted(torch.cat([data.x_train[:, 0], data.x_test[:, 0]]).tolist()) == list(range(60))
    again = load_dataset("csv", path=path, target="label", test_fraction=0.25, seed=3, normalize=False)
    other = load_dataset("csv", path=path, target="label", test_fraction=0.25, seed=4, normalize=False)
    assert torch.equal(again.x_train, data.x_train) and not torch.equal(other.x_train, data.x_train)


def test_csv_regression_split_and_standardised(tmp_path):
    header, rows = table(50)
    path = write_csv(tmp_path / "t.csv", ["a", "b", "y"], [[r[0], r[1], r[3]] for r in rows])
    data = load_dataset("csv", path=path, target="y", seed=1)
    assert data.task == "regression" and (data.num_train, data.num_test) == (40, 10)
    raw = load_dataset("csv", path=path, target="y", seed=1, normalize=False)
    x, y = raw.x_train.double().numpy(), raw.y_train.double().numpy()
    np.testing.assert_allclose(data.x_test.numpy(), (raw.x_test.numpy() - x.mean(0)) / x.std(0), rtol=1e-5, atol=1e-5)
    assert (data.target_mean, data.target_std) == (pytest.approx(y.mean()), pytest.approx(y.std()))
    np.testing.assert_allclose(raw.y_train.numpy(), 0.5 * raw.x_train[:, 0].numpy() + 1, rtol=1e-6)  # rows kept whole


def test_csv_task_inferred_from_the_target(tmp_path):
    few = [[i, i % 3] for i in range(30)]
    many = [[i, i % (MAX_INFERRED_CLASSES + 1)] for i in range(60)]
    path = write_csv(tmp_path / "few.csv", ["a", "t"], few)
    assert load_dataset("csv", path=path, target="t").task == "classification"
    assert load_dataset("csv", path=path, target="t", task="regression").task == "regression"
    assert load_dataset("csv", path=write_csv(tmp_path / "many.csv", ["a", "t"], many), target="t").task == "regression"
    assert (
        load_dataset(
            "csv", path=write_csv(tmp_path / "f.csv", ["a", "t"], [[i, i / 7] for i in range(30)]), target="t"
        ).task
        == "regression"
    )


def test_csv_numeric_classes_in_numeric_order(tmp_path):
    rows = [[i, (2, 9, 10)[i % 3]] for i in range(30)]
    data = load_dataset("csv", path=write_csv(tmp_path / "n.csv", ["a", "t"], rows), target="t", normalize=False)
    assert data.class_names == ("2", "9", "10")
    assert [data.class_names[k] for k in data.y_train.tolist()] == [
        str((2, 9, 10)[int(a) % 3]) for a in data.x_train[:, 0]
    ]
    spelled = [[i, ("9", "9.0", "2.5")[i % 3]] for i in range(30)]  # 9 and 9.0 are one class
    data = load_dataset(
        "csv", path=write_csv(tmp_path / "s.csv", ["a", "t"], spelled), target="t", task="classification"
    )
    assert data.class_names == ("2.5", "9")


def test_csv_two_files_keep_their_rows_and_map_test_classes(tmp_path):
    train = write_csv(tmp_path / "train.csv", ["label", "a"], [[("x", "y", "z")[i % 3], i] for i in range(9)])
    test = write_csv(
        tmp_path / "test.csv", ["a", "label"], [[i, ("z", "x")[i % 2]] for i in range(4)]
    )  # columns reordered
    data = load_dataset("csv", train=train, test=test, target="label", normalize=False)
    assert data.name == "csv/train" and data.class_names == ("x", "y", "z")
    assert data.x_test[:, 0].tolist() == [0, 1, 2, 3] and data.y_test.tolist() == [2, 0, 2, 0]
    assert data.num_train == 9


def test_csv_blank_lines_bom_and_spaces(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("\ufeffa , t\n\n1, 0\n2 ,1\n\n3,0\n4,1\n5,0\n6,1\n", encoding="utf-8")
    data = load_dataset("csv", train=str(path), test=str(path), target="t")
    assert data.feature_names == ("a",) and data.num_train == 6


CSV_DEFECTS = {
    "no such column": (
        {"t.csv": "a,b\n1,2\n"},
        {"path": "t.csv", "target": "y"},
        ["data.target", "'y'", "columns: a, b"],
    ),
    "headerless file": (
        {"t.csv": "1,2\n3,4\n"},
        {"path": "t.csv", "target": "y"},
        ["first line must name the columns"],
    ),
    "text feature": (
        {"t.csv": "a,colour,y\n1,2,0\n2,red,1\n"},
        {"path": "t.csv", "target": "y"},
        ["t.csv", "column 'colour' is not numeric", "line 3", "'red'"],
    ),
    "empty feature cell": ({"t.csv": "a,b,y\n1,,0\n"}, {"path": "t.csv", "target": "y"}, ["column 'b'", "empty cell"]),
    "NaN feature": ({"t.csv": "a,b,y\n1,nan,0\n"}, {"path": "t.csv", "target": "y"}, ["column 'b'", "NaN", "line 2"]),
    "inf target": (
        {"t.csv": "a,y\n" + "".join(f"{i},{i}.5\n" for i in range(9)) + "9,inf\n"},
        {"path": "t.csv", "target": "y"},
        ["target column 'y'", "infinite", "line 11"],
    ),
    "empty target cell": (
        {"t.csv": "a,y\n1,\n"},
        {"path": "t.csv", "target": "y"},
        ["target column 'y'", "empty cell", "line 2"],
    ),
    "ragged line": (
        {"t.csv": "a,b,y\n1,2,3\n4,5\n"},
        {"path": "t.csv", "target": "y"},
        ["t.csv", "line 3 has 2 fields"],
    ),
    "duplicate column": ({"t.csv": "a,a,y\n1,2,3\n"}, {"path": "t.csv", "target": "y"}, ["column 'a' twice"]),
    "no rows": ({"t.csv": "a,y\n"}, {"path": "t.csv", "target": "y"}, ["t.csv", "no rows"]),
    "empty file": ({"t.csv": ""}, {"path": "t.csv", "target": "y"}, ["t.csv", "empty"]),
    "not UTF-8": ({"t.csv": b"a,y\n\xff\xfe,1\n"}, {"path": "t.csv", "target": "y"}, ["t.csv", "not UTF-8"]),
    "only target": ({"t.csv": "y\n1\n"}, {"path": "t.csv", "target": "y"}, ["no feature column"]),
    "text target for regression": (
        {"t.csv": "a,y\n1,cat\n"},
        {"path": "t.csv", "target": "y", "task": "regression"},
        ["target column 'y' is not numeric", "line 2", "data.task"],
    ),
    "test class unseen": (
        {"tr.csv": "a,y\n1,cat\n2,dog\n", "te.csv": "a,y\n1,emu\n"},
        {"train": "tr.csv", "test": "te.csv", "target": "y"},
        ["te.csv", "line 2", "'emu'", "cat, dog"],
    ),
    "columns differ": (
        {"tr.csv": "a,y\n1,2\n", "te.csv": "b,y\n1,2\n"},
        {"train": "tr.csv", "test": "te.csv", "target": "y"},
        ["te.csv", "column 'a'"],
    ),
    "missing file": ({}, {"path": "absent.csv", "target": "y"}, ["data.path", "absent.csv", "no such file"]),
    "path and train": (
        {"t.csv": "a,y\n1,2\n"},
        {"path": "t.csv", "train": "t.csv", "target": "y"},
        ["data.path", "data.train"],
    ),
    "train without test": ({"t.csv": "a,y\n1,2\n"}, {"train": "t.csv", "target": "y"}, ["data.test is required"]),
    "nothing": ({}, {"target": "y"}, ["data.path is required"]),
    "fraction with two files": (
        {"t.csv": "a,y\n1,2\n"},
        {"train": "t.csv", "test": "t.csv", "target": "y", "test_fraction": 0.3},
        ["data.test_fraction"],
    ),
    "seed with two files": (
        {"t.csv": "a,y\n1,2\n"},
        {"train": "t.csv", "test": "t.csv", "target": "y", "seed": 1},
        ["data.seed"],
    ),
    "bad task": (
        {"t.csv": "a,y\n1,2\n"},
        {"path": "t.csv", "target": "y", "task": "ranking"},
        ["data.task", "'ranking'"],
    ),
    "fraction 1": (
        {"t.csv": "a,y\n1,2\n"},
        {"path": "t.csv", "target": "y", "test_fraction": 1.0},
        ["data.test_fraction"],
    ),
    "split leaves nothing": (
        {"t.csv": "a,y\n1,2.5\n2,3.5\n"},
        {"path": "t.csv", "target": "y", "test_fraction": 0.1},
        ["data.test_fraction=0.1", "empty", "2 rows"],
    ),
    "class too rare to stratify": (
        {"t.csv": "a,y\n1,cat\n2,cat\n3,dog\n4,cat\n"},
        {"path": "t.csv", "target": "y"},
        ["t.csv", "class 'dog' has one row", "data.train"],
    ),
    "test too small to stratify": (
        {"t.csv": "a,y\n" + "".join(f"{i},{i % 3}\n" for i in range(9))},
        {"path": "t.csv", "target": "y", "test_fraction": 0.2},
        ["data.test_fraction=0.2", "stratified", "t.csv"],
    ),
}


@pytest.mark.parametrize("case", list(CSV_DEFECTS))
def test_csv_defect_is_one_line_naming_the_file_or_option(case, tmp_path, monkeypatch):
    files, options, needles = CSV_DEFECTS[case]
    monkeypatch.chdir(tmp_path)
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with raises_data_error(*needles):
        load_dataset("csv", **options)


def test_csv_target_is_required():
    with raises_data_error("data.target is required", "'csv'"):
        load_dataset("csv", path="t.csv")


# image-folder.


def test_image_folder_reads_classes_and_pixels(tmp_path):
    root = image_folder(tmp_path / "shapes")
    data = load_dataset("image-folder", root=root)
    assert data.name == "image-folder/shapes" and data.class_names == ("circle", "square")
    assert data.input_shape == (3, 10, 12) and data.num_train == 6 and data.num_test == 6
    assert data.y_train.tolist() == [0, 0, 0, 1, 1, 1]
    pixels = np.asarray(Image.open(tmp_path / "shapes" / "train" / "square" / "1.png"))
    np.testing.assert_allclose(data.x_train[4].permute(1, 2, 0).numpy(), pixels / 255.0, atol=1e-6)


def test_image_folder_resizes_and_converts_to_grayscale(tmp_path):
    root = image_folder(tmp_path / "s", sizes=(10, 12))
    assert load_dataset("image-folder", root=root, size=8).input_shape == (3, 8, 8)
    data = load_dataset("image-folder", root=root, size=[6, 9], grayscale=True)
    assert data.input_shape == (1, 6, 9) and 0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1


def test_image_folder_test_classes_follow_training_indices(tmp_path):
    root = image_folder(tmp_path / "s", classes={"train": ["a", "b", "c"], "test": ["c"]}, count=2)
    data = load_dataset("image-folder", root=root)
    assert data.num_classes == 3 and data.y_test.tolist() == [2, 2]


def test_image_folder_defects(tmp_path):
    root = tmp_path / "s"
    image_folder(root, classes={"train": ["a", "b"]})
    with raises_data_error("data.root", "test", "ImageFolder"):
        load_dataset("image-folder", root=str(root))
    image_folder(root, classes={"test": ["a", "zebra"]})
    with raises_data_error(os.path.join("test", "zebra"), "'zebra'", "classes: a, b"):
        load_dataset("image-folder", root=str(root))
    with raises_data_error("data.root", "not a directory"):
        load_dataset("image-folder", root=str(tmp_path / "absent"))
    for size in (0, [3], [2, "x"], True):
        with raises_data_error("data.size"):
            load_dataset("image-folder", root=str(root), size=size)
    with raises_data_error("data.grayscale"):
        load_dataset("image-folder", root=str(root), grayscale="yes")


def test_image_folder_unreadable_image_and_sizes_that_differ(tmp_path):
    root = tmp_path / "s"
    image_folder(root)
    broken = root / "test" / "square" / "9.png"
    broken.write_bytes(b"not a png")
    with raises_data_error(str(broken), "cannot read the image", "Pillow"):
        load_dataset("image-folder", root=str(root))
    broken.unlink()
    Image.fromarray(np.zeros((5, 5, 3), dtype=np.uint8)).save(root / "test" / "circle" / "0.png")
    with raises_data_error("0.png", "5x5", "10x12", "data.size"):
        load_dataset("image-folder", root=str(root))
    assert load_dataset("image-folder", root=str(root), size=[10, 12]).num_test == 6


def test_image_folder_empty_class_folder(tmp_path):
    root = tmp_path / "s"
    image_folder(root)
    (root / "train" / "blank").mkdir()
    with raises_data_error(str(root / "train"), "no valid file", "blank"):
        load_dataset("image-folder", root=str(root))


# The container and the command line.


def test_class_names_must_match_the_classes():
    data = Dataset(
        "toy",
        "classification",
        torch.zeros(4, 2),
        torch.tensor([0, 1, 0, 1]),
        torch.zeros(2, 2),
        torch.tensor([0, 1]),
        (2,),
        2,
        class_names=("a", "b"),
    )
    validate(data)
    with raises_data_error("class_names", "num_classes=2"):
        validate(dataclasses.replace(data, class_names=("a",)))


def test_the_loaders_from_a_toml_config(tmp_path):
    from bayesprune.pipeline.config import load_config

    header, rows = table(30)
    csv_path = write_csv(tmp_path / "animals.csv", header, rows)
    image_root = image_folder(tmp_path / "shapes")
    for section, name, shape in (
        (f'dataset = "csv"\npath = "{csv_path}"\ntarget = "label"\ntask = "classification"', "csv/animals", (3,)),
        (
            f'dataset = "image-folder"\nroot = "{image_root}"\nsize = [6, 6]\ngrayscale = true',
            "image-folder/shapes",
            (1, 6, 6),
        ),
    ):
        (tmp_path / "c.toml").write_text(f"[data]\n{section}\n")
        config = load_config(str(tmp_path / "c.toml"))
        data = load_dataset(config.data.dataset, **config.data.options)
        assert (data.name, data.input_shape, data.task) == (name, shape, "classification")


def test_a_run_on_an_npz_of_digits(tmp_path):
    path = write_npz(tmp_path / "my-digits.npz", digits_arrays(n_train=200, n_test=60))
    out = tmp_path / "run"
    status = main(
        [
            "run",
            "sbnn-digits",
            "--out",
            str(out),
            "--quiet",
            "--set",
            "data.dataset='npz'",
            "--set",
            f"data.path='{path}'",
            "--set",
            "train.epochs=2",
            "--set",
            "baseline.enabled=false",
            "--set",
            "data.batch_size='auto'",
            "--set",
            "train.validation=0.2",
        ]
    )
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["dataset"] == "npz/my-digits" and metrics["task"] == "classification"
    assert metrics["n_validation"] == 40


CLI_DEFECTS = {
    "npz missing array": (
        lambda tmp: write_npz(tmp / "d.npz", {k: v for k, v in digits_arrays().items() if k != "x_test"}),
        "npz",
        "path",
        "'x_test'",
    ),
    "npz absent": (lambda tmp: str(tmp / "absent.npz"), "npz", "path", "absent.npz"),
    "csv text feature": (
        lambda tmp: write_csv(tmp / "t.csv", ["a", "colour", "y"], [[1, "red", 0], [2, "blue", 1]]),
        "csv",
        "path",
        "'colour'",
    ),
    "image folder without test": (
        lambda tmp: image_folder(tmp / "imgs", classes={"train": ["a"]}),
        "image-folder",
        "root",
        "test",
    ),
}


@pytest.mark.parametrize("case", list(CLI_DEFECTS))
def test_a_bad_file_is_one_line_exit_2_and_nothing_written(case, tmp_path, capsys):
    make, dataset, option, named = CLI_DEFECTS[case]
    value = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    extra = ["--set", "data.target='y'"] if dataset == "csv" else []
    status = main(
        [
            "run",
            "sbnn-digits",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
            "--set",
            f"data.dataset='{dataset}'",
            "--set",
            f"data.{option}='{value}'",
            *extra,
            "--set",
            "train.epochs=1",
            "--set",
            "baseline.enabled=false",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("bayesprune: error:") and err.count("\n") == 1 and named in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
