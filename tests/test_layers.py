"""The package's import layers: no import cycles, no import upward, nothing imports the experiments.

Every ``import`` and ``from ... import`` of every module of the installed package counts, the ones
inside functions too (a lazy import is still a dependency); relative imports are resolved, and
``models/``, ``guides/`` and ``analysis/`` are read as ``bayesprune.models`` and so on. Only the
source is read (``ast``): nothing of the package is run beyond finding where it is installed.
"""

import ast
import importlib.util
from pathlib import Path

# Lowest first: a module may import its own layer and the layers below it.
LAYERS = ["core", "data", "models", "analysis", "methods", "pipeline", "entry", "experiments"]

# Package → layer: each folder of the package is one layer (the longest matching name wins).
LAYER_OF = {
    # Training loop, checkpoints, the shared distributions and KLs, objectives, bounds, structure, pruning, export.
    "bayesprune.core": "core",
    # Built-in data sets, user files and simulators, read into a Dataset.
    "bayesprune.data": "data",
    # Pyro model programs, priors and the variational families over them that several methods or users compose.
    "bayesprune.models": "models",
    "bayesprune.guides": "models",
    # Reads posteriors and fitted networks; never fits.
    "bayesprune.analysis": "analysis",
    "bayesprune.version": "core",
    # The method contract, its registry and one package per method, holding what only that method uses
    # (PBP's distributions, guide and objectives; Sparse VD's model; each method's plots).
    "bayesprune.methods": "methods",
    # Config, a run and its directory, evaluation, report, compare and sweep; methods through the registry.
    "bayesprune.pipeline": "pipeline",
    # What users call: the package's facade, the Python API and the command line.
    "bayesprune": "entry",
    # The paper's studies: found by name through bayesprune.pipeline.experiments, imported by nothing.
    "bayesprune.experiments": "experiments",
}

#: The only modules at the top of bayesprune/: its entry points.
ENTRY_POINTS = {"bayesprune", "bayesprune.__main__", "bayesprune.api", "bayesprune.cli", "bayesprune.version"}

# Imports that break the rules today, each with why; they are left out of every check. A listed import
# that its module no longer makes fails test_allowed_imports_still_exist, so this list only shrinks.
ALLOWED = set()

# The installed package: (package name, directory), wherever setup.cfg maps them.
PACKAGES = ["bayesprune", "bayesprune.models", "bayesprune.guides", "bayesprune.analysis"]


def modules() -> dict:
    """Every module of the installed package: dotted name → source file."""
    found = {}
    for package in PACKAGES:
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join([package, *parts]), path)
    return found


def imports(name: str, path: Path, known: dict) -> set:
    """The modules of the package that module ``name`` (source ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            targets.update(submodules)
            if len(submodules) < len(node.names):  # a name defined in ``base`` itself
                targets.add(base)
    edges = set()
    for target in targets:
        while target not in known and "." in target:  # ``import bayesprune.core.loop.x`` → bayesprune.core.loop
            target = target.rpartition(".")[0]
        if target in known and target != name:
            edges.add(target)
    return edges


def import_graph() -> dict:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer(name: str) -> str:
    owner = max((key for key in LAYER_OF if name == key or name.startswith(key + ".")), key=len)
    return LAYER_OF[owner]


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan), each as one cycle through it."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict, component: set) -> list:
    """A shortest cycle through the smallest-named module of a strongly connected component."""
    start = min(component)
    paths, queue = {start: [start]}, [start]
    for node in queue:
        for target in sorted(graph[node] & component):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def without_allowed(graph: dict) -> dict:
    return {name: {target for target in targets if (name, target) not in ALLOWED} for name, targets in graph.items()}


def test_the_folders_are_the_layers():
    root = Path(importlib.util.find_spec("bayesprune").submodule_search_locations[0])
    top = {name for name, path in modules().items() if path.parent == root and name.startswith("bayesprune")}
    assert top == ENTRY_POINTS, (
        f"modules at the top of bayesprune/ that belong in a layer's folder: {sorted(top - ENTRY_POINTS)}"
    )


def test_every_module_of_the_table_exists():
    known = modules()
    assert "bayesprune.core.loop" in known and "bayesprune.models.bnn" in known and "bayesprune.analysis.plots" in known
    assert not [name for name in LAYER_OF if name not in known], "LAYER_OF names a module that does not exist"
    assert set(LAYER_OF.values()) <= set(LAYERS)


def test_no_import_cycles():
    found = cycles(without_allowed(import_graph()))
    assert not found, "import cycles:\n" + "\n".join(" → ".join(cycle) for cycle in found)


def test_no_import_reaches_a_higher_layer():
    upward = [
        f"{name} ({layer(name)}) → {target} ({layer(target)})"
        for name, targets in sorted(without_allowed(import_graph()).items())
        for target in sorted(targets)
        if LAYERS.index(layer(target)) > LAYERS.index(layer(name))
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_nothing_outside_the_experiments_imports_them():
    inside = lambda name: name == "bayesprune.experiments" or name.startswith("bayesprune.experiments.")  # noqa: E731
    importers = [
        f"{name} → {target}"
        for name, targets in sorted(import_graph().items())
        if not inside(name)
        for target in sorted(targets)
        if inside(target)
    ]
    assert not importers, (
        "bayesprune.experiments is found by name (bayesprune.pipeline.experiments), never imported:\n"
        + "\n".join(importers)
    )


def method_package(module: str):
    """The method package ``bayesprune.methods.<name>`` that ``module`` lies in, else ``None``."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["bayesprune", "methods"] and len(parts) > 3 else None


def test_one_name_per_class():
    """Two classes of the package with one name are two ideas under one name, or one idea written twice.
    Each method package is a namespace of its own (a method copied under another name keeps its class
    names, issue 48); within one, and between a method and the shared layers, a name is one class."""
    defined = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(name)

    def clash(owners):
        packages = [method_package(owner) for owner in owners]
        return len(owners) > 1 and (None in packages or len(set(packages)) < len(packages))

    twice = {cls: owners for cls, owners in sorted(defined.items()) if clash(owners)}
    assert not twice, "classes defined in more than one module:\n" + "\n".join(
        f"{cls}: {', '.join(owners)}" for cls, owners in twice.items()
    )


def test_allowed_imports_still_exist():
    graph = import_graph()  # an entry whose module does not exist (yet, or any more) is not checked
    gone = sorted(f"{name} → {target}" for name, target in ALLOWED if name in graph and target not in graph[name])
    assert not gone, "ALLOWED lists imports that are gone; delete them from the list:\n" + "\n".join(gone)


def test_the_reader_sees_lazy_relative_and_package_imports(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "from . import loop, register\nfrom .data import Dataset\nimport bayesprune.guides.normal\n"
        "def later():\n    from ..methods import get_method\n"
    )
    known = {
        "bayesprune.core",
        "bayesprune.core.data",
        "bayesprune.core.loop",
        "bayesprune.guides.normal",
        "bayesprune.core.methods",
        "bayesprune.core.example",
    }
    assert imports("bayesprune.core.example", source, known) == {
        "bayesprune.core",
        "bayesprune.core.loop",
        "bayesprune.core.data",
        "bayesprune.guides.normal",
    }
    package = tmp_path / "__init__.py"
    package.write_text(source.read_text())
    assert imports("bayesprune.core", package, known) == {
        "bayesprune.core.loop",
        "bayesprune.core.data",
        "bayesprune.guides.normal",
    }
