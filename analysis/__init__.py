"""Analysis of fitted posteriors: evaluation under pruning, ArviZ conversion, plots and tables.

A run's ``report.md`` is written by :func:`bayesprune.analysis.report.write_report`, which is not
re-exported here: it asks the method registry for each method's sections, so it sits above the
methods (with the runner), while the rest of this package sits below them.
"""
from .evaluation import metric_name, pruning_curve
from .inference_data import plot_diagnostics, summary_table, to_inference_data, write_posterior

__all__ = [
    "metric_name",
    "plot_diagnostics",
    "pruning_curve",
    "summary_table",
    "to_inference_data",
    "write_posterior",
]
