"""``bayesprune sweep``: the cross product of ``--grid key=v1,v2`` assignments over a config, each grid
point × seed an ordinary run directory (a cell), and a summary with the mean and standard deviation
over seeds per grid point.

A method's table may depend on the grid's size (:meth:`~bayesprune.methods.Method.swept`; PBP counts the
grid in its union bound, so each cell's certificate holds for whichever point is picked afterwards); the
options it sets so (:attr:`~bayesprune.methods.Method.sweep_sets`) are refused in a grid.
"""

import copy
import hashlib
import itertools
import json
import re
import tomllib
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import tomli_w

from bayesprune.analysis.tables import markdown_table, write_csv
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.files import write_text
from bayesprune.methods import available_methods, get_method
from bayesprune.pipeline.compare.cells import Cell
from bayesprune.pipeline.compare.engines import check_engine, engine_started, run_tracked
from bayesprune.pipeline.compare.grid import check_cells, check_grid_dir, refuse_with_resume
from bayesprune.pipeline.compare.tracking import open_tracker
from bayesprune.pipeline.config import RunConfig, apply_overrides, parse_override, read_config
from bayesprune.pipeline.rundir import out_lock

MARKER = "sweep.toml"
#: Keys a grid may not vary: the sweep sets them itself.
RESERVED = ("seed", "seeds")


def _split(text: str) -> list:
    """``"1,[2,3],'a,b'"`` → ``["1", "[2,3]", "'a,b'"]``: commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return [*parts, current]


def _swept_keys() -> set:
    """``<method>.<option>`` of every option a method's :meth:`~bayesprune.methods.Method.swept` sets."""
    return {f"{name}.{key}" for name, method in available_methods().items() for key in method.sweep_sets}


def parse_grid(assignments) -> dict:
    """``["pbp.alpha=0.5,0.7", ...]`` → ``{"pbp.alpha": [0.5, 0.7], ...}`` (values read as TOML, else strings)."""
    grid = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BayesPruneError(f"--grid expects key=v1,v2,..., got {assignment!r}")
        if key in RESERVED or key in _swept_keys():
            raise BayesPruneError(
                f"--grid {key}: set by the sweep itself" + (" (give --seeds)" if key.startswith("seed") else "")
            )
        if key in grid:
            raise BayesPruneError(f"--grid {key}: given twice")
        values = [part.strip() for part in _split(text)]
        if not text.strip() or any(not part for part in values):
            raise BayesPruneError(f"--grid {key}: needs a non-empty list of values, got {text!r}")
        grid[key] = [parse_override(f"{key}={part}")[1] for part in values]
        if len({json.dumps(value, sort_keys=True) for value in grid[key]}) < len(values):
            raise BayesPruneError(f"--grid {key}: a value is given twice")
    if not grid:
        raise BayesPruneError("sweep needs at least one --grid key=v1,v2,...")
    return grid


def _value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ""))
    return re.sub(r"[^A-Za-z0-9.+-]", "_", text)


#: The longest grid point name kept whole: with ``-seed<n>`` and a staging directory's ``.<name>.12345678.partial``
#: a cell folder's name stays within the file system's 255 bytes.
NAME_KEPT = 200


def point_name(point: dict) -> str:
    """A grid point as a folder name: ``pbp.alpha=0.5_pbp.sparsity=0.8``; a name beyond :data:`NAME_KEPT`
    characters (a long ``description``) is cut, followed by a digest of the whole point that keeps points apart."""
    name = "_".join(f"{key}={_value(value)}" for key, value in point.items())
    if len(name) <= NAME_KEPT:
        return name
    digest = hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]
    return f"{name[: NAME_KEPT - 17]}-{digest}"


def _config(raw: dict, assignments):
    return RunConfig.from_dict(apply_overrides(copy.deepcopy(raw), assignments))


def sweep_cells(raw: dict, grid: dict, seeds, overrides=()) -> list:
    """Every cell of the sweep over the parsed config ``raw``, each config validated (an unknown key
    or a value of the wrong type is refused naming the key, before anything is written)."""
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    base = _config(raw, overrides)
    seeds = list(seeds) if seeds else [base.seed]
    if len(set(seeds)) < len(seeds) or not all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds):
        raise BayesPruneError(f"--seeds must be distinct non-negative integers, got {seeds}")
    cells = []
    for point in points:
        assignments = [f"{key}={json.dumps(value)}" for key, value in point.items()]  # JSON scalars and lists are TOML
        try:
            config = _config(raw, [*overrides, *assignments])
        except ConfigError as error:
            raise ConfigError(f"--grid {point_name(point)}: {error}") from None
        for key, value in point.items():
            _check_applied(config, key, value)
        resolved = config.to_dict()
        resolved.pop("seeds", None)
        resolved[config.method] = get_method(config.method).swept(resolved.get(config.method, {}), len(points))
        for seed in seeds:
            cells.append(
                Cell(
                    name=f"{point_name(point)}-seed{seed}",
                    config={**copy.deepcopy(resolved), "seed": seed},
                    method=config.method,
                    seed=seed,
                    point=point,
                )
            )
    for cell in cells:
        cell.run_config()
    names = [cell.name for cell in cells]
    if len(set(names)) < len(names):
        raise BayesPruneError("--grid: two grid points give the same folder name; write the values apart")
    return cells


def _check_applied(config, key: str, value):
    """Refuse a grid key the config does not hold after all (``method`` varied across methods is fine)."""
    if key == "method":
        return
    raw = config.to_dict()
    node = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"--grid {key}: not a key of the config (method {config.method!r})")
        node = node[part]


def _numbers(metrics: dict) -> dict:
    return {
        key: value
        for key, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "seed"
    }


def summary_rows(cells: list, results: list) -> list:
    """One row per grid point: the point's values, the number of seeds, and every number of the cells'
    ``metrics.json`` (test error, training seconds, PBP's bound, …) as its mean and ``_std`` over seeds;
    ``failed`` names the point's cells whose fit failed, with their reasons."""
    groups = {}
    for cell, metrics in zip(cells, results):
        point, per_seed, failed = groups.setdefault(point_name(cell.point), (cell.point, [], []))
        if "failed" in metrics:
            failed.append(f"{cell.name}: {metrics['failed']}")
        else:
            per_seed.append(_numbers(metrics))
    rows = []
    for point, per_seed, failed in groups.values():
        keys = [key for key in (per_seed[0] if per_seed else {}) if all(key in numbers for numbers in per_seed)]
        row = {**point, "seeds": len(per_seed)}
        for key in keys:
            values = np.array([numbers[key] for numbers in per_seed], dtype=float)
            row[key] = float(values.mean())
            row[f"{key}_std"] = float(values.std(ddof=1)) if len(values) > 1 else None
        row["failed"] = "; ".join(failed) or None
        rows.append(row)
    return rows


def _shown(rows: list, grid: dict) -> list:
    """The summary's Markdown columns: the grid, seeds, and the main numbers where the cells have them."""
    main = (
        "test_error",
        "test_rmse",
        "test_error_mc",
        "baseline_test_error",
        "baseline_test_rmse",
        "train_seconds",
        "bound",
        "bound_kl_inverse",
        "empirical_risk",
        "grid_size",
    )
    keys = list(dict.fromkeys(key for row in rows for key in row))
    columns = [
        *grid,
        "seeds",
        *(key for key in keys if key in main or (key.endswith("_std") and key[:-4] in main)),
        "failed",
    ]
    return [{key: "–" if row.get(key) is None else row.get(key) for key in columns} for row in rows]


def sweep(
    source,
    grid_assignments,
    out,
    *,
    seeds=None,
    jobs: int = 1,
    alone: bool = False,
    engine: str = "local",
    address=None,
    overrides=(),
    track=None,
    track_uri=None,
    resume: bool = False,
    report=None,
    status=None,
) -> list:
    """Run the sweep into ``out`` (a new folder), or continue it (``resume=True``): cells under
    ``out/cells``, ``summary.csv`` (every number) and ``summary.md``; returns the summary rows.

    ``out/sweep.toml`` keeps the parsed config, the grid, the overrides and the seeds, written before
    the first cell, so that ``resume`` continues from it alone (no config, grid or overrides are given
    then; the config file may have changed since); ``seeds`` given with ``resume`` add or drop cells,
    a finished cell is never fitted again. Every cell is checked before any fit, and a cell that fails
    while fitting is reported in the summary while the others finish (see
    :func:`~bayesprune.pipeline.compare.comparison.compare`, as is ``alone``). ``track="mlflow"`` logs each cell and the summary
    to MLflow (:mod:`bayesprune.pipeline.compare.tracking`)."""
    out = Path(out)
    if resume:
        refuse_with_resume(config=source, grid=list(grid_assignments or ()), set=list(overrides))
    with out_lock(out), ExitStack() as held:  # one writer per --out: a run, a comparison or a sweep
        saved = check_grid_dir(out, MARKER, resume=resume)
        if saved:
            source, raw, grid, held_seeds, overrides = read_marker(saved)
            seeds = seeds or held_seeds
        else:
            raw, grid = read_config(source), parse_grid(grid_assignments)
        cells = sweep_cells(raw, grid, seeds, overrides)
        check_engine(engine, jobs=jobs, address=address)
        folders = check_cells(out, cells)
        tracker = open_tracker(track, track_uri, out, kind="sweep")
        held.enter_context(engine_started(engine, address))  # Ray reached before anything is written
        out.mkdir(parents=True, exist_ok=True)
        write_text(
            out / MARKER,
            tomli_w.dumps(
                {
                    "source": str(source or "default"),
                    "grid": grid,
                    "overrides": list(overrides),
                    "seeds": sorted({cell.seed for cell in cells}),
                    "config": raw,
                }
            ),
        )
        results = run_tracked(
            cells, folders, tracker, engine=engine, jobs=jobs, alone=alone, report=report, status=status
        )
        rows = summary_rows(cells, results)
        write_csv(
            out / "summary.csv", [{key: "" if value is None else value for key, value in row.items()} for row in rows]
        )
        write_text(
            out / "summary.md",
            f"# Sweep of {source or 'default'}\n\nMean and standard deviation over seeds per grid "
            f"point ({len(rows)} points, cells in cells/).\n\n{markdown_table(_shown(rows, grid))}\n",
        )
        if tracker is not None:
            tracker.finish([MARKER, "summary.md", "summary.csv"])
        return rows


def read_marker(path: Path) -> tuple:
    """``(source, config, grid, seeds, overrides)`` of a sweep's ``sweep.toml``, refused in one line naming
    the file and the key where it does not parse or a key is missing or of the wrong type."""
    try:
        held = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise BayesPruneError(f"{path}: not valid TOML ({' '.join(str(error).split())[:120]})") from None
    kinds = {"source": str, "config": dict, "grid": dict, "seeds": list, "overrides": list}
    for key, kind in kinds.items():
        if not isinstance(held.get(key), kind):
            raise BayesPruneError(f"{path}: {key!r} is missing or not a {kind.__name__}")
    if not held["grid"] or not all(isinstance(values, list) and values for values in held["grid"].values()):
        raise BayesPruneError(f"{path}: 'grid' must map keys to non-empty lists of values")
    if not all(isinstance(item, str) for item in held["overrides"]):
        raise BayesPruneError(f"{path}: 'overrides' must be a list of strings")
    return held["source"], held["config"], held["grid"], held["seeds"], held["overrides"]
