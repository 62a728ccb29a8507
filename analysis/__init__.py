"""Analysis of fitted posteriors: evaluation under pruning, ArviZ conversion, plots and reports."""
from .evaluation import metric_name, pruning_curve
from .inference_data import plot_diagnostics, summary_table, to_inference_data, write_posterior
from .report import write_report

__all__ = [
    "metric_name",
    "plot_diagnostics",
    "pruning_curve",
    "summary_table",
    "to_inference_data",
    "write_posterior",
    "write_report",
]
