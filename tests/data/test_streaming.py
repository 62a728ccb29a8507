"""Rows read on demand give the minibatches a tensor gives; augmentation against a brute-force search of
crops; an image folder and a user's DataLoader streamed; every defect one DataError line."""

import dataclasses
import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import bayesprune as bp
from bayesprune.core.early_stopping import hold_out
from bayesprune.core.errors import ConfigError, DataError
from bayesprune.core.loop import TensorBatches
from bayesprune.data import Dataset, load_dataset
from bayesprune.data.streaming import Augment, Rows, _one_line, augment_option, loader_rows
from bayesprune.pipeline.evaluation import batched_predictions, pruning_curve
from helpers import raises_data_error


def images(n=50, shape=(3, 6, 5), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(n, *shape, generator=generator), torch.randint(0, 3, (n,), generator=generator)


def batches_of(x, y, **options):
    return [(bx.clone(), by.clone()) for bx, by in TensorBatches(x, y, batch_size=8, seed=3, **options)]


def test_rows_index_as_the_tensor_they_read():
    x, y = images()
    rows = Rows(TensorDataset(x, y), x.shape[1:], where="train")
    assert len(rows) == 50 and rows.shape == x.shape and rows.dtype == torch.float32
    for index in (7, -1, slice(3, 9), slice(None, None, 4), torch.tensor([4, 0, 4]), x[:, 0, 0, 0] > 0.5):
        assert torch.equal(rows[index], x[index])
    assert torch.equal(rows[torch.tensor([[1, 2], [3, 4]])], x[torch.tensor([[1, 2], [3, 4]])])


def test_streamed_minibatches_are_the_tensors_minibatches_in_order_and_after_resuming():
    x, y = images()
    rows = Rows(TensorDataset(x, y), x.shape[1:])
    batches = TensorBatches(rows, y, batch_size=8, seed=3)
    expected = TensorBatches(x, y, batch_size=8, seed=3)
    for _ in range(2):  # two epochs: each reshuffled the same way
        got, want = list(batches), list(expected)
        assert len(got) == len(want) == len(batches) == 7
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(gx, wx) and torch.equal(gy, wy)
    state = batches.generator.get_state()
    after = list(expected)
    batches.generator.set_state(state)
    assert all(torch.equal(g[0], w[0]) for g, w in zip(batches, after, strict=True))
    # augmented: the tensor's path (the data held on its device, augmented there) gives the streamed batches
    augment = Augment(crop_padding=1, flip=True)
    torch.manual_seed(4)
    streamed = batches_of(rows, y, augment=augment)
    torch.manual_seed(4)
    held = batches_of(x, y, augment=augment)
    assert all(torch.equal(s[0], h[0]) and torch.equal(s[1], h[1]) for s, h in zip(streamed, held, strict=True))
    assert not torch.equal(streamed[0][0], batches_of(x, y)[0][0])


def test_a_held_out_part_of_streamed_rows_keeps_its_training_rows_streamed():
    x, y = images(n=30)
    held = Dataset("t", "classification", x, y, x, y, tuple(x.shape[1:]), 3)
    streamed = dataclasses.replace(held, x_train=Rows(TensorDataset(x, y), x.shape[1:]))
    (rest, x_held, y_held), (want, x_want, y_want) = hold_out(streamed, 0.2, seed=1), hold_out(held, 0.2, seed=1)
    assert isinstance(rest.x_train, Rows) and len(rest.x_train) == 24
    assert torch.equal(rest.x_train[torch.arange(24)], want.x_train) and torch.equal(rest.y_train, want.y_train)
    assert torch.equal(x_held, x_want) and torch.equal(y_held, y_want)
    assert torch.equal(
        next(iter(TensorBatches(rest.x_train, rest.y_train, batch_size=5, seed=2)))[0],
        next(iter(TensorBatches(want.x_train, want.y_train, batch_size=5, seed=2)))[0],
    )


def test_rows_decoded_in_a_worker_process_are_the_same():
    x, y = images(n=20)
    rows = Rows(TensorDataset(x, y), x.shape[1:], workers=1)
    assert torch.equal(torch.cat([bx for bx, _ in TensorBatches(rows, y, batch_size=6, shuffle=False)]), x)


def _crops(padded, h, w):
    return [
        padded[:, i : i + h, j : j + w] for i in range(padded.shape[1] - h + 1) for j in range(padded.shape[2] - w + 1)
    ]


def test_crop_and_flip_give_a_window_of_the_padded_image_each_offset_and_side_drawn():
    x, _ = images(n=400, shape=(2, 5, 6))
    torch.manual_seed(0)
    out = Augment(crop_padding=2, flip=True)(x)
    assert out.shape == x.shape
    seen = set()
    for image, augmented in zip(x, out):
        windows = _crops(torch.nn.functional.pad(image, (2, 2, 2, 2)), 5, 6)
        matches = [(k, side) for k, window in enumerate(windows) for side, view in ((0, window), (1, window.flip(-1)))]
        found = [
            (k, side) for k, side in matches if torch.equal(augmented, windows[k] if side == 0 else windows[k].flip(-1))
        ]
        assert found, "not a (mirrored) window of the zero-padded image"
        seen.add(found[0])
    assert len({k for k, _ in seen}) == 25 and {side for _, side in seen} == {0, 1}  # every offset, both sides
    sides = [side for _, side in seen]
    assert 0.3 < np.mean(sides) < 0.7
    assert torch.equal(Augment()(x), x)


def test_augmentation_applies_to_training_batches_only():
    x, y = images(n=16)
    torch.manual_seed(1)
    flipped = [bx for bx, _ in TensorBatches(x, y, batch_size=16, shuffle=False, augment=lambda b: b.flip(-1))]
    assert torch.equal(flipped[0], x.flip(-1))
    assert torch.equal(next(iter(TensorBatches(x, y, batch_size=16, shuffle=False)))[0], x)


def test_augment_option_and_its_refusals():
    assert augment_option(None, None, (3, 8, 8), "d") is None
    augment = augment_option(["crop", "flip"], None, (3, 8, 8), "d")
    assert (augment.crop_padding, augment.flip) == (4, True)
    assert augment_option(["flip"], None, (1, 4, 4), "d").crop_padding == 0
    with raises_data_error("data.augment", "images (C, H, W)", "table.npz", "(4,)"):
        augment_option(["flip"], None, (4,), "table.npz")
    with raises_data_error("data.augment", "'crop'"):
        augment_option(["rotate"], None, (3, 8, 8), "d")
    with raises_data_error("data.crop_padding", "no 'crop'"):
        augment_option(["flip"], 2, (3, 8, 8), "d")
    with raises_data_error("data.crop_padding", "from 1 to"):
        augment_option(["crop"], 9, (3, 8, 8), "d")


def image_folder(root, count=4):
    rng = np.random.default_rng(0)
    for part in ("train", "test"):
        for name in ("a", "b"):
            (root / part / name).mkdir(parents=True)
            for k in range(count):
                Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(root / part / name / f"{k}.png")
    return str(root)


def test_a_streamed_image_folder_reads_the_pixels_the_loaded_one_holds(tmp_path):
    root = image_folder(tmp_path / "imgs")
    held = load_dataset("image-folder", root=root)
    streamed = load_dataset("image-folder", root=root, stream=True, augment=["crop", "flip"], crop_padding=1)
    assert isinstance(streamed.x_train, Rows) and isinstance(streamed.x_test, Rows)
    assert streamed.num_train == held.num_train == 8 and streamed.input_shape == (3, 6, 5)
    assert torch.equal(streamed.x_train[torch.arange(8)], held.x_train)
    assert torch.equal(streamed.y_train, held.y_train) and torch.equal(streamed.x_test[torch.arange(8)], held.x_test)
    assert held.augment is None and (streamed.augment.crop_padding, streamed.augment.flip) == (1, True)


#: Each method's packaged config and its settings for a run of a few seconds.
STREAMED_RUNS = {
    "sbnn": ("default", ["sbnn.predictive_samples=3"]),
    "unit-gates": ("unit-gates-digits", ["unit-gates.finetune_epochs=1"]),
    "pbp": ("pbp-digits", ["pbp.prior_epochs=1", "pbp.prior_mask_epochs=1", "pbp.mc_samples=3", "pbp.prior_samples=3"]),
}


@pytest.mark.parametrize("method", list(STREAMED_RUNS))
def test_a_run_on_a_streamed_image_folder_reports_and_exports_the_numbers_of_the_loaded_one(method, tmp_path, capsys):
    """Its splits read a batch at a time everywhere a number is computed (the pruning curve, the plain
    baseline, unit gates' per-epoch error, PBP's Gibbs errors and certificate, export's error of its file):
    the oracle is the same run with every image loaded into one tensor."""
    from bayesprune.cli import main

    root = image_folder(tmp_path / "imgs", count=6)
    results = []
    for stream in ("false", "true"):
        out = tmp_path / f"run-{stream}"
        settings = [
            "data.dataset='image-folder'",
            f"data.root='{root}'",
            f"data.stream={stream}",
            "data.batch_size=6",
            "model.architecture='mlp'",
            "model.hidden=[8]",
            "train.epochs=2",
            "prune.sparsities=[0.0, 0.5]",
            *STREAMED_RUNS[method][1],
        ]
        config = STREAMED_RUNS[method][0]
        assert main(["run", config, "--out", str(out), "--quiet", *[a for s in settings for a in ("--set", s)]]) == 0
        capsys.readouterr()
        assert main(["export", str(out), "--out", str(tmp_path / f"net-{stream}.pt2"), "--json"]) == 0
        results.append((json.loads((out / "metrics.json").read_text()), json.loads(capsys.readouterr().out)))
    (held, held_export), (streamed, streamed_export) = results
    numbers = {key for key, value in held.items() if "seconds" not in key and not isinstance(value, str)}
    assert {key: streamed[key] for key in numbers} == {key: held[key] for key in numbers}
    assert streamed_export["test_error"] == pytest.approx(held_export["test_error"], rel=1e-6)


def test_a_streamed_image_folder_refuses_a_bad_file_in_one_line_when_loaded_or_read(tmp_path):
    root = tmp_path / "imgs"
    image_folder(root)
    (root / "train" / "b" / "2.png").write_bytes(b"not a png")
    with raises_data_error("2.png", "cannot read the image"):  # its header: before training
        load_dataset("image-folder", root=str(root), stream=True)
    whole = (root / "train" / "a" / "1.png").read_bytes()
    (root / "train" / "b" / "2.png").write_bytes(whole[:60])  # a header, then the pixels cut short
    data = load_dataset("image-folder", root=str(root), stream=True)
    with raises_data_error("2.png", "cannot read the image"):  # its pixels, when read
        list(TensorBatches(data.x_train, data.y_train, batch_size=4))
    # In a worker process the error arrives with the worker's traceback in its message: its last line.
    worker = DataError(
        "Caught DataError in DataLoader worker process 0.\nOriginal Traceback:\n  File x\nDataError: a.png: bad"
    )
    assert _one_line(worker) == "a.png: bad"
    with raises_data_error("data.workers", "data.stream"):
        load_dataset("image-folder", root=str(root), workers=2)


class Generated(torch.utils.data.Dataset):
    def __init__(self, x, y, bad_row=None, bad=None):
        self.x, self.y, self.bad_row, self.bad = x, y, bad_row, bad

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return (self.bad, self.y[i]) if i == self.bad_row else (self.x[i], self.y[i])


def test_a_shuffling_dataloader_streams_its_rows_with_labels_in_index_order():
    x, y = images(n=30)
    rows, labels = loader_rows(DataLoader(Generated(x, y), batch_size=7, shuffle=True), "train")
    assert torch.equal(labels, y) and torch.equal(rows[torch.arange(30)], x)


def test_a_dataloader_of_the_wrong_shapes_or_types_is_one_line_naming_it():
    x, y = images(n=12)
    with raises_data_error("train", "batch 3 cannot be read", "[3, 6, 4]"):
        loader_rows(DataLoader(Generated(x, y, 9, torch.zeros(3, 6, 4)), batch_size=4), "train")
    with raises_data_error("train", "batch 1 has x (4, 3, 6, 5) of torch.bool", "expected float x"):
        loader_rows(DataLoader(TensorDataset(x.bool(), y), batch_size=4), "train")
    for bad, when_read in ((torch.zeros(3, 6, 4), "(3, 6, 5)"), (torch.zeros(3, 6, 5, dtype=torch.bool), "bool")):
        with raises_data_error("train", when_read):  # a dataset with targets: found when the row is read
            data = Generated(x, y, 9, bad)
            data.targets = y
            rows, labels = loader_rows(DataLoader(data, batch_size=4), "train")
            list(TensorBatches(rows, labels, batch_size=4))
    with raises_data_error("train", "y of shape (B,)"):
        loader_rows(DataLoader(TensorDataset(x, y[:, None].expand(12, 2)), batch_size=4), "train")
    with raises_data_error("train", "(x, y) tensors"):
        loader_rows(DataLoader(TensorDataset(x), batch_size=4), "train")

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(zip(x, y))

    with raises_data_error("train", "iterable"):
        loader_rows(DataLoader(Stream(), batch_size=4), "train")


class Items(torch.utils.data.Dataset):
    def __init__(self, item, n=12):
        self.item, self.n = item, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.item(i)


def test_a_dataloader_read_into_tensors_refuses_what_a_streamed_one_refuses():
    """fit_method's DataLoaders read whole (stream = false): the batches a streamed one refuses, in one
    line naming the part, where torch.cat and indexing raised their own errors before."""
    x, y = images(n=12, shape=(1, 4, 4))
    bad = {
        "batch 3 has x (4, 1, 4, 5)": Items(lambda i: (torch.rand(1, 4, 4 if i < 8 else 5), y[i])),
        "batch 1 is not a pair": Items(lambda i: {"x": x[i], "y": y[i]}),
        "batch 1 is not a pair of (x, y) tensors": Items(lambda i: (x[i], "cat")),
        "of torch.bool": TensorDataset(x.bool(), y),
    }
    for needle, items in bad.items():
        for stream in (False, True):
            with raises_data_error("train: the DataLoader's", needle):
                bp.fit_method("sbnn", nn.Flatten(), DataLoader(items, batch_size=4), (x, y), epochs=1, stream=stream)
    with raises_data_error("test: the DataLoader's batch 1 is not a pair"):
        bp.fit_method("sbnn", nn.Flatten(), (x, y), DataLoader(TensorDataset(x), batch_size=4), epochs=1)
    with raises_data_error("train: the DataLoader yields no batch"):
        bp.fit_method("sbnn", nn.Flatten(), DataLoader(TensorDataset(x[:0], y[:0])), (x, y), epochs=1, stream=False)
    with raises_data_error("train: the DataLoader's dataset is empty"):  # streamed, as by default
        bp.fit_method("sbnn", nn.Flatten(), DataLoader(TensorDataset(x[:0], y[:0])), (x, y), epochs=1)


def test_fit_method_streaming_a_dataloader_fits_as_on_the_tensors():
    x, y = images(n=40, shape=(1, 4, 4), seed=2)

    def fitted(train, **options):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Flatten(), nn.Linear(16, 5), nn.ReLU(), nn.Linear(5, 3))
        return bp.fit_method("sbnn", net, train, (x, y), epochs=2, batch_size=16, device="cpu", **options)

    held = fitted((x, y))
    streamed = fitted(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True), stream=True)
    assert streamed.history.epoch_losses == pytest.approx(held.history.epoch_losses, rel=1e-6)
    # two epochs learn nothing: both fits are checked, found not to have learned and fitted again alike
    assert held.refitted is not None and streamed.refitted == held.refitted
    with raises_data_error("stream", "not one"):
        fitted((x, y), stream=True)
    with pytest.raises(ConfigError, match="^sbnn.keep must be 'validation' for training rows read a minibatch"):
        fitted(DataLoader(TensorDataset(x, y), batch_size=16), stream=True, options={"starts": [1, 2]})


def test_a_memory_mapped_npz_reads_the_rows_the_loaded_one_holds(tmp_path):
    x, y = images(n=30, shape=(2, 3, 4))
    arrays = {"x_train": x.numpy(), "y_train": y.numpy(), "x_test": x[:5].numpy(), "y_test": y[:5].numpy()}
    np.savez(tmp_path / "d.npz", **arrays)
    held = load_dataset("npz", path=str(tmp_path / "d.npz"))
    mapped = load_dataset("npz", path=str(tmp_path / "d.npz"), stream=True)
    assert isinstance(mapped.x_train, Rows) and isinstance(mapped.x_train.items.array, np.memmap)
    assert torch.equal(mapped.x_train[torch.arange(30)], held.x_train) and torch.equal(mapped.y_train, held.y_train)
    again = pickle.loads(pickle.dumps(mapped.x_train.items))  # as a worker process receives it: mapped again
    assert isinstance(again.array, np.memmap) and torch.equal(torch.stack(again.__getitems__([4, 1])), x[[4, 1]])
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    with raises_data_error("c.npz", "compressed"):
        load_dataset("npz", path=str(tmp_path / "c.npz"), stream=True)
    flat = {**arrays, "x_train": arrays["x_train"].reshape(30, -1), "x_test": arrays["x_test"].reshape(5, -1)}
    np.savez(tmp_path / "t.npz", **flat)
    with raises_data_error("data.normalize", "data.stream"):
        load_dataset("npz", path=str(tmp_path / "t.npz"), stream=True)
    assert len(load_dataset("npz", path=str(tmp_path / "t.npz"), stream=True, normalize=False).x_train) == 30


def test_a_streamed_test_split_gives_the_pruning_curve_of_the_tensor():
    """The pruning curve read a batch at a time equals the one of the tensor (point and Monte-Carlo
    predictive); batches of 7 rows see the same posterior draws as the whole tensor, not draws of their own."""
    x, y = images(n=40, shape=(1, 4, 4), seed=2)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 5), nn.ReLU(), nn.Linear(5, 3))
    fitted = bp.fit_method(
        "sbnn", net, (x, y), epochs=1, batch_size=16, device="cpu", options={"predictive_samples": 4}
    )
    held = Dataset("t", "classification", x, y, x, y, (1, 4, 4), 3)
    streamed = dataclasses.replace(held, x_test=Rows(TensorDataset(x, y), (1, 4, 4)))

    def after(run):  # the result and the state torch's generator is left in
        torch.manual_seed(5)
        return run(), torch.get_rng_state()

    curve, state = after(lambda: pruning_curve(fitted, held, sparsities=[0.0, 0.5]))
    streamed_curve, streamed_state = after(lambda: pruning_curve(fitted, streamed, sparsities=[0.0, 0.5]))
    assert streamed_curve == curve and torch.equal(streamed_state, state) and "test_error_mc" in curve[0]
    whole, state = after(lambda: fitted.predictions(x, samples=[0, 4]))
    batched, batched_state = after(lambda: batched_predictions(fitted, streamed.x_test, samples=[0, 4], batch_size=7))
    assert torch.equal(batched_state, state)
    for got, want in zip(batched, whole, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(whole[1][:7], fitted.predictions(x[:7], samples=[4])[0], atol=1e-3)  # draws differ


class _Generated(torch.utils.data.Dataset):
    """Images made from their index (no ``targets`` attribute): what a user's dataset too large to hold is."""

    def __init__(self, n, shape=(3, 8, 8)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(int(index))
        return torch.rand(self.shape, generator=generator), int(index) % 3


def test_reading_the_labels_of_a_loader_without_targets_lets_each_batch_go():
    """The reported case: without ``targets``, loader_rows kept every batch's inputs while it read the labels
    (3.1 GB against 0.87 GB). Oracle: weak references to the collated inputs; when the last batch is made, no
    earlier batch is still alive, and the labels are every row's."""
    import weakref

    made = []

    def collate(samples):
        alive = sum(ref() is not None for ref in made)
        x, y = torch.utils.data.default_collate(samples)
        made.append(weakref.ref(x))
        collate.most_alive = max(getattr(collate, "most_alive", 0), alive)
        return x, y

    rows, y = loader_rows(DataLoader(_Generated(40), batch_size=4, collate_fn=collate), "train")
    assert len(made) >= 10 and collate.most_alive <= 1, collate.most_alive
    assert torch.equal(y, torch.arange(40) % 3) and isinstance(rows, Rows) and rows.shape == (40, 3, 8, 8)


@pytest.mark.parametrize("stream", [None, False])
def test_fit_method_streams_a_dataloader_unless_asked_not_to(stream):
    """The reported case: fit_method read a DataLoader into one tensor unless stream=True was passed. By
    default its rows are read on demand (the fit's inputs a Rows); stream=False reads them into memory."""
    loader = DataLoader(_Generated(48), batch_size=16)
    net = nn.Sequential(nn.Flatten(), nn.Linear(192, 8), nn.ReLU(), nn.Linear(8, 3))
    fitted = bp.fit_method("sparse-vd", net, loader, epochs=1, **({} if stream is None else {"stream": stream}))
    inputs = fitted.calibration.inputs
    assert isinstance(inputs, Rows) if stream is None else torch.is_tensor(inputs), type(inputs)
    assert len(inputs) == 48
