"""CPU seconds to write and read back a run's ``posterior.nc``, with its sites' dimensions shared by length
(``dim_<axis>_<length>``, :func:`~bayesprune.analysis.inference_data.site_dims`) and, for comparison, renamed
to one dimension per axis of every site (``<site>_dim_<axis>``, the names before), in the same process.

The run is :func:`torchvision_walk.run_one`'s: one epoch of ``--method`` on a torchvision builder (random
weights, random images at the smallest side it takes). Sparse VD stores draws of every site that fits
20,000 weights, smallest first (shufflenet_v2_x0_5: 65 sites, 130 variables); the sBNN only the first layer.

    python benchmarks/posterior_nc.py                               # shufflenet_v2_x0_5, sparse-vd
    python benchmarks/posterior_nc.py resnet18 --method sbnn

Prints, for each naming, the file's dimensions and the CPU seconds of ``write_posterior`` and of
``arviz.from_netcdf`` (the report's and ``bayesprune importance``'s read), the best of ``--repeats``.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import arviz as az
import torch
import xarray as xr

from bayesprune.analysis.arviz_compat import group, group_names, inference_data_from_groups
from bayesprune.analysis.diagnostics import write_posterior

#: Dimensions that are not a site's axes.
NAMED = {"chain", "draw", "feature", "site", "quantile", "test_point", "epoch"}
#: Suffixes of the variables that hold a site's parameters or indicators (``1.weight.loc``, ...).
SUFFIXES = (".inclusion", ".loc", ".scale", ".inclusion_probability", ".theta", ".log_sigma2", ".log_alpha")


def per_site_names(idata):
    """``idata`` with every site axis its own dimension, ``<site>_dim_<axis>``, and its coordinate: the
    names before (tests/test_cli.py reads such a file back)."""
    groups = {}
    for group_name in group_names(idata):
        dataset = group(idata, group_name)
        renamed = {}
        for name, values in dataset.data_vars.items():
            site = next((name.removesuffix(suffix) for suffix in SUFFIXES if name.endswith(suffix)), name)
            axes = iter(range(values.ndim))
            dims = [dim if dim in NAMED else f"{site}_dim_{next(axes)}" for dim in values.dims]
            renamed[name] = xr.Variable(dims, values.values)
        coords = {dim: dataset[dim].values for dim in NAMED if dim in dataset.coords}
        axes = {dim: range(size) for values in renamed.values() for dim, size in zip(values.dims, values.shape)}
        coords |= {dim: list(indices) for dim, indices in axes.items() if dim not in NAMED}  # as the writers gave them
        groups[group_name] = xr.Dataset(renamed, coords=coords, attrs=dataset.attrs)
    return inference_data_from_groups(groups)


def cpu_seconds(repeats: int, function, *args, **kwargs) -> float:
    """The fewest CPU seconds of ``repeats`` calls of ``function(*args, **kwargs)``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        function(*args, **kwargs)
        best = min(best, time.process_time() - start)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builder", nargs="?", default="shufflenet_v2_x0_5")
    parser.add_argument("--method", default="sparse-vd", choices=["sparse-vd", "sbnn"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from torchvision_walk import run_one, smallest_side

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sys.path.insert(0, tmp)
        status, err, out = run_one(folder, args.builder, args.method, smallest_side(args.builder))
        if status != 0:
            print(err, file=sys.stderr)
            return 1
        shared = az.from_netcdf(str(out / "posterior.nc"))
        for name in group_names(shared):
            group(shared, name).load()
        for naming, idata in (("shared by length", shared), ("one per site axis", per_site_names(shared))):
            path = folder / f"{naming.replace(' ', '-')}.nc"
            write = cpu_seconds(args.repeats, write_posterior, idata, path, method=args.method)
            read = cpu_seconds(args.repeats, az.from_netcdf, str(path))
            loaded = az.from_netcdf(str(path))
            dims = sum(len(group(loaded, name).sizes) for name in group_names(loaded))
            print(f"{naming:18s} {dims:4d} dimensions  write {write:5.2f} s  read {read:5.2f} s (CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
