"""The preprocessing a run applied to the user's data, as plain data, and the module that applies it.

A loader that standardises (``data.normalize`` of ``csv``, ``npz``, ``uci`` and the simulators) maps
a raw input ``x`` to ``(x - input_mean) / input_std`` (per feature, or per pixel) and a regression
target ``y`` to ``(y - target_mean) / target_std``, with the training split's statistics; the network
is fitted on those. :class:`Preprocessing` holds the four, :func:`preprocessing_of` reads them off a
:class:`~bayesprune.data.Dataset`, and :func:`with_preprocessing` wraps a network so that it takes
raw inputs and gives regression outputs in the target's own units::

    config, dataset, fitted = load_run("runs/my-table")
    net = with_preprocessing(fitted.network(), preprocessing_of(dataset)).eval()
    net(torch.tensor(raw_rows, dtype=torch.float32))  # predictions in the target's units

``bayesprune export`` writes the wrapped network, so its file takes the rows of the user's table.

A built-in image set's loader maps the pixels as its files hold them (the digits' 0-16, Fashion-MNIST's
and MNIST's IDX files' 0-255) to the network's inputs with :class:`Pixels`: scaled to ``[0, 1]`` and, at a ``data.shape`` other
than the stored one, resized and its grey channel repeated. The loader and the exported file run the same
:meth:`Pixels.apply`, so the file takes the images as the files hold them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Pixels:
    """How a loader makes its network's inputs of images as the data files hold them: ``x ↦ x / white``
    (pixel values ``0..white`` to ``[0, 1]``), then, where ``shape``'s height and width differ from
    ``stored``'s, bilinear resampling (half-pixel centres, no antialiasing) clamped to ``[0, 1]``, and the
    channels repeated up to ``shape``'s (a grey image as three). ``stored`` and ``shape`` are one image's
    shape, ``(C, H, W)``, or ``(D,)`` for flattened rows (then equal: scaling only)."""

    white: float
    stored: tuple
    shape: tuple

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """The network's float32 inputs of a batch ``raw`` of shape ``(N, *stored)`` (any real dtype)."""
        x = raw.float() / self.white
        if tuple(self.stored) == tuple(self.shape):
            return x
        if tuple(self.stored[1:]) != tuple(self.shape[1:]):
            x = F.interpolate(x, size=tuple(self.shape[1:]), mode="bilinear", align_corners=False).clamp(0, 1)
        return x.repeat(1, self.shape[0], 1, 1) if self.shape[0] != self.stored[0] else x

    def state(self) -> dict:
        """Plain data: ``white`` and the two shapes as lists."""
        return {"white": self.white, "stored": list(self.stored), "shape": list(self.shape)}

    @classmethod
    def from_state(cls, state, input_shape) -> Pixels:
        """The :class:`Pixels` of a :meth:`state` giving inputs of ``input_shape``.

        Raises:
            ValueError: a field missing or unusable, naming it.
        """
        if not isinstance(state, dict) or set(state) != {"white", "stored", "shape"}:
            raise ValueError("preprocessing pixels must be a table of white, stored and shape")
        white, stored, shape = state["white"], state["stored"], state["shape"]
        if isinstance(white, bool) or not isinstance(white, (int, float)) or not 0 < white < math.inf:
            raise ValueError(f"preprocessing pixels white must be a positive number, got {white!r}")
        for name, value in (("stored", stored), ("shape", shape)):
            if not (
                isinstance(value, list)
                and len(value) in (1, 3)
                and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in value)
            ):
                raise ValueError(f"preprocessing pixels {name} must be one image's shape, got {value!r}")
        if tuple(shape) != tuple(input_shape) or (
            stored != shape and (len(stored) != 3 or len(shape) != 3 or stored[0] not in (1, shape[0]))
        ):
            raise ValueError(f"preprocessing pixels cannot make inputs of shape {tuple(input_shape)} of {stored}")
        return cls(float(white), tuple(stored), tuple(shape))


@dataclass(frozen=True, eq=False)
class Preprocessing:
    """What a run's loader did to the raw data: ``x ↦ (x - input_mean) / input_std`` (``None``:
    inputs used as given) and ``y ↦ (y - target_mean) / target_std`` (regression; ``0`` and ``1``:
    targets used as given, and always so for class labels), after ``pixels`` (a built-in image set's
    :class:`Pixels`, or ``None``)."""

    input_mean: torch.Tensor | None = None
    input_std: torch.Tensor | None = None
    target_mean: float = 0.0
    target_std: float = 1.0
    pixels: Pixels | None = None

    @property
    def scales_targets(self) -> bool:
        """Whether regression outputs need ``target_mean`` and ``target_std`` to be in the target's units."""
        return (self.target_mean, self.target_std) != (0.0, 1.0)

    def raw_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Standardised inputs ``x`` back in the raw units (computed in float64); ``pixels`` are not undone."""
        if self.input_mean is None:
            return x
        raw = x.double() * self.input_std.to(x.device).double() + self.input_mean.to(x.device).double()
        return raw.to(x.dtype)

    def raw_targets(self, y: torch.Tensor) -> torch.Tensor:
        """Standardised regression targets ``y`` back in the target's units."""
        return y * self.target_std + self.target_mean

    def state(self) -> dict:
        """Plain data for a checkpoint: the four statistics (tensors, or ``None``, and floats), and
        ``pixels`` (its :meth:`Pixels.state`) where there are."""
        return {
            "input_mean": self.input_mean,
            "input_std": self.input_std,
            "target_mean": self.target_mean,
            "target_std": self.target_std,
            **({} if self.pixels is None else {"pixels": self.pixels.state()}),
        }

    @classmethod
    def from_state(cls, state, input_shape) -> Preprocessing:
        """The :class:`Preprocessing` of a :meth:`state` for inputs of ``input_shape``.

        Raises:
            ValueError: a field missing or unusable (:meth:`problem`), naming it.
        """
        statistics = {"input_mean", "input_std", "target_mean", "target_std"}
        if not isinstance(state, dict) or set(state) - {"pixels"} != statistics:
            raise ValueError("preprocessing must be a table of input_mean, input_std, target_mean and target_std")
        for name in ("target_mean", "target_std"):
            if isinstance(state[name], bool) or not isinstance(state[name], (int, float)):
                raise ValueError(f"preprocessing {name} must be a number, got {state[name]!r}")
        pixels = None if state.get("pixels") is None else Pixels.from_state(state["pixels"], input_shape)
        preprocessing = cls(
            state["input_mean"], state["input_std"], float(state["target_mean"]), float(state["target_std"]), pixels
        )
        problem = preprocessing.problem(input_shape)
        if problem:
            raise ValueError(f"preprocessing {problem}")
        return preprocessing

    def problem(self, input_shape) -> str | None:
        """What makes these statistics unusable for inputs of ``input_shape`` (naming the field), or ``None``."""
        if (self.input_mean is None) != (self.input_std is None):
            return "input_mean and input_std must both be given or both be None"
        for name in ("input_mean", "input_std"):
            value = getattr(self, name)
            if value is not None and not (
                torch.is_tensor(value)
                and value.dtype == torch.float32
                and tuple(value.shape) == tuple(input_shape)
                and bool(torch.isfinite(value).all())
            ):
                return f"{name} must be finite float32 numbers of shape {tuple(input_shape)}"
        if self.input_std is not None and not bool((self.input_std > 0).all()):
            return "input_std must be positive"
        if not (math.isfinite(self.target_mean) and math.isfinite(self.target_std) and self.target_std > 0):
            return f"target_mean and target_std must be finite with target_std > 0, got {self.target_mean!r} and {self.target_std!r}"
        return None

    def differs_from(self, other: Preprocessing) -> str | None:
        """The first statistic in which ``other`` differs (beyond float32 rounding), or ``None``. ``pixels``
        are not compared: the loader's code and the data config set them, not the data files' values."""
        for name in ("input_mean", "input_std"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if (mine is None) != (theirs is None) or (
                mine is not None and not torch.allclose(mine, theirs.to(mine.device), rtol=1e-5, atol=1e-6)
            ):
                return name
        for name in ("target_mean", "target_std"):
            if not math.isclose(getattr(self, name), getattr(other, name), rel_tol=1e-6, abs_tol=1e-9):
                return name
        return None


def preprocessing_of(dataset) -> Preprocessing:
    """The :class:`Preprocessing` a :class:`~bayesprune.data.Dataset`'s loader applied."""
    return Preprocessing(dataset.input_mean, dataset.input_std, dataset.target_mean, dataset.target_std, dataset.pixels)


class Preprocessed(nn.Module):
    """``net`` taking raw inputs: made the network's inputs by the loader's :class:`Pixels` where there are,
    standardised as :class:`Preprocessing` says, fed to ``net``, and its outputs put back in the target's
    units where the targets were standardised (regression)."""

    def __init__(self, net: nn.Module, preprocessing: Preprocessing):
        super().__init__()
        self.net = net
        self.pixels = preprocessing.pixels
        self.standardises_inputs = preprocessing.input_mean is not None
        self.scales_targets = preprocessing.scales_targets
        if self.standardises_inputs:
            self.register_buffer("input_mean", preprocessing.input_mean.detach().clone())
            self.register_buffer("input_std", preprocessing.input_std.detach().clone())
        self.target_mean, self.target_std = preprocessing.target_mean, preprocessing.target_std

    def forward(self, x):
        if self.pixels is not None:
            x = self.pixels.apply(x)
        if self.standardises_inputs:
            x = (x - self.input_mean) / self.input_std
        y = self.net(x)
        return y * self.target_std + self.target_mean if self.scales_targets else y


def with_preprocessing(net: nn.Module, preprocessing: Preprocessing) -> nn.Module:
    """``net`` wrapped to take raw inputs and give outputs in the target's units
    (:class:`Preprocessed`, on ``net``'s device), or ``net`` itself where the run used its data as
    given. Class scores (logits) are returned as ``net`` gives them."""
    if preprocessing.input_mean is None and not preprocessing.scales_targets and preprocessing.pixels is None:
        return net
    wrapped = Preprocessed(net, preprocessing)
    parameter = next(net.parameters(), None)
    return wrapped if parameter is None else wrapped.to(parameter.device)
