"""The packages a GPU session carries as wheels, and the check that an environment holds every requirement
of the installed bayesprune (``benchmarks/gpu_session.sh``).

The GPU machine has PyTorch, torchvision and the scientific stack (:data:`IMAGE`) but no package index:
what bayesprune needs beyond its image travels as pure-Python wheels (:data:`WHEELS`), downloaded here with
``bash benchmarks/gpu_session.sh --wheels``. :func:`carried_closure` walks the requirements of the
installed bayesprune (``importlib.metadata``, recursively, not into the image's packages); a test checks
that every package it reaches is in one of the two lists and that every pin satisfies what requires it.

    python benchmarks/gpu_requirements.py --pins             # the wheels to download, one name==version a line
    python -P benchmarks/gpu_requirements.py --check DIR     # exit 2, one line, unless bayesprune is
                                                             # imported from DIR with every requirement met
"""

import argparse
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

#: Pure-Python distributions bayesprune needs that the GPU machine's image lacks, at the versions this
#: project's CI installs (platformdirs: ArviZ imports it).
WHEELS = {
    "arviz": "0.23.4",
    "h5netcdf": "1.8.2",
    "platformdirs": "4.14.8",
    "pyro-api": "0.1.2",
    "pyro-ppl": "1.9.2",
    "tomli-w": "1.2.0",
    "torch-pruning": "1.6.1",
    "xarray-einstats": "0.9.1",
}

#: Distributions of the GPU machine's image that bayesprune's requirements reach (their own requirements
#: are the image's: not walked).
IMAGE = frozenset(
    {
        "h5py",
        "matplotlib",
        "numpy",
        "opt-einsum",
        "packaging",
        "pandas",
        "scikit-learn",
        "scipy",
        "setuptools",
        "torch",
        "torchvision",
        "tqdm",
        "typing-extensions",
        "xarray",
    }
)


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it (``Torch_Pruning`` → ``torch-pruning``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(name: str) -> list:
    """The requirements of the installed distribution ``name`` that apply here without extras."""
    return [
        requirement
        for requirement in map(Requirement, metadata.requires(name) or ())
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""})
    ]


def closure(root: str = "bayesprune", stop=frozenset()) -> dict:
    """Name → the requirements naming it, over every distribution ``root`` requires, recursively through
    the installed distributions (not into those of ``stop`` nor those absent)."""
    found, todo = {}, [root]
    while todo:
        name = todo.pop()
        try:
            reached = requirements(name)
        except metadata.PackageNotFoundError:
            continue
        for requirement in reached:
            key = normalized(requirement.name)
            if key not in found and key not in stop:
                todo.append(key)
            found.setdefault(key, []).append(requirement)
    return found


def carried_closure() -> dict:
    """:func:`closure` of bayesprune, stopping at :data:`IMAGE`."""
    return closure(stop=IMAGE)


def unmet() -> list:
    """``"name: why"`` for each requirement of :func:`carried_closure` that the environment does not meet
    (the image's packages are checked against what requires them, their own requirements are not)."""
    problems = []
    for key, wanted in sorted(carried_closure().items()):
        try:
            version = Version(metadata.version(key))
        except metadata.PackageNotFoundError:
            problems.append(f"{key}: not installed")
            continue
        for requirement in wanted:
            if not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{key} {version}: {requirement} wanted")
    return problems


def check(target: Path) -> str | None:
    """Why this environment cannot run the session with bayesprune installed in ``target``, or ``None``."""
    try:
        import bayesprune
        import bayesprune.models  # noqa: F401  (mapped from models/ by setup.cfg: only an installed package has it)
    except ImportError as error:
        return f"bayesprune does not import: {error}"
    where = Path(bayesprune.__file__).resolve()
    if target.resolve() not in where.parents:
        return f"bayesprune is imported from {where.parent}, not from the wheel installed in {target}"
    problems = unmet()
    return f"requirements not met: {'; '.join(problems)}" if problems else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--pins", action="store_true", help="print the wheels to carry, name==version")
    mode.add_argument("--check", type=Path, metavar="DIR", help="the folder the wheel was installed into")
    args = parser.parse_args(argv)
    if args.pins:
        print("\n".join(f"{name}=={version}" for name, version in WHEELS.items()))
        return
    problem = check(args.check)
    if problem:
        print(f"gpu_requirements: {problem}", file=sys.stderr)
        sys.exit(2)
    print(f"bayesprune from {args.check}, every requirement met")


if __name__ == "__main__":
    main()
