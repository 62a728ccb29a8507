"""Pruning methods as plug-ins: a registry of :class:`Method` classes, found by name.

A method is one module or subpackage of this package (or of another package that declares an entry point in the
group ``bayesprune.methods``) defining a :class:`Method` subclass decorated with
:func:`register_method`. Nothing else is edited to add one: :func:`get_method` imports every module
of this package and every entry point the first time it is asked.
"""

import importlib
import pkgutil
from dataclasses import fields
from importlib.metadata import entry_points

from bayesprune.core.errors import ConfigError
from bayesprune.methods.base import Fitted, Method
from bayesprune.methods.context import SERVICES, FitContext

METHODS: dict = {}
_discovered = False


def register_method(cls):
    """Class decorator: register a :class:`Method` subclass under its ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Method)) or not cls.name:
        raise TypeError(f"{cls!r} is not a named Method subclass")
    for kind in ("sparsity_option", "macs_option"):
        if getattr(cls, kind) is not None and getattr(cls, kind) not in {f.name for f in fields(cls.Options)}:
            raise TypeError(f"{cls.name}: {kind} {getattr(cls, kind)!r} is no field of its Options")
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} is already registered")
    METHODS[cls.name] = cls
    return cls


def available_methods() -> dict:
    """Every registered method: name → :class:`Method` subclass, in the order of their names (registration
    order depends on what was imported first)."""
    _discover()
    return dict(sorted(METHODS.items()))


def get_method(name) -> Method:
    """An instance of the method registered as ``name``; an unknown name raises ``ConfigError``."""
    methods = available_methods()
    if not isinstance(name, str) or name not in methods:
        raise ConfigError(f"method must be one of {sorted(methods)}, got {name!r}")
    return methods[name]()


def sparsity_option(name: str) -> str | None:
    """The option of method ``name`` that sets the sparsity it fits to (:attr:`Method.sparsity_option`),
    or ``None`` for a method without one."""
    return get_method(name).sparsity_option


def _discover():
    global _discovered
    if _discovered:
        return
    for module in pkgutil.iter_modules(__path__):
        if module.name not in ("base", "context"):
            importlib.import_module(f"{__name__}.{module.name}")
    for entry in entry_points(group="bayesprune.methods"):
        entry.load()
    _discovered = True


__all__ = [
    "FitContext",
    "Fitted",
    "METHODS",
    "Method",
    "SERVICES",
    "available_methods",
    "get_method",
    "register_method",
    "sparsity_option",
]
