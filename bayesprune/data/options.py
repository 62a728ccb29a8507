"""Checks of a loader's options (``data.<option>`` in a config), shared by every loader."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

from bayesprune.core.errors import DataError
from bayesprune.core.validation import MAX_ELEMENTS, MAX_SCALE

# Option checks: each returns the value (converted where needed) or raises a DataError naming it.


def _integer(option: str, value, *, minimum: int) -> int:
    """``value``, an integer from ``minimum`` up to :data:`~bayesprune.core.validation.MAX_ELEMENTS` (a seed, a
    split, a count of rows: beyond it is a typo, and NumPy takes no seed from 2**32)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not minimum <= value <= MAX_ELEMENTS:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise DataError(f"data.{option} must be {kind} up to {MAX_ELEMENTS}, got {value!r}")
    return int(value)


def _optional_positive_integer(option: str, value) -> int | None:
    return None if value is None else _integer(option, value, minimum=1)


def _real(
    option: str,
    value,
    *,
    low: float = -MAX_SCALE,
    high: float = MAX_SCALE,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if open_low else value >= low) and (value < high if open_high else value <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        raise DataError(f"data.{option} must be a finite number in {interval}, got {value!r}")
    return float(value)


def _fraction(option: str, value) -> float:
    return _real(option, value, low=0.0, high=1.0, open_low=True, open_high=True)


def _boolean(option: str, value) -> bool:
    if not isinstance(value, bool):
        raise DataError(f"data.{option} must be true or false, got {value!r}")
    return value


def _choice(option: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise DataError(f"data.{option} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _directory(option: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.path.isdir(value):
        raise DataError(f"data.{option}: {value!r} is not a directory")
    return os.fspath(value)


def _file(option: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise DataError(f"data.{option} must be a file path, got {value!r}")
    if not os.path.exists(value):
        raise DataError(f"data.{option}: {os.fspath(value)}: no such file")
    if not os.path.isfile(value):
        raise DataError(f"data.{option}: {os.fspath(value)} is not a file")
    return os.fspath(value)
