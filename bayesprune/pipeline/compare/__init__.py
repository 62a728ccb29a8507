"""Many runs at once: ``compare`` every method on one network, data and budget, and ``sweep`` a grid of
any config, each cell an ordinary run directory scheduled by an engine (a local process pool or Ray)."""

from bayesprune.pipeline.compare.cells import Cell, execute
from bayesprune.pipeline.compare.comparison import compare, comparison_cells
from bayesprune.pipeline.compare.engines import ENGINES, run_cells
from bayesprune.pipeline.compare.options import CompareOptions, comparison_configs, load_comparison

__all__ = [
    "Cell",
    "CompareOptions",
    "ENGINES",
    "compare",
    "comparison_cells",
    "comparison_configs",
    "execute",
    "load_comparison",
    "run_cells",
]
