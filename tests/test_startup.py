"""The command line starts without the libraries that only some steps use, each seconds of every process's
start (each of a comparison's workers, each command):

- Torch-Pruning imports timm, torchvision and torch._dynamo: it is imported where a dependency graph is
  built, not with bayesprune or its methods;
- xarray (with pandas), matplotlib and ArviZ are imported where a posterior is written or read and where a
  plot is drawn, not with ``bayesprune.analysis`` or the modules that only read importance or write tables."""

import subprocess
import sys

#: Imported by ``import torch_pruning``, and by nothing that every run needs.
STRUCTURED_ONLY = ("torch_pruning", "timm", "torchvision", "torch._dynamo")

#: Imported by the steps that write ``posterior.nc`` or draw a plot.
POSTERIOR_AND_PLOTS_ONLY = ("xarray", "pandas", "matplotlib", "arviz")

PROGRAM = f"""
import sys
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
