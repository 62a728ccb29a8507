"""The command line starts without the libraries that only some steps use, each seconds of every process's
start (each of a comparison's workers, each command):

- Torch-Pruning imports timm, torchvision and torch._dynamo: it is imported where a dependency graph is
  built, not with bayesprune or its methods;
- xarray (with pandas), matplotlib and ArviZ are imported where a posterior is written or read and where a
  plot is drawn, not with ``bayesprune.analysis`` or the modules that only read importance or write tables."""

import subprocess
import sys

import pytest

#: Imported by ``import torch_pruning``, and by nothing that every run needs.
STRUCTURED_ONLY = ("torch_pruning", "timm", "torchvision", "torch._dynamo")

#: Imported by the steps that write ``posterior.nc`` or draw a plot.
POSTERIOR_AND_PLOTS_ONLY = ("xarray", "pandas", "matplotlib", "arviz")

PROGRAM = f"""
import sys

import pytest
import bayesprune.cli
import bayesprune.pipeline.compare
import bayesprune.pipeline.runner
from bayesprune.methods import available_methods

assert len(available_methods()) >= 10
print(*[name for name in {STRUCTURED_ONLY + POSTERIOR_AND_PLOTS_ONLY!r} if name in sys.modules])
"""


def test_bayesprune_and_every_method_import_without_torch_pruning_xarray_or_matplotlib(tmp_path):
    # outside the checkout, so that the installed package is what is imported (as a user's command does)
    result = subprocess.run([sys.executable, "-c", PROGRAM], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == []


#: Prints, last thing at exit, whether the collector's objects were frozen (:func:`gc.freeze`) by then.
EXIT_PROGRAM = """
import atexit, gc, os, sys
atexit.register(lambda: print("frozen" if gc.get_freeze_count() else "not frozen"))  # runs after those below
{}
"""

STARTS = {
    "the command line": "from bayesprune.cli import main; main(['list'])",
    "a comparison's worker": "from bayesprune.pipeline.compare.engines import _worker_start; _worker_start(os.getppid())",
    "python alone": "pass",
}


@pytest.mark.parametrize("start", STARTS)
def test_a_command_and_a_worker_exit_without_the_collectors_walk_over_every_module(tmp_path, start):
    """The interpreter's last collections walk every object of every module at exit (seconds with torch
    imported: the local engine's shutdown waited on its workers' for most of its time): the command line and
    a comparison's worker freeze the objects first, once their ``atexit`` handlers ran."""
    program = EXIT_PROGRAM.format(STARTS[start])
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == ("not frozen" if start == "python alone" else "frozen")
