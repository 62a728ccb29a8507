"""Training rows read on demand, and the augmentation of image training batches.

:class:`Rows` stands where a :class:`~bayesprune.data.Dataset`'s ``x_train`` tensor stands when the
set is too large to hold: it has ``len()``, ``shape``, ``dtype`` and ``.to(device)``, and indexing it
(``rows[index_tensor]``, ``rows[:2]``) decodes just those rows. :class:`~bayesprune.core.loop.TensorBatches`
reads its minibatches through :meth:`Rows.read`, a :class:`torch.utils.data.DataLoader` whose batch
sampler is the shuffled order :class:`~bayesprune.core.loop.TensorBatches` draws (the same order as for a
tensor, and the same checkpointed generator), decoding in ``workers`` processes.

A row source is any map-style dataset: ``items[i]`` is the input ``x_i`` or a pair ``(x_i, y_i)`` (a
user's :class:`torch.utils.data.Dataset`, an image folder's files (:class:`ImageFiles`), a memory-mapped
array). A dataset with ``__getitems__`` is read a batch at a time. Each batch is checked as it is read:
an input of another shape, a non-numeric or non-finite one is one :class:`~bayesprune.core.errors.DataError`
line naming the source.

:class:`Augment` is the standard augmentation of image training batches (random crop with zero
padding, horizontal flip), drawn from torch's global generator (checkpointed with the loop) on the
batch's device; ``data.augment`` configures it (:func:`augment_option`).
"""

from __future__ import annotations

import functools
import numbers

import numpy as np
import torch
from torch.utils.data import DataLoader

from bayesprune.core.errors import DataError

#: The augmentations ``data.augment`` may list.
AUGMENTATIONS = ("crop", "flip")


def _stack(samples, *, shape: tuple, where: str) -> torch.Tensor:
    """The inputs of a list of items as one float32 batch, refusing an item of another shape or type."""
    xs = []
    for sample in samples:
        x = sample[0] if isinstance(sample, (tuple, list)) else sample
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(np.asarray(x))
        if not torch.is_tensor(x) or not (x.dtype.is_floating_point or x.dtype in (torch.uint8, torch.int64)):
            what = type(x).__name__ if not torch.is_tensor(x) else f"a tensor of dtype {x.dtype}"
            raise DataError(f"{where}: an item's input is {what}; expected a float tensor of shape {shape}")
        if tuple(x.shape) != shape:
            raise DataError(
                f"{where}: an item's input has shape {tuple(x.shape)}, expected {shape} (as the first item)"
            )
        xs.append(x.float())
    batch = torch.stack(xs)
    if not torch.isfinite(batch).all():
        raise DataError(f"{where}: an item's input has NaN or infinite values")
    return batch


def _one_line(error: BaseException) -> str:
    """A worker's error, re-raised by the DataLoader with its traceback: its last line, the error's own."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    return last.split(": ", 1)[1] if last.startswith(("DataError: ", "bayesprune.core.errors.DataError: ")) else last


class _Lists:
    """A batch sampler of given index chunks, each a list only when its turn comes (a million rows'
    indices as Python ints take tens of MB)."""

    def __init__(self, chunks):
        self.chunks = list(chunks)

    def __len__(self) -> int:
        return len(self.chunks)

    def __iter__(self):
        return (chunk.tolist() if torch.is_tensor(chunk) else list(chunk) for chunk in self.chunks)


def _workers_seed() -> torch.Generator:
    """The generator a DataLoader draws its workers' seed from: its own, so that reading rows leaves
    torch's global generator (the fit's draws) as it was."""
    return torch.Generator().manual_seed(0)


class Rows:
    """The inputs of a map-style dataset, read on demand, standing where an ``x_train`` tensor stands.

    Args:
        items: a map-style dataset; ``items[i]`` is ``x_i`` or ``(x_i, y_i)``, ``x_i`` a tensor (or
            array) of ``shape``.
        shape: the shape of one input, e.g. ``(3, 32, 32)``.
        where: what error messages name (a path, ``"train"``).
        workers: processes decoding rows for :meth:`read` (0: in this process).
        device: where indexed rows are put (:meth:`to`); they are decoded on the CPU.
    """

    dtype = torch.float32

    def __init__(self, items, shape, *, where: str = "data", workers: int = 0, device="cpu"):
        self.items, self.where, self.workers = items, where, int(workers)
        self.example_shape = tuple(int(n) for n in shape)
        self.device = torch.device(device)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self), *self.example_shape))

    @property
    def ndim(self) -> int:
        return 1 + len(self.example_shape)

    def to(self, device=None, *args, **kwargs) -> Rows:
        """These rows, indexed onto ``device`` (nothing is read)."""
        device = device if isinstance(device, (str, torch.device)) else kwargs.get("device", self.device)
        return Rows(self.items, self.example_shape, where=self.where, workers=self.workers, device=device)

    def float(self) -> Rows:
        return self

    def subset(self, rows: torch.Tensor) -> Rows:
        """The rows of the integer tensor ``rows``, still read on demand (a held-out split's training part)."""
        return Rows(
            _Subset(self.items, rows), self.example_shape, where=self.where, workers=self.workers, device=self.device
        )

    def __getitem__(self, index) -> torch.Tensor:
        """The rows ``index`` (an int, a slice, a list or an integer or boolean tensor) as a float32 tensor."""
        if isinstance(index, numbers.Integral):
            return self[[int(index)]][0]
        if isinstance(index, slice):
            index = range(*index.indices(len(self)))
        index = torch.as_tensor(index)
        if index.dtype == torch.bool:
            index = index.nonzero().flatten()
        rows = [int(i) % len(self) for i in index.flatten().tolist()]
        if not rows:
            return torch.empty((0, *self.example_shape), device=self.device)
        return next(iter(self.read([rows]))).reshape(*index.shape, *self.example_shape)

    def batches(self, batch_size: int):
        """Every row in index order, ``batch_size`` at a time (the last batch may be smaller), as
        ``torch.split(tensor, batch_size)`` gives them: what an evaluation reads."""
        return self.read(torch.arange(len(self)).split(int(batch_size)))

    def read(self, chunks):
        """The inputs of each list (or tensor) of row indices in ``chunks``, in order, on :attr:`device`."""
        loader = DataLoader(
            self.items,
            batch_sampler=_Lists(chunks),
            num_workers=self.workers,
            collate_fn=functools.partial(_stack, shape=self.example_shape, where=self.where),
            pin_memory=self.device.type == "cuda",
            generator=_workers_seed(),
        )
        batches = iter(loader)
        while True:
            try:
                x = next(batches)
            except StopIteration:
                return
            except DataError as error:  # raised in a worker, it arrives with the worker's traceback
                raise DataError(_one_line(error)) from None
            yield x.to(self.device, non_blocking=True)


class _Subset(torch.utils.data.Dataset):
    """Items ``rows`` of ``items`` (as :class:`torch.utils.data.Subset`, the indices kept in one tensor)."""

    def __init__(self, items, rows: torch.Tensor):
        self.items, self.rows = items, rows.to("cpu", torch.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        return self.items[int(self.rows[index])]

    def __getitems__(self, indices):
        rows = self.rows[torch.as_tensor(indices, dtype=torch.int64)].tolist()
        if hasattr(self.items, "__getitems__"):
            return self.items.__getitems__(rows)
        return [self.items[row] for row in rows]


class ArrayItems(torch.utils.data.Dataset):
    """The rows of an array, each read (as float32) when indexed: a memory map of an .npz member
    (:func:`~bayesprune.core.files.read_npz` with ``mapped``) reads only those rows from the file. A worker
    process maps the file again rather than receiving the array."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self.array[index], dtype=np.float32))

    def __getitems__(self, indices) -> list:
        return list(torch.from_numpy(np.array(self.array[np.asarray(indices)], dtype=np.float32)))

    def __getstate__(self) -> dict:
        a = self.array
        if not isinstance(a, np.memmap):
            return {"array": a}
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        return {"map": (a.filename, a.dtype, a.offset, a.shape, order)}

    def __setstate__(self, state: dict):
        if "array" in state:
            self.array = state["array"]
        else:
            filename, dtype, offset, shape, order = state["map"]
            self.array = np.memmap(filename, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


class ImageFiles(torch.utils.data.Dataset):
    """An image folder's files, each decoded when read (Pillow through a torchvision ``transform``).

    Args:
        samples: ``(path, label)`` pairs, as :class:`torchvision.datasets.ImageFolder` lists them.
        transform: turns a PIL image into a ``(C, H, W)`` tensor.
    """

    def __init__(self, samples, transform):
        self.samples, self.transform = list(samples), transform

    def __len__(self) -> int:
        return len(self.samples)

    def check(self, size: tuple[int, int] | None) -> None:
        """Open every file's header (no pixel decoded), refusing one Pillow cannot read or, where
        ``size`` (height, width) is given, one of another size: the defects found before training."""
        from PIL import Image

        for path, _ in self.samples:
            try:
                with Image.open(path) as image:
                    found = image.size[::-1]
            except Image.UnidentifiedImageError:
                raise DataError(f"{path}: cannot read the image (not a format Pillow reads)") from None
            except (OSError, ValueError, Image.DecompressionBombError) as err:
                raise DataError(f"{path}: cannot read the image ({' '.join(str(err).split())})") from None
            if size is not None and tuple(found) != tuple(size):
                raise DataError(
                    f"{path}: image is {found[0]}x{found[1]} but the others are {size[0]}x{size[1]}; "
                    "set data.size to resize every image"
                )

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        path = self.samples[index][0]
        try:
            with Image.open(path) as image:
                return self.transform(image.convert("RGB"))
        except Image.UnidentifiedImageError:
            raise DataError(f"{path}: cannot read the image (not a format Pillow reads)") from None
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DataError(f"{path}: cannot read the image ({' '.join(str(err).split())})") from None


class Augment:
    """Random crop with zero padding and horizontal flip of a batch of images ``(B, C, H, W)``.

    Each image is padded by ``crop_padding`` zeros on every side and cut back to ``H x W`` at an
    offset drawn uniformly from ``[0, 2 * crop_padding]`` in each direction, then mirrored left to
    right with probability 1/2 (``flip``), on the batch's device from torch's global generator.

    Args:
        crop_padding: zeros added on each side before cropping (0: no crop).
        flip: mirror half of the images.
    """

    def __init__(self, *, crop_padding: int = 0, flip: bool = False):
        self.crop_padding, self.flip = int(crop_padding), bool(flip)

    def __repr__(self) -> str:
        return f"Augment(crop_padding={self.crop_padding}, flip={self.flip})"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        p = self.crop_padding
        if p:
            padded = torch.nn.functional.pad(x, (p, p, p, p))
            dy = torch.randint(0, 2 * p + 1, (b, 1), device=x.device)
            dx = torch.randint(0, 2 * p + 1, (b, 1), device=x.device)
            rows = (dy + torch.arange(h, device=x.device))[:, None, :, None]
            cols = (dx + torch.arange(w, device=x.device))[:, None, None, :]
            batch = torch.arange(b, device=x.device)[:, None, None, None]
            channels = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
            x = padded[batch, channels, rows, cols]
        if self.flip:
            mirror = torch.rand(b, device=x.device) < 0.5
            x = torch.where(mirror[:, None, None, None], x.flip(-1), x)
        return x


def augment_option(augment, crop_padding, input_shape: tuple, where: str) -> Augment | None:
    """The :class:`Augment` of ``data.augment`` (a list of :data:`AUGMENTATIONS`) and
    ``data.crop_padding`` (default 4), or ``None`` when ``augment`` is empty or left out.

    Raises:
        DataError: an unknown augmentation, a bad padding, padding without ``"crop"``, or any
            augmentation of inputs that are not images ``(C, H, W)``.
    """
    if augment is None or (isinstance(augment, (list, tuple)) and not augment):
        if crop_padding is not None:
            raise DataError("data.crop_padding pads the images data.augment = ['crop'] crops; it lists no 'crop'")
        return None
    if not isinstance(augment, (list, tuple)) or any(a not in AUGMENTATIONS for a in augment):
        raise DataError(f"data.augment must be a list of {', '.join(map(repr, AUGMENTATIONS))}, got {augment!r}")
    if len(input_shape) != 3:
        raise DataError(f"data.augment applies to images (C, H, W); {where} has inputs of shape {tuple(input_shape)}")
    if crop_padding is not None and "crop" not in augment:
        raise DataError("data.crop_padding pads the images data.augment = ['crop'] crops; it lists no 'crop'")
    padding = 4 if crop_padding is None else crop_padding
    if not isinstance(padding, int) or isinstance(padding, bool) or not 1 <= padding <= min(input_shape[1:]):
        raise DataError(
            f"data.crop_padding must be an integer from 1 to the image's side {min(input_shape[1:])}, got {padding!r}"
        )
    return Augment(crop_padding=padding if "crop" in augment else 0, flip="flip" in augment)


def _checked_batches(loader, which: str, shape=None):
    """The ``(x, y)`` batches of ``loader``, each checked: a pair of tensors, ``x`` float of one shape
    (``shape``, else the first batch's), ``y`` one number per row; the first defect is one
    :class:`~bayesprune.core.errors.DataError` line naming ``which`` and the batch."""
    batches = iter(loader)
    number = 0
    while True:
        number += 1
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (RuntimeError, TypeError, ValueError) as error:  # the loader's collate_fn refusing a batch
            raise DataError(f"{which}: the DataLoader's batch {number} cannot be read: {_one_line(error)}") from None
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(torch.is_tensor(t) for t in batch)):
            raise DataError(f"{which}: the DataLoader's batch {number} is not a pair of (x, y) tensors")
        x, y = batch
        shape = tuple(x.shape[1:]) if shape is None else shape
        if not x.dtype.is_floating_point or tuple(x.shape[1:]) != shape or y.shape != (x.shape[0],):
            raise DataError(
                f"{which}: the DataLoader's batch {number} has x {tuple(x.shape)} of {x.dtype} and y {tuple(y.shape)}; "
                f"expected float x of shape (B, {', '.join(map(str, shape))}) and y of shape (B,)"
            )
        yield x, y


def loader_tensors(loader: DataLoader, which: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``(x, y)`` batch of a :class:`~torch.utils.data.DataLoader`, checked as :func:`loader_rows`
    checks them, read into two tensors.

    Raises:
        DataError: a batch of the wrong shapes or types, or no batch; the message names ``which``.
    """
    batches = list(_checked_batches(loader, which))
    if not batches:
        raise DataError(f"{which}: the DataLoader yields no batch")
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def loader_rows(loader: DataLoader, which: str) -> tuple[Rows, torch.Tensor]:
    """The inputs of a :class:`~torch.utils.data.DataLoader` over a map-style dataset as :class:`Rows`
    (decoded in the loader's ``num_workers`` processes) and its targets as a tensor.

    The targets are the dataset's ``targets`` where it has them (torchvision's datasets do), else the
    ``y`` of one pass over the loader; either way every batch read is checked: ``(x, y)`` tensors,
    ``x`` of one float shape, ``y`` one number per row.

    Raises:
        DataError: an iterable dataset (its rows cannot be read by index), or a batch of the wrong
            shapes or types; the message names ``which`` (``"train"``).
    """
    items = loader.dataset
    if isinstance(items, torch.utils.data.IterableDataset) or not hasattr(items, "__getitem__"):
        raise DataError(f"{which}: streaming reads rows by index; the DataLoader's dataset is iterable")
    if len(items) == 0:
        raise DataError(f"{which}: the DataLoader's dataset is empty")
    targets = getattr(items, "targets", None)
    # In index order (the loader may shuffle), with the loader's own batching and workers.
    ordered = DataLoader(
        items,
        batch_size=loader.batch_size or 1,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        generator=_workers_seed(),
    )
    batches = _checked_batches(ordered, which)
    if targets is None:  # every batch read for its y, its x let go at once (never all the inputs at a time)
        shape, y, start = None, None, 0
        for x, labels in batches:
            # one tensor for all labels, made once: a small tensor kept per batch between the inputs' large
            # ones fragments the heap until it holds as much as the inputs would (2.2 GB for 200,000 images)
            if y is None:
                shape, y = tuple(x.shape[1:]), torch.empty(len(items), dtype=labels.dtype)
            del x
            if start + len(labels) > len(items):
                raise DataError(f"{which}: the DataLoader gives more rows than the {len(items)} of its dataset")
            y[start : start + len(labels)] = labels
            start += len(labels)
        y = y[:start]
    else:  # the first batch read for the shape
        shape, y = tuple(next(batches)[0].shape[1:]), torch.as_tensor(targets)
    if y.shape != (len(items),):
        raise DataError(f"{which}: {tuple(y.shape)} targets for the {len(items)} rows of the DataLoader's dataset")
    return Rows(items, shape, where=which, workers=loader.num_workers), y
