"""The user's folders of images in torchvision's ImageFolder layout (``data.dataset = "image-folder"``,
:mod:`bayesprune.data.user` describes it), read into memory or streamed."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from bayesprune.core.errors import DataError
from bayesprune.core.files import check_plain_tree
from bayesprune.core.validation import MAX_ELEMENTS
from bayesprune.data.options import _boolean, _directory, _integer
from bayesprune.data.registry import CLASSIFICATION, Dataset, register_dataset
from bayesprune.data.streaming import ImageFiles, Rows, augment_option
from bayesprune.data.user import error_text, several_classes

# image-folder: torchvision's ImageFolder layout, root/{train,test}/<class>/<image>.


def _image_size(size) -> tuple[int, int] | None:
    if size is None:
        return None
    pair = [size, size] if not isinstance(size, (list, tuple)) else list(size)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise DataError(f"data.size must be a positive integer or [height, width], got {size!r}")
    return pair[0], pair[1]


def _image_folder(root: str, part: str, transform):
    from torchvision.datasets import ImageFolder

    folder = os.path.join(root, part)
    if not os.path.isdir(folder):
        raise DataError(
            f"data.root: {folder} is not a directory (expected {part}/<class>/<image>, torchvision's ImageFolder layout)"
        )
    check_plain_tree(folder)
    try:
        return ImageFolder(folder, transform=transform)
    except OSError as err:  # no class folder, or a class folder without images
        raise DataError(f"{folder}: {error_text(err)}") from None


def _read_images(images, shape: list) -> torch.Tensor:
    """Every image of an ImageFolder as one tensor, refusing an unreadable one or one of another size."""
    from PIL import Image

    tensors = []
    for i, (path, _) in enumerate(images.samples):
        try:
            x, _ = images[i]
        except Image.UnidentifiedImageError:
            raise DataError(f"{path}: cannot read the image (not a format Pillow reads)") from None
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DataError(f"{path}: cannot read the image ({error_text(err)})") from None
        if not shape:
            shape.extend([tuple(x.shape), path])
        elif tuple(x.shape) != shape[0]:
            (c, h, w), (c0, h0, w0) = x.shape, shape[0]
            raise DataError(
                f"{path}: image is {h}x{w} with {c} channels but {shape[1]} is {h0}x{w0} with {c0}; "
                "set data.size to resize every image"
            )
        tensors.append(x)
    return torch.stack(tensors)


@register_dataset("image-folder")
def load_image_folder(
    *,
    root: str | os.PathLike,
    size: int | list[int] | None = None,
    grayscale: bool = False,
    stream: bool = False,
    workers: int = 0,
    augment: list[str] | None = None,
    crop_padding: int | None = None,
) -> Dataset:
    """Images in torchvision's ``ImageFolder`` layout: ``root/train/<class>/*`` and ``root/test/<class>/*``.

    Read with :class:`torchvision.datasets.ImageFolder` (RGB) and its transforms into ``(C, H, W)``
    float tensors in ``[0, 1]``, held in memory (the training ones left on disk with ``stream``). The
    classes are ``train``'s class folders in sorted order, named in ``class_names``; ``test`` may hold a
    subset of them, and a test class that ``train`` lacks is refused.

    Args:
        root: Directory holding ``train/`` and ``test/``.
        size: ``[height, width]`` (or one int for a square) every image is resized to; ``None``:
            keep the sizes, which must then all agree.
        grayscale: One luminance channel instead of three (RGB).
        stream: Leave the training images on disk: ``x_train`` is
            :class:`~bayesprune.data.streaming.Rows` decoding each minibatch's files as it is needed
            (the test images are still read into memory).
        workers: With ``stream``: processes decoding the files (0: the training process).
        augment: ``["crop", "flip"]`` or either: the training minibatches' augmentation
            (:class:`~bayesprune.data.streaming.Augment`); off by default.
        crop_padding: zeros added on each side before the random crop (default 4).

    Returns:
        A classification :class:`Dataset` named ``"image-folder/<root's name>"``.
    """
    from torchvision import transforms

    root = _directory("root", root)
    size = _image_size(size)
    grayscale = _boolean("grayscale", grayscale)
    stream = _boolean("stream", stream)
    workers = _integer("workers", workers, minimum=0)
    if workers and not stream:
        raise DataError("data.workers decode the files of data.stream = true; it is false")
    steps = [transforms.Grayscale(num_output_channels=1)] if grayscale else []
    if size is not None:
        steps.append(transforms.Resize(size))
    transform = transforms.Compose([*steps, transforms.ToTensor()])
    train = _image_folder(root, "train", transform)
    test = _image_folder(root, "test", transform)
    unknown = [name for name in test.classes if name not in train.class_to_idx]
    if unknown:
        raise DataError(
            f"{os.path.join(root, 'test', unknown[0])}: class {unknown[0]!r} has no folder in "
            f"{os.path.join(root, 'train')} (classes: {', '.join(train.classes)})"
        )
    several_classes(os.path.join(root, "train"), len(train.classes))
    held = len(test.samples) + (0 if stream else len(train.samples))
    if size is not None:
        values = held * (1 if grayscale else 3) * size[0] * size[1]
        if values > MAX_ELEMENTS:
            raise DataError(
                f"data.size {list(size)}: {held} images of that size hold "
                f"{values:,} values, more than {MAX_ELEMENTS:,} (data.stream = true leaves the training images on disk)"
            )
    shape: list = []
    if stream:  # every file's header checked now, the pixels decoded when a batch is read
        test_files = ImageFiles(test.samples, transform)
        shape.extend([tuple(test_files[0].shape), test.samples[0][0]])
        test_files.check(None if size is not None else shape[0][1:])
        x_test = Rows(test_files, shape[0], where=os.path.join(root, "test"), workers=workers)
    else:
        x_test = _read_images(test, shape)
    augmentation = augment_option(augment, crop_padding, shape[0], f"image-folder {root}")
    if stream:
        folder = os.path.join(root, "train")
        files = ImageFiles(train.samples, transform)
        files.check(None if size is not None else shape[0][1:])
        x_train = Rows(files, shape[0], where=folder, workers=workers)
    else:
        x_train = _read_images(train, shape)
    to_train = torch.tensor([train.class_to_idx[name] for name in test.classes], dtype=torch.int64)
    resized = "" if size is None else f", resized to {size[0]}x{size[1]} (torchvision's Resize)"
    return Dataset(
        name=f"image-folder/{Path(root).resolve().name}",
        task=CLASSIFICATION,
        x_train=x_train,
        y_train=torch.tensor(train.targets, dtype=torch.int64),
        x_test=x_test,
        y_test=to_train[torch.tensor(test.targets, dtype=torch.int64)],
        input_shape=tuple(x_train.shape[1:]),
        num_classes=len(train.classes),
        class_names=tuple(train.classes),
        augment=augmentation,
        export_inputs="as the loader gives them, not image files: float32 values in [0, 1] of the files decoded by "
        f"Pillow to {'one luminance channel' if grayscale else 'RGB'}{resized} and divided by 255",
    )
