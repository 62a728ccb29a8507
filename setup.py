"""Packages: everything under ``bayesprune/`` (a new method's package is found without editing this
file) and the top-level ``models/``, ``guides/`` and ``analysis/``, installed as ``bayesprune.*``."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["bayesprune", "bayesprune.*"]),
        "bayesprune.models",
        "bayesprune.guides",
        "bayesprune.analysis",
    ]
)
