"""Analysis of fitted posteriors: ArviZ conversion, diagnostics, importance, plots and tables.

The pruning curve (:func:`bayesprune.pipeline.evaluation.pruning_curve`) and a run's ``report.md``
(:func:`bayesprune.pipeline.report.write_report`) belong to the pipeline: they evaluate and lay out a
run, while this package reads posteriors and never fits.
"""

import importlib

#: Each name of the package's interface and the module that defines it, imported on first use
#: (PEP 562): the modules import xarray and matplotlib, a second of every process's start (each
#: command, each comparison worker), while most processes only read importance or write tables.
_MODULE_OF = {
    "plot_diagnostics": "diagnostics",
    "summary_table": "diagnostics",
    "to_inference_data": "inference_data",
    "write_posterior": "diagnostics",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
