"""Mixed precision of training (``train.precision``): the network's forward passes under ``torch.autocast``.

Under ``"bfloat16"`` the matrix products and convolutions of a training step's forward pass run in
bfloat16 (``torch.autocast``'s lists) while everything the objective adds up stays float32: the
parameters, their gradients and the optimiser's state, the likelihood (the network's output is cast
to float32 before it, :class:`bayesprune.models.likelihoods.Likelihood`), every KL and PAC-Bayes
term (computed after the forward pass, outside autocast) and the backward pass, which PyTorch
recommends leaving outside autocast. Evaluation (the pruning curve, predictions, export) is never
autocast: the numbers a run reports are the float32 network's.

bfloat16 keeps float32's exponent range, so no loss scaling is needed (unlike float16, which is not
offered). On a GPU with bfloat16 units (compute capability 8.0 and later) it roughly halves the memory
traffic of the matrix products; on a CPU without them it is usually slower and is there for testing.
"""

from contextlib import contextmanager

import torch

from bayesprune.core.errors import ConfigError

#: ``train.precision``'s values and the dtype autocast runs the forward passes in (``None``: not autocast).
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16}


class _Precision:
    dtype = None


@contextmanager
def training_precision(name: str):
    """Run the training steps of the block (:func:`bayesprune.core.loop.svi_step`,
    :func:`~bayesprune.core.loop.optimizer_step`) at precision ``name`` (:data:`PRECISIONS`)."""
    if name not in PRECISIONS:
        raise ConfigError(f"train.precision must be one of {list(PRECISIONS)}, got {name!r}")
    previous, _Precision.dtype = _Precision.dtype, PRECISIONS[name]
    try:
        yield
    finally:
        _Precision.dtype = previous


def autocast_calls(function, device: torch.device):
    """``function`` with its calls under autocast on ``device`` at the current :func:`training_precision`,
    a floating-point tensor it returns (a network's output, a loss) cast back to float32; ``function``
    itself at float32."""
    dtype = _Precision.dtype
    if dtype is None:
        return function

    def under_autocast(*args, **kwargs):
        # autocast's cache of cast weights must not outlive a CUDA graph's capture (bayesprune.core.graphs)
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        with torch.autocast(device.type, dtype=dtype, cache_enabled=not capturing):
            result = function(*args, **kwargs)
        return full_precision(result) if torch.is_tensor(result) else result

    return under_autocast


def full_precision(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in float32 when autocast left it in a reduced precision (bfloat16, float16); else itself."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def check_precision(name: str, device: torch.device) -> None:
    """Refuse ``train.precision = name`` on ``device`` before any fit (one line naming the key).

    Raises:
        ConfigError: bfloat16 on a CUDA device without bfloat16 arithmetic.
    """
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"train.precision = 'bfloat16' needs a GPU with bfloat16 arithmetic; {device} has none")
