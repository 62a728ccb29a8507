"""Checks shared by every config section and method option: each failure names its field in one line."""

import math
import warnings
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields

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


@dataclass(frozen=True)
class Constraint:
    """What one option may hold, declared beside its field (:func:`option`) and checked by :func:`validate`.

    Attributes:
        accepts: ``value → bool``.
        expectation: the words of the error after ``<table>.<key> must`` (``"lie in (0, 1)"``), or a function
            of no argument that returns them (choices read from the registry when checked, not when declared).
        refused: values it refuses (out of range, of the wrong type), which the option-walking test tries.
        allowed: the values it takes, as the reference's tables print them (default: ``expectation``).
        convert: ``value → value`` stored once accepted (a TOML list as a tuple), or ``None``.
    """

    accepts: Callable
    expectation: str | Callable
    refused: tuple = ()
    allowed: str = ""
    convert: Callable | None = None

    def words(self) -> str:
        """The words of the error after ``<table>.<key> must``."""
        return self.expectation() if callable(self.expectation) else self.expectation

    def describe(self) -> str:
        """What the reference prints in an option's "allowed" column."""
        return self.allowed or self.words().removeprefix("be ").removeprefix("lie ")


@dataclass(frozen=True)
class Rule:
    """A combination of options a table refuses, declared on its class (``rules``) and checked by :func:`validate`
    after every option on its own.

    Attributes:
        key: the option the error names.
        holds: ``options → bool``: false for a refused combination.
        expectation: ``options → str``, the words after ``<table>.<key> must``.
        example: option values that make a refused combination (the option-walking test sets them), or a function
            of no argument that returns them (values read from the registry).
        value: ``options → value`` the error shows (default: the option ``key``'s).
    """

    key: str
    holds: Callable
    expectation: Callable
    example: dict | Callable = field(default_factory=dict)
    value: Callable | None = None

    def values(self) -> dict:
        """The option values of :attr:`example`."""
        return self.example() if callable(self.example) else self.example


def option(default=MISSING, constraint: Constraint | None = None, *, factory=MISSING):
    """A dataclass field with its :class:`Constraint` in its metadata, where :func:`validate` and the reference read it."""
    return field(default=default, default_factory=factory, metadata={"constraint": constraint})


def constraint_of(cls, name: str) -> Constraint | None:
    """The :class:`Constraint` declared on field ``name`` of dataclass ``cls`` (``None``: none)."""
    return next(f.metadata.get("constraint") for f in fields(cls) if f.name == name)


def validate(options, table: str | None):
    """Check every declared :class:`Constraint` of dataclass instance ``options`` and then its ``rules``,
    raising :class:`ConfigError` ``"<table>.<key> must <expectation>, got <value>"`` at the first that fails
    (``table = None``: the keys are top-level)."""
    prefix = f"{table}." if table else ""
    for f in fields(options):
        constraint = f.metadata.get("constraint")
        if constraint is not None:
            value = getattr(options, f.name)
            require(constraint.accepts(value), prefix + f.name, constraint.words(), value)
            if constraint.convert is not None:
                object.__setattr__(options, f.name, constraint.convert(value))
    for rule in getattr(options, "rules", ()):
        if not rule.holds(options):
            value = getattr(options, rule.key) if rule.value is None else rule.value(options)
            require(False, prefix + rule.key, rule.expectation(options), value)


def _bound(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def interval(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Constraint:
    """A finite number between ``low`` and ``high``, each end included unless open."""
    text = f"{'(' if open_low else '['}{_bound(low)}, {_bound(high)}{')' if open_high else ']'}"
    below = low if open_low else low - max(1, abs(low))
    above = high if open_high else high + max(1, abs(high))
    return Constraint(
        lambda v: is_number(v) and (low < v if open_low else low <= v) and (v < high if open_high else v <= high),
        f"lie in {text}",
        refused=(below, above, 1e300, -1e300, float("nan"), "0.5", True),
        allowed=text,
    )


def unit(*, open_low: bool = True, open_high: bool = True) -> Constraint:
    """A fraction: :func:`interval` from 0 to 1 (open at both ends by default)."""
    return interval(0, 1, open_low=open_low, open_high=open_high)


def count(minimum: int = 1, maximum: int = MAX_COUNT, expectation: str = "") -> Constraint:
    """An integer from ``minimum`` up to ``maximum`` (:data:`MAX_COUNT`), not a boolean."""
    kind = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer of at least {minimum}")
    return Constraint(
        lambda v: is_int(v) and minimum <= v <= maximum,
        expectation or f"be {kind} up to {maximum}",
        refused=(minimum - 1, maximum + 1, 10**30, 1.5, True, "3"),
    )


def scale(*, positive: bool = True, maximum: float = MAX_SCALE) -> Constraint:
    """A number in ``(0, maximum]`` (``[0, maximum]`` when not ``positive``): a rate, scale or temperature."""
    return Constraint(
        lambda v: is_number(v) and (v > 0 if positive else v >= 0) and v <= maximum,
        f"be a {'positive' if positive else 'non-negative'} number up to {maximum:g}",
        refused=((0,) if positive else ()) + (-1.0, maximum * 10, 1e300, float("nan"), "1", True),
    )


def one_of(choices, *, sort: bool = False) -> Constraint:
    """One of ``choices`` (listed in the error as given, or sorted)."""
    listed = sorted(choices) if sort else list(choices)
    return Constraint(
        lambda v: isinstance(v, str) and v in choices,
        f"be one of {listed}",
        refused=("no-such-choice", 1),
        allowed=", ".join(f'`"{c}"`' for c in listed),
    )


def list_of(item: Constraint, what: str, *, nonempty: bool = True, distinct: bool = True, convert=tuple) -> Constraint:
    """A TOML list of values ``item`` accepts (``what`` names them in the error), stored as ``convert`` of it."""

    def accepts(value):
        if not isinstance(value, (list, tuple)) or (nonempty and not value):
            return False
        return all(item.accepts(v) for v in value) and (not distinct or len(set(value)) == len(value))

    words = f"be a {'non-empty ' if nonempty else ''}list of {what}{' without repeats' if distinct else ''}"
    bad = next((v for v in item.refused if not isinstance(v, bool)), "text")
    return Constraint(
        accepts,
        words,
        refused=(("text", 1, [bad]) if nonempty else ("text", [bad])) + ((),) * nonempty,
        allowed=words.removeprefix("be "),
        convert=convert,
    )


def optional(constraint: Constraint) -> Constraint:
    """``constraint``, or unset (``None``)."""
    return Constraint(
        lambda v: v is None or constraint.accepts(v),
        constraint.expectation,
        refused=tuple(v for v in constraint.refused if v is not None),
        allowed=f"{constraint.describe()}, or unset",
        convert=None if constraint.convert is None else (lambda v: v if v is None else constraint.convert(v)),
    )


#: ``true`` or ``false``.
FLAG = Constraint(lambda v: isinstance(v, bool), "be true or false", refused=(1, "yes"), allowed="`true`, `false`")

#: A string.
STRING = Constraint(lambda v: isinstance(v, str), "be a string", refused=(1, ["a"]), allowed="a string")

#: A TOML table.
TABLE = Constraint(lambda v: isinstance(v, dict), "be a table", refused=(1, "text", [1]), allowed="a table")


class RenamedKey(UserWarning):
    """A config key read under the name it had before, with a one-line note of its new name."""


def read_renamed(table: dict, section: str, renames: dict) -> dict:
    """``table`` (the TOML table ``[section]``) with each key of ``renames`` (old name → new) that it holds
    given its new name, and a :class:`RenamedKey` note for it; both names at once are refused, naming them."""
    table = dict(table)
    for old, new in renames.items():
        if old not in table:
            continue
        if new in table:
            raise ConfigError(f"{section}.{old} is the old name of {section}.{new}; give only {section}.{new}")
        table[new] = table.pop(old)
        warnings.warn(f"{section}.{old} is renamed {section}.{new}; read as {section}.{new}", RenamedKey, stacklevel=3)
    return table
