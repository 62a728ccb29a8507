"""Analysis of fitted posteriors: evaluation under pruning, plots and reports."""
from .evaluation import metric_name, pruning_curve
from .report import write_report

__all__ = ["metric_name", "pruning_curve", "write_report"]
