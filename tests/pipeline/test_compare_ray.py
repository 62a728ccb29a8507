"""The Ray engine gives the numbers of the cells run here (``cells_in_this_process``: what every engine
schedules, :func:`~bayesprune.pipeline.compare.cells.execute`); a file of its own, as Ray's start was a
sixth of test_compare.py's time and --dist loadfile spreads files over the workers."""

import json

import pytest

from bayesprune.pipeline.compare import compare
from helpers import TINY

pytestmark = pytest.mark.usefixtures("cells_in_this_process")


def _metrics(out, name):
    return json.loads((out / "cells" / name / "metrics.json").read_text())


def test_the_ray_engine_gives_the_local_numbers(tmp_path, monkeypatch, capfd):
    """Ray started as compare starts it (:func:`~bayesprune.pipeline.compare.ray_head.started`: no notice of
    Ray's on the terminal, shut down after), its head's address given as --address (a real head passes the
    check of --address: Ray's own GCS client asks it for the cluster's id)."""
    ray = pytest.importorskip("ray")
    from bayesprune.pipeline.compare.ray_head import started

    monkeypatch.chdir(tmp_path)  # Ray's workers import from the driver's folder first: not the source checkout
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # one CPU for the Ray started here: both cells run in one worker, which imports bayesprune and torch once
    # (two CPUs started two workers importing them side by side: 22 s of the test's 44 s at load 7, 10 s with one)
    monkeypatch.setenv("RAY_OVERRIDE_RESOURCES", '{"CPU": 1}')
    grid = dict(methods=["pbp"], sparsities=[0.5], seeds=[0], overrides=TINY, report=lambda *a: None)
    local = compare(None, tmp_path / "local", **grid)
    capfd.readouterr()
    with started(None):
        assert not capfd.readouterr().err.strip()  # Ray's token warning and its INFO line were printed here
        head = ray.get_runtime_context().gcs_address
        remote = compare(None, tmp_path / "ray", engine="ray", address=head, **grid)
    assert not ray.is_initialized()

    def untimed(value):
        if isinstance(value, dict):
            return {key: untimed(item) for key, item in value.items() if "seconds" not in key}
        return [untimed(item) for item in value] if isinstance(value, list) else value

    for name in ("magnitude-seed0", "pbp-s0.5-seed0"):  # both kinds of cell, every number of their metrics.json
        assert untimed(_metrics(tmp_path / "local", name)) == untimed(_metrics(tmp_path / "ray", name))
    for key in ("test_error", "plain_test_error", "bound", "params"):
        assert [row[key] for row in remote] == [row[key] for row in local]
