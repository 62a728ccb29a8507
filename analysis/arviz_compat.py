"""ArviZ 0.x and 1.x read alike: ``InferenceData`` where it exists, else ``xarray.DataTree``, and
their groups read the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # xarray is imported where data is built or read, not with the package
    import xarray as xr

# ----------------------------------------------------------------------------------------------------
# ArviZ 0.x / 1.x compatibility


def inference_data_from_groups(groups: dict):
    """``arviz.InferenceData`` where it exists (ArviZ 0.x), else ``xarray.DataTree`` (ArviZ ≥ 1)."""
    import arviz as az
    import xarray as xr

    inference_data = getattr(az, "InferenceData", None)
    if inference_data is not None:
        return inference_data(**groups)
    return xr.DataTree.from_dict(groups)


def for_arviz(idata):
    """A DataTree becomes an InferenceData under ArviZ 0.x, whose functions do not read DataTrees."""
    import arviz as az
    import xarray as xr

    inference_data, tree = getattr(az, "InferenceData", None), getattr(xr, "DataTree", None)
    if inference_data is not None and tree is not None and isinstance(idata, tree):
        return inference_data.from_datatree(idata)
    return idata


def group_names(idata) -> list:
    if hasattr(idata, "children"):  # DataTree
        return list(idata.children)
    return list(idata.groups())


def group(idata, name) -> xr.Dataset:
    import xarray as xr

    group = idata[name]
    return group.to_dataset() if hasattr(group, "to_dataset") and not isinstance(group, xr.Dataset) else group
