"""Exceptions that the command line turns into a one-line message and exit status 2."""

import warnings
from contextlib import contextmanager


def one_line(message: str) -> str:
    """``message`` with every control character (a newline in a file name, an escape code) written as
    Python writes it in a string literal (``\\n``), so that an error is one line whatever names it holds."""
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in message)


@contextmanager
def warnings_after_success():
    """Hold back the warnings a command raises (Pillow's on an odd image, a library's deprecations) and
    show them once it succeeds: a refused command's one line is all it prints."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def memory_error(error: BaseException) -> str | None:
    """The one line for ``error`` when it says memory ran out (Python's ``MemoryError``, or the
    ``RuntimeError`` torch's CPU and CUDA allocators raise), else ``None``."""
    text = str(error)
    if not isinstance(error, MemoryError) and not any(
        sign in text for sign in ("can't allocate memory", "out of memory", "Cannot allocate memory")
    ):
        return None
    detail = f": {one_line(text.splitlines()[0])}" if text else ""
    return f"out of memory{detail}; use a smaller network, data set or batch"


class BayesPruneError(Exception):
    """Base class of every error a user can cause and fix (bad config, bad data, divergence)."""


class ConfigError(BayesPruneError, ValueError):
    """An invalid configuration value; the message names the field."""


class DataError(BayesPruneError, ValueError):
    """Missing, malformed or invalid data; the message names the file or field."""


class TrainingDiverged(BayesPruneError, RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class StopNow(KeyboardInterrupt):
    """A second SIGINT or SIGTERM: stop at once, wherever the program is (a ``BaseException``, so no
    ``except Exception`` swallows it); the run keeps its last checkpoint and the command line says so
    in one line, as for :class:`Interrupted`."""

    def __init__(self, signal: int):
        super().__init__(f"stopped at once by a second signal {signal}")
        self.signal = signal


class Interrupted(BayesPruneError):
    """SIGINT or SIGTERM stopped training at the end of a step; ``signal`` is the signal's number
    (the command line exits with 128 + it)."""

    def __init__(self, message: str, signal: int):
        super().__init__(message)
        self.signal = signal
