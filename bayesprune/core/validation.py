"""Checks shared by every config section and method option: each failure names its field in one line."""

import math
from dataclasses import fields

from bayesprune.core.errors import ConfigError


def require(condition: bool, key: str, expectation: str, value):
    """Raise ``ConfigError("<key> must <expectation>, got <value>")`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(f"{key} must {expectation}, got {value!r}")


#: The largest epoch, step, sample or chain count a config may ask for: beyond it is a typo, not a
#: plan (a run that would never end, or overflow a C index further on).
MAX_COUNT = 10**7


#: The most values an array built from a config value (a network, a simulated data set) or declared
#: by a file's header (an .npz archive) may hold: 2**31, 8 GiB of float32. Beyond it is a typo or a
#: tampered file, refused in one line before anything is allocated.
MAX_ELEMENTS = 2**31


#: The largest rate, scale, temperature, norm or precision a config may give: far beyond any that trains
#: (a learning rate of 1e300 is a typo), refused in one line rather than fitted to NaN.
MAX_SCALE = 1e6


def is_scale(value, *, positive: bool = True) -> bool:
    """A number in ``(0, MAX_SCALE]`` (``[0, MAX_SCALE]`` when not ``positive``)."""
    return is_number(value) and (value > 0 if positive else value >= 0) and value <= MAX_SCALE


def is_count(value, minimum: int = 1) -> bool:
    """An integer from ``minimum`` up to :data:`MAX_COUNT`."""
    return is_int(value) and minimum <= value <= MAX_COUNT


def is_int(value) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float that is not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def refuse_unknown_keys(table: str, values: dict, cls, *, owner: str | None = None):
    """Refuse a key of the config table ``table`` that dataclass ``cls`` has no field for, naming it
    (and listing the options of ``owner``, a method, when given)."""
    known = {f.name for f in fields(cls)}
    unknown = [key for key in values if key not in known]
    if unknown:
        listing = f" (options of {owner!r}: {sorted(known)})" if owner else ""
        raise ConfigError(f"unknown config key '{table}.{unknown[0]}'{listing}")
