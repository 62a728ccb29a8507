"""Analysis of fitted posteriors: ArviZ conversion, diagnostics, importance, plots and tables.

The pruning curve (:func:`bayesprune.pipeline.evaluation.pruning_curve`) and a run's ``report.md``
(:func:`bayesprune.pipeline.report.write_report`) belong to the pipeline: they evaluate and lay out a
run, while this package reads posteriors and never fits.
"""

from bayesprune.analysis.diagnostics import plot_diagnostics, summary_table, write_posterior
from bayesprune.analysis.inference_data import to_inference_data

__all__ = [
    "plot_diagnostics",
    "summary_table",
    "to_inference_data",
    "write_posterior",
]
