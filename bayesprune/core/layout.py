"""The memory layout of image minibatches in training (``train.memory_format``).

A batch of images ``(B, C, H, W)`` is stored channels-first (``torch.contiguous_format``) or
channels-last (``torch.channels_last``, the channels of one pixel side by side). The numbers are the
same; on a GPU, cuDNN's convolutions (its tensor-core kernels above all, as under
``train.precision = "bfloat16"``) are faster on channels-last tensors. A convolution takes the layout
of its input, so channels-last minibatches are all it needs: every activation after it stays
channels-last and the kernels' weights, a method's sampled ones included, are laid out to match.
Only the training minibatches are laid out (:class:`~bayesprune.core.loop.TensorBatches`); evaluation
reads the data as it is stored.
"""

import torch

from bayesprune.core.errors import ConfigError

#: ``train.memory_format``'s values: ``"auto"`` is channels-last for images on a CUDA device.
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")


def resolve_memory_format(name: str, input_shape: tuple, device: torch.device) -> torch.memory_format:
    """The layout of training minibatches of inputs of shape ``input_shape`` (one example's) on ``device``
    under ``train.memory_format = name``.

    Raises:
        ConfigError: an unknown ``name``, or ``"channels_last"`` for inputs that are not images
            ``(C, H, W)`` (one line naming the key).
    """
    if name not in MEMORY_FORMATS:
        raise ConfigError(f"train.memory_format must be one of {list(MEMORY_FORMATS)}, got {name!r}")
    images = len(input_shape) == 3
    if name == "channels_last" and not images:
        raise ConfigError(
            f"train.memory_format = 'channels_last' lays out images (C, H, W); the data's inputs are {list(input_shape)}"
        )
    if name == "channels_last" or (name == "auto" and images and device.type == "cuda"):
        return torch.channels_last
    return torch.contiguous_format


def laid_out(x: torch.Tensor, layout: torch.memory_format) -> torch.Tensor:
    """A batch of images ``x`` channels-last under ``layout = torch.channels_last`` (a copy only where it
    is not already); any other tensor, or layout, leaves ``x`` as it is."""
    return x.contiguous(memory_format=layout) if layout == torch.channels_last and x.dim() == 4 else x
