"""What is read off ArviZ data once it is built: ``posterior.nc`` written, :func:`arviz.summary`, and the
diagnostic plots (forest plot of ψ, posterior predictive check, CDFs of the inclusion probabilities)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bayesprune.analysis.arviz_compat import for_arviz, group, group_names
from bayesprune.core.errors import Interrupted

if TYPE_CHECKING:  # xarray and matplotlib are imported where a posterior is written or drawn, not here
    import xarray as xr

#: The attribute of every group of ``posterior.nc`` naming the method whose fit wrote it (``report``
#: refuses the posterior of another method's run).
METHOD_ATTRIBUTE = "bayesprune_method"


#: The attribute of ``posterior.nc``'s ``sample_stats`` listing the chains (restarts) whose fit did not learn
#: (:func:`~bayesprune.methods.sbnn.learned.not_learned`); absent where every one did.
NOT_LEARNED_ATTRIBUTE = "restarts_not_learned"


#: The attribute of ``posterior.nc``'s ``sample_stats`` listing the chains whose first fit did not learn and that
#: were fitted again (``sbnn.refit``), beside :data:`REFIT_START_ATTRIBUTE`, the start they were fitted from;
#: absent where none was.
REFITTED_ATTRIBUTE = "restarts_refitted"
REFIT_START_ATTRIBUTE = "refit_start"


def restarts_not_learned(idata) -> list:
    """The chains of ``idata`` whose fit predicted its training rows no better than the trivial predictor
    (:data:`NOT_LEARNED_ATTRIBUTE`)."""
    return _chains(idata, NOT_LEARNED_ATTRIBUTE)


def restarts_refitted(idata) -> list:
    """The chains of ``idata`` fitted again because their first fit did not learn (:data:`REFITTED_ATTRIBUTE`)."""
    return _chains(idata, REFITTED_ATTRIBUTE)


def _chains(idata, attribute: str) -> list:
    """The chains ``sample_stats``'s ``attribute`` lists (netCDF reads a list of one back as a number)."""
    stats = getattr(idata, "sample_stats", None)
    value = None if stats is None else stats.attrs.get(attribute)
    return [] if value is None else [int(chain) for chain in np.atleast_1d(value)]


def write_posterior(idata, path, *, method: str | None = None) -> Path:
    """Write ``idata`` to a netCDF file (``posterior.nc``) that :func:`arviz.from_netcdf` reads back,
    every group's :data:`METHOD_ATTRIBUTE` set to ``method`` (the registered method that fitted it)."""
    if method is not None:
        for group in group_names(idata):
            idata[group].attrs[METHOD_ATTRIBUTE] = method
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {}
    try:
        import h5netcdf  # noqa: F401

        options["engine"] = "h5netcdf"
    except ImportError:
        pass
    from bayesprune.core.files import replacing

    with replacing(path) as temporary:
        idata.to_netcdf(str(temporary), **options)
    return path


def summary_table(idata, var_names=None, *, kind: str = "all", round_to=2):
    """:func:`arviz.summary` of the posterior group (mean, sd, interval, ESS, R-hat, MCSE per element).

    Variables that are constant within each chain (the inclusion summaries) get an infinite
    or NaN R-hat by construction; the divide-by-zero warnings this causes are silenced.
    """
    import arviz as az

    names = [var_names] if isinstance(var_names, str) else var_names
    with _quiet_arviz(), np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return az.summary(for_arviz(idata), var_names=names, kind=kind, round_to=round_to)


@contextlib.contextmanager
def _quiet_arviz():
    """Mute ArviZ's logged warnings: a single chain (the default run) logs one on every R-hat it computes.
    ArviZ 0.x logs them through ``arviz._log``, a ``Logger`` outside ``logging``'s registry."""
    import arviz as az

    logs = {logging.getLogger("arviz"), getattr(az, "_log", None)} - {None}
    levels = {log: log.level for log in logs}
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in levels.items():
            log.setLevel(level)


def plot_diagnostics(idata, folder, *, max_features: int = 20) -> dict:
    """Write diagnostic PNGs to ``folder``; returns ``{name: path}`` of the files written.

    - ``forest_psi.png``: forest plot of ``psi`` per restart (only when ``psi`` is stored), for the
      ``max_features`` features of highest mean ψ, with labelled axes;
    - ``ppc.png``: posterior predictive check of the test targets;
    - ``inclusion_cdf.png``: CDF of the inclusion probabilities of all weights, one line per chain.

    ArviZ draws the first two (``plot_forest``; ``plot_ppc`` under ArviZ 0.x, ``plot_ppc_dist`` under
    ArviZ ≥ 1); if that fails, a plain matplotlib version is drawn instead and a warning says why.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with _quiet_arviz():
        return _plot_diagnostics(for_arviz(idata), folder, max_features)


def _plot_diagnostics(idata, folder, max_features):
    from bayesprune.analysis.plots import plot_inclusion_cdfs, plt

    posterior = group(idata, "posterior")
    written = {}
    if "psi" in posterior.data_vars:
        path = folder / "forest_psi.png"
        psi = posterior["psi"]
        top = psi["feature"].values[np.argsort(-psi.mean(("chain", "draw")).values, kind="stable")[:max_features]]
        _arviz_or_fallback(
            lambda az: _label_forest(az.plot_forest(idata, var_names=["psi"], coords={"feature": list(top)})),
            lambda: _forest_fallback(psi.sel(feature=top), plt),
            path,
            plt,
            "forest plot",
        )
        written["forest_psi"] = path
    groups = group_names(idata)
    if {"posterior_predictive", "observed_data"} <= set(groups) and group(idata, "posterior_predictive").sizes["draw"]:
        path = folder / "ppc.png"
        _arviz_or_fallback(
            _arviz_ppc(idata),
            lambda: _ppc_fallback(
                group(idata, "posterior_predictive")["obs"], group(idata, "observed_data")["obs"], plt
            ),
            path,
            plt,
            "posterior predictive check",
        )
        written["ppc"] = path
    variational = group(idata, "variational") if "variational" in groups else None
    if variational is not None and "inclusion_probability_quantile" in variational.data_vars:
        path = folder / "inclusion_cdf.png"
        quantiles = variational["inclusion_probability_quantile"]
        plot_inclusion_cdfs(
            {
                f"chain {chain}": (quantiles.sel(chain=chain).values, quantiles["quantile"].values)
                for chain in quantiles["chain"].values
            },
            path,
        )
        written["inclusion_cdf"] = path
    return written


def _arviz_ppc(idata):
    def draw(az):
        if hasattr(az, "plot_ppc"):  # ArviZ 0.x
            return az.plot_ppc(idata, num_pp_samples=min(50, group(idata, "posterior_predictive").sizes["draw"]))
        return az.plot_ppc_dist(idata)  # ArviZ >= 1

    return draw


def _arviz_or_fallback(arviz_plot, fallback, path, plt, what):
    import arviz as az

    from bayesprune.analysis.plots import save_figure

    before = set(plt.get_fignums())
    try:
        _save_result(arviz_plot(az), path, plt)
    except Interrupted:  # a stop request (save_figure), not a failure of ArviZ's
        raise
    except Exception as error:  # noqa: BLE001 - any ArviZ failure falls back to a plain plot
        warnings.warn(
            f"arviz could not draw the {what} ({type(error).__name__}: {error}); drawing a plain one",
            RuntimeWarning,
            stacklevel=3,
        )
        save_figure(fallback(), path)
    finally:
        for number in set(plt.get_fignums()) - before:
            plt.close(number)


def _save_result(result, path, plt):
    """Save what an ArviZ plot returned: matplotlib axes (0.x) or a PlotCollection (≥ 1)."""
    from bayesprune.analysis.plots import save_figure

    if hasattr(result, "savefig"):
        from bayesprune.core.files import replacing

        with replacing(path) as temporary:
            result.savefig(str(temporary))
        return
    axes = np.ravel(np.asarray(result, dtype=object))
    figure = axes[0].figure if axes.size and hasattr(axes[0], "figure") else plt.gcf()
    save_figure(figure, path)


def _forest_fallback(psi: xr.DataArray, plt):
    draws = psi.transpose("chain", "draw", ...).values
    figure, axis = plt.subplots(figsize=(5, 0.4 * draws.shape[2] + 1.5))
    positions = np.arange(draws.shape[2])
    for chain, values in enumerate(draws):
        low, high = np.quantile(values, [0.03, 0.97], axis=0)
        axis.errorbar(
            values.mean(0),
            positions + 0.1 * chain,
            xerr=[values.mean(0) - low, high - values.mean(0)],
            fmt="o",
            label=f"restart {chain}",
        )
    axis.set_yticks(positions, [str(v) for v in psi[psi.dims[-1]].values])
    axis.set(xlabel=FOREST_XLABEL, ylabel=FOREST_YLABEL, title="feature importance per restart")
    axis.legend()
    return figure


FOREST_XLABEL = "importance ψ (eq. 3.18), 94% interval per restart"


FOREST_YLABEL = "input feature (one line per restart)"


def _label_forest(axes):
    """Name the axes of ArviZ's forest plot (it labels neither); a PlotCollection (ArviZ ≥ 1) is returned as it is."""
    flat = np.ravel(np.asarray(axes, dtype=object))
    if flat.size and hasattr(flat[0], "set_xlabel"):
        flat[0].set_xlabel(FOREST_XLABEL)
        flat[0].set_ylabel(FOREST_YLABEL)
    return axes


def _ppc_fallback(predicted: xr.DataArray, observed: xr.DataArray, plt):
    figure, axis = plt.subplots(figsize=(5, 3.5))
    draws = predicted.stack(sample=("chain", "draw")).transpose("sample", ...).values
    bins = np.histogram_bin_edges(np.concatenate([draws.ravel(), observed.values.ravel()]), bins=30)
    for row in draws[:50]:
        axis.hist(row, bins=bins, density=True, histtype="step", color="C0", alpha=0.2)
    axis.hist(observed.values, bins=bins, density=True, histtype="step", color="k", linewidth=2, label="observed")
    axis.set(xlabel="obs", title="posterior predictive check")
    axis.legend()
    return figure
