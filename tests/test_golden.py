"""Refactor safety: every method's digits config at 2 epochs (every stage shortened) gives the
``metrics.json`` recorded before the platform refactor, key for key, on one CPU thread.

Record again (only when a change of numbers is intended and explained in its commit) with
``python tests/test_golden.py``.
"""
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from bayesprune.runner import run

pytestmark = pytest.mark.usefixtures("single_thread")

FOLDER = Path(__file__).parent / "golden"
METHODS = ["pbp", "pft", "probmask", "saliency", "sbnn", "unit-gates"]
#: Wall-clock numbers, which no two runs share.
TIMINGS = {"train_seconds", "epoch_seconds"}


def short_run(config, out: Path) -> dict:
    metrics = run(config, out)
    return {key: value for key, value in metrics.items() if key not in TIMINGS}


def same(value, recorded) -> bool:
    """Equal, floats to float32 precision (sums whose last bits move with torch's reduction order)."""
    if isinstance(recorded, float) and isinstance(value, (int, float)):
        return math.isclose(value, recorded, rel_tol=1e-5, abs_tol=1e-6)
    if isinstance(recorded, dict):
        return isinstance(value, dict) and recorded.keys() <= value.keys() and all(same(value[k], recorded[k]) for k in recorded)
    if isinstance(recorded, list):
        return isinstance(value, list) and len(value) == len(recorded) and all(map(same, value, recorded))
    return value == recorded


@pytest.mark.parametrize("method", METHODS)
def test_short_digits_run_reproduces_the_recording(method, tmp_path, short_config):
    recorded = json.loads((FOLDER / f"{method}-digits-2-epochs.json").read_text())
    metrics = short_run(short_config(method), tmp_path / "run")
    differing = [key for key in recorded if not same(metrics.get(key), recorded[key])]
    assert not differing, {key: (metrics.get(key), recorded[key]) for key in differing}


if __name__ == "__main__":
    import tempfile

    from conftest import short_config_of

    torch.set_num_threads(1)
    for name in sys.argv[1:] or METHODS:
        with tempfile.TemporaryDirectory() as folder:
            metrics = short_run(short_config_of(name), Path(folder) / "run")
        (FOLDER / f"{name}-digits-2-epochs.json").write_text(json.dumps(metrics, indent=1) + "\n")
        print("recorded", name)
