"""A new method is one package and its config, with no other file edited (issue 36): a toy method added
to a copy of bayesprune is listed, documented in the README and the reference, runs, is compared, and
passes the shared, method-parametrised tests, which read every method from the registry. So does a copy of
``methods/sparse_vd`` under another name (``vd-copy``, issue 48): the package copied, its name replaced
inside it, nothing else edited."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bayesprune
import bayesprune.analysis
import bayesprune.guides
import bayesprune.models

ROOT = Path(__file__).parents[2]

#: The whole method: a plainly trained network scored by weight magnitude.
TOY = '''"""A toy method: the network trained plainly, each weight scored by its magnitude."""
from dataclasses import dataclass

from bayesprune.core.tasks import mean_loss
from bayesprune.core.validation import option, scale, validate
from bayesprune.methods import register_method
from bayesprune.methods.base import Method, NetworkFitted


@dataclass(frozen=True)
class ToyOptions:
    """``[toy]``: the toy method's table.

    Attributes:
        power: a weight's score is its magnitude to this power.
    """

    power: float = option(1.0, scale())

    def __post_init__(self):
        validate(self, "toy")


class ToyFitted(NetworkFitted):
    method = "toy"
    score_name = "weight magnitude"

    def __init__(self, net, power, **kwargs):
        super().__init__(net, **kwargs)
        self.power = power

    def scores(self):
        params = dict(self.net.named_parameters())
        return {site: params[site].detach().double().abs() ** self.power for site in self.sites}

    def state_dict(self):
        return {"net": self.net.state_dict(), "power": self.power}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])


@register_method
class Toy(Method):
    name = "toy"
    Options = ToyOptions
    unsupported = {"train.kernels": "it has no per-weight variational formulas",
                   "model.noise_scale": "it trains by mean squared error"}
    quick = ("toy.power=2.0",)
    summary = "weight magnitude of a plainly trained network"
    paper = "none"

    def fit(self, net, data, options, ctx):
        net = net.to(ctx.device)
        history = ctx.train_network("train", net, ctx.batches(data.x_train, data.y_train), epochs=ctx.epochs,
                                    loss=mean_loss(data.task), validate=True)
        return ToyFitted(net, options.power, history=history, task=data.task, ctx=ctx)

    def restore(self, net, data, options, ctx, state):
        net.load_state_dict(state["net"])
        return ToyFitted(net, state["power"], task=data.task, ctx=ctx)
'''

CONFIG = """description = "toy: magnitude of a plain MLP (64-100-10) on scikit-learn's digits"
method = "toy"
device = "cpu"

[data]
dataset = "digits"
batch_size = 100

[model]
architecture = "mlp"
hidden = [100]

[optim]
lr = 0.01

[train]
epochs = 5
"""

#: The shared tests that read the registry, each selected for the toy method (or for every method).
SHARED = {
    "tests/pipeline/test_services.py": "toy",
    "tests/methods/test_importance_methods.py": "toy",
    "tests/core/test_export.py": "toy",
    "tests/models/test_user_model.py": "toy",
    "tests/methods/test_methods.py": "every_registered_method",
    "tests/test_option_constraints.py": "toy and (refused or declares)",
    "tests/test_docs.py": "reference_is_generated or readmes_method_table or every_method_and_core_section",
    "tests/test_readme.py": "quick_start_runs or under_15",
    "tests/pipeline/test_compare.py": "cells_of_a_comparison",
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A copy of the installed package (its top-level ``models``, ``guides``, ``analysis`` inside it), the
    tests, docs/generate.py and its outputs, with the toy package added and nothing else changed."""
    root = tmp_path_factory.mktemp("copy")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(Path(bayesprune.__file__).parent, root / "bayesprune", ignore=skip)
    for module in (bayesprune.models, bayesprune.guides, bayesprune.analysis):
        target = root / "bayesprune" / module.__name__.rsplit(".", 1)[1]
        if not target.exists():  # an editable install maps them from the top-level folders
            shutil.copytree(Path(module.__file__).parent, target, ignore=skip)
    shutil.copytree(ROOT / "tests", root / "tests", ignore=skip)
    (root / "docs").mkdir()
    for name in ("README.md", "setup.cfg", "docs/generate.py", "docs/reference.md", "docs/usage.md"):
        shutil.copy(ROOT / name, root / name)
    package = root / "bayesprune" / "methods" / "toy"
    (package / "configs").mkdir(parents=True)
    (package / "__init__.py").write_text(TOY)
    (package / "configs" / "toy-digits.toml").write_text(CONFIG)
    copy_method(root / "bayesprune" / "methods", "sparse-vd", COPIED)
    return root


#: The name the copy of Sparse VD is registered under.
COPIED = "vd-copy"


def copy_method(methods: Path, name: str, new: str):
    """``methods/<name>`` copied to ``methods/<new>`` (Python names), ``name`` replaced by ``new`` in every
    file and file name of the copy (its registered name, table, imports and configs)."""
    source, target = methods / name.replace("-", "_"), methods / new.replace("-", "_")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted(target.rglob("*"), reverse=True):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            path.write_text(text.replace(name, new).replace(name.replace("-", "_"), new.replace("-", "_")))
        if name in path.name:
            path.rename(path.with_name(path.name.replace(name, new)))
    # its own row of the README's method table, short as a new method's (the README stays under 15 kB)
    for path in target.glob("*.py"):
        text = re.sub(r'\n    summary = ".*?"\n', f'\n    summary = "{new}: Sparse VD copied"\n', path.read_text())
        path.write_text(re.sub(r"\n    paper = \(\n.*?\n    \)\n", '\n    paper = "none"\n', text, flags=re.S))


#: In one process of the copy (one import of torch): where bayesprune comes from, ``bayesprune list``,
#: ``python docs/generate.py`` (what the developer of a method runs), a short run of each new method and
#: one comparison of both (their cells and the magnitude cell they share), then the shared tests.
SESSION = """
import runpy, sys

import pytest

import bayesprune, bayesprune.models
from bayesprune.cli import main

print("imported", bayesprune.__file__, bayesprune.models.__file__)
assert main(["list"]) == 0
assert runpy.run_path("docs/generate.py")["main"]() == 0
assert main(["run", "toy-digits", "--out", "run", "--quiet", "--set", "train.epochs=1", "--set", "baseline.enabled=false"]) == 0
assert main(["compare", "--out", "cmp", "--methods", "toy", "vd-copy", "--sparsities", "0.5", "--seeds", "0",
             "--set", "train.epochs=1", "--set", "baseline.epochs=1", "--set", "compare.finetune_epochs=1"]) == 0
assert main(["run", "vd-copy-digits", "--out", "run-copy", "--quiet", "--set", "train.epochs=1"]) == 0
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def session(copy):
    """What :data:`SESSION` printed in the copy."""
    selection = " or ".join(f"({expression})" for expression in sorted({*SHARED.values(), COPIED}))
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    arguments = ["-o", "addopts=", "-p", "no:cacheprovider", "--import-mode=importlib", "-v", "-k", selection, *SHARED]
    result = subprocess.run(
        [sys.executable, "-c", SESSION, *arguments], cwd=copy, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    return result.stdout


def test_the_copy_is_what_runs(copy, session):
    (imported,) = [line.split()[1:] for line in session.splitlines() if line.startswith("imported ")]
    assert imported == [str(copy / "bayesprune" / "__init__.py"), str(copy / "bayesprune" / "models" / "__init__.py")]


def test_the_toy_method_is_listed_documented_run_and_compared(copy, session):
    assert "toy-digits" in session
    readme, reference = (copy / "README.md").read_text(), (copy / "docs" / "reference.md").read_text()
    assert "| `toy` | weight magnitude of a plainly trained network | none |" in readme
    (loop,) = [line for line in readme.splitlines() if line.startswith("for method in ")]
    assert "toy" in loop.split()  # the quick start runs toy-digits
    assert (
        "## `[toy]`" in reference
        and "| `power` | `1.0` | a positive number up to 1e+06 | a weight's score is its magnitude to this power |"
        in reference
    )

    metrics = json.loads((copy / "run" / "metrics.json").read_text())
    assert metrics["method"] == "toy" and metrics["score"] == "weight magnitude"
    rows = leaderboard(copy)
    assert set(rows) == {"magnitude", "toy", COPIED} and float(rows["toy"]["sparsity"]) == 0.5


def leaderboard(copy) -> dict:
    """The rows of the comparison of the toy method and the copy of Sparse VD, by method."""
    with open(copy / "cmp" / "leaderboard.csv") as handle:
        return {row["method"]: row for row in csv.DictReader(handle)}


def test_the_shared_method_tests_pass_for_the_toy_method(session):
    """The shared tests, README and reference included, after ``python docs/generate.py``: all pass, none
    is skipped, and those of the toy method ran."""
    summary = session.strip().splitlines()[-1]
    assert " passed" in summary and not any(word in summary for word in ("failed", "skipped", "error")), summary
    ran = {line.split("::")[0] for line in session.splitlines() if "[toy]" in line and "PASSED" in line}
    assert {file for file, selection in SHARED.items() if selection == "toy"} <= ran, session[-3000:]


def test_a_copy_of_sparse_vd_under_another_name_is_listed_run_compared_and_tested(copy, session):
    assert f"{COPIED}-digits" in session
    metrics = json.loads((copy / "run-copy" / "metrics.json").read_text())
    assert metrics["method"] == COPIED and metrics["score"] == "-log alpha"
    rows = leaderboard(copy)
    assert set(rows) == {"magnitude", "toy", COPIED} and float(rows[COPIED]["sparsity"]) == 0.5
    ran = {line.split("::")[0] for line in session.splitlines() if f"[{COPIED}]" in line and "PASSED" in line}
    assert {file for file, selection in SHARED.items() if selection == "toy"} <= ran, session[-3000:]
