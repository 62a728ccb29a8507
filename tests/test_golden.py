"""Refactor safety: every method's digits config at 2 epochs (every stage shortened), and the default
config at its recording's settings, give the numbers recorded before the platform refactor, on one
CPU thread: ``<name>.json`` holds the run's ``metrics.json``, key for key, ``<name>-scores.json`` a
summary of its ``scores.npz`` (per site: shape, mean, standard deviation, quantiles and a few fixed
entries).

Numbers are compared to a tolerance, never bit for bit or as a hash of floats: another CPU, or
another torch build, orders float32 reductions differently, so the last bits of a run move while every
number stays the same to float32 precision.

The methods are read from the registry: a new method records its golden with the one command
``python tests/test_golden.py NAME`` (until then its case is skipped, naming that command). Record again
(only when a change of numbers is intended and explained in its commit) with
``python tests/test_golden.py [name ...]``.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesprune.core.files import read_npz
from bayesprune.methods import available_methods
from bayesprune.pipeline.config import load_config
from bayesprune.pipeline.report import SCORES_DIGEST
from bayesprune.pipeline.runner import run

FOLDER = Path(__file__).parent / "golden"
METHODS = sorted(available_methods())
#: The default config as it was when its golden was recorded: log tau1 0, log tau0 -5, sigma 0.01 and
#: Adam 0.01 constant.
DEFAULT_AS_RECORDED = [
    "train.epochs=2",
    "device='cpu'",
    "sbnn.log_tau1=0.0",
    "sbnn.log_tau0=-5.0",
    "sbnn.init_scale=0.01",
    "optim.lr=0.01",
    "optim.schedule='constant'",
]
#: Keys of metrics.json that are no number of the run: wall-clock times, which no two runs share, and
#: the digest of scores.npz, an integrity check of the run directory (the report refuses the scores of
#: another run) whose bits change with the last bit of any score; the scores are compared by
#: :func:`scores_summary`.
NOT_COMPARED = {"train_seconds", "epoch_seconds", SCORES_DIGEST}

#: Relative tolerance of every float. A float32 sum's rounding depends on the order of its terms (SIMD
#: width, torch's reduction kernels), ~1e-7 relative per sum; two epochs of training compound it. The
#: recordings, made on another CPU, differ from this one's runs by up to 1.2e-6 relative
#: (pft_expected_sparsity), 2e-7 (saliency's delta_loss), 7e-8 (unit-gates' theta). 1e-5 leaves room
#: for that and is far below any real change: one of the 360 test digits moves an error by 0.28 points,
#: 1e-2 relative at 28%.
RTOL = 1e-5
#: Absolute tolerance of a metric near zero (a sparsity of 0, an ELBO term that cancels), where a
#: relative tolerance is empty.
ATOL = 1e-6
QUANTILES = {"min": 0.0, "q10": 0.1, "median": 0.5, "q90": 0.9, "max": 1.0}
#: Entries of each site recorded as they are, at flat indices drawn once when recording.
ENTRIES = 8


def recording(name: str) -> tuple[Path, Path]:
    """The golden metrics file and scores file of ``name`` (a method, or ``"default"``)."""
    if name == "default":
        return FOLDER / "default-2-epochs-metrics.json", FOLDER / "default-2-epochs-scores.json"
    return FOLDER / f"{name}-digits-2-epochs.json", FOLDER / f"{name}-digits-2-epochs-scores.json"


def golden_run(name: str, short_config_of, out: Path) -> tuple[dict, dict]:
    """The metrics (less :data:`NOT_COMPARED`) and scores of the recorded run ``name``, written to ``out``."""
    config = load_config("default", DEFAULT_AS_RECORDED) if name == "default" else short_config_of(name)
    metrics = run(config, out)
    return {key: value for key, value in metrics.items() if key not in NOT_COMPARED}, read_npz(out / "scores.npz")


def scores_summary(scores: dict, entries: dict | None = None) -> dict:
    """Per site of ``scores``: its shape, mean, standard deviation, :data:`QUANTILES` and its values at
    flat indices (``entries``: site → indices; :data:`ENTRIES` drawn at random where not given).

    Each is a continuous function of the scores: a score that moves by ε moves each by at most ε
    (quantiles included, ties or not), so they compare to the same tolerance as the scores would.
    """
    generator = np.random.default_rng(0)
    summary = {}
    for site, values in sorted(scores.items()):
        flat = np.asarray(values, dtype=np.float64).ravel()
        indices = (
            entries[site]
            if entries and site in entries
            else sorted(generator.choice(flat.size, min(ENTRIES, flat.size), replace=False).tolist())
        )
        summary[site] = {
            "shape": list(values.shape),
            "mean": float(flat.mean()),
            "std": float(flat.std()),
            **{name: float(np.quantile(flat, q)) for name, q in QUANTILES.items()},
            "entries": {str(index): float(flat[index]) for index in indices if index < flat.size},
        }
    return summary


def same(value, recorded, atol: float = ATOL) -> bool:
    """``value`` equals ``recorded``, floats to :data:`RTOL` (or ``atol``), dicts on the recorded keys."""
    if isinstance(recorded, float) and isinstance(value, (int, float)):
        return math.isclose(value, recorded, rel_tol=RTOL, abs_tol=atol)
    if isinstance(recorded, dict):
        return (
            isinstance(value, dict)
            and recorded.keys() <= value.keys()
            and all(same(value[k], recorded[k], atol) for k in recorded)
        )
    if isinstance(recorded, list):
        return (
            isinstance(value, list)
            and len(value) == len(recorded)
            and all(same(v, r, atol) for v, r in zip(value, recorded))
        )
    return value == recorded


def differing_metrics(metrics: dict, recorded: dict) -> dict:
    """Recorded key → (value, recorded value) of every recorded metric that ``metrics`` does not reproduce."""
    return {key: (metrics.get(key), recorded[key]) for key in recorded if not same(metrics.get(key), recorded[key])}


def differing_scores(scores: dict, recorded: dict) -> dict:
    """Site → (summary, recorded summary) of every site whose scores do not reproduce the recorded summary.

    A site's scores are compared at its own scale: a score near zero inside a site of large ones (a logit
    B − A of two large terms) carries the rounding of the large ones, so the absolute tolerance is
    :data:`RTOL` times the site's largest recorded magnitude."""
    if scores.keys() != recorded.keys():
        return {"sites": (sorted(scores), sorted(recorded))}
    summary = scores_summary(scores, {site: list(map(int, record["entries"])) for site, record in recorded.items()})
    return {
        site: (summary[site], record)
        for site, record in recorded.items()
        if not same(summary[site], record, atol=max(ATOL, RTOL * max(abs(record["min"]), abs(record["max"]))))
    }


@pytest.mark.parametrize("name", [*METHODS, "default"])
def test_short_run_reproduces_the_recording(name, tmp_path, short_config):
    metrics_file, scores_file = recording(name)
    if not metrics_file.is_file():
        pytest.skip(f"no recording of {name}: record it with python tests/test_golden.py {name}")
    metrics, scores = golden_run(name, short_config, tmp_path / "run")
    differing = differing_metrics(metrics, json.loads(metrics_file.read_text()))
    assert not differing, differing
    differing = differing_scores(scores, json.loads(scores_file.read_text()))
    assert not differing, differing


def test_the_comparison_passes_within_the_tolerance_and_fails_beyond_it():
    """Oracle: a recording compared with itself moved by a known factor, below and above :data:`RTOL`."""
    recorded = json.loads(recording("sbnn")[0].read_text())
    error = recorded["pruning_curve"][1]["test_error"]
    for factor, reproduced in [(1 + RTOL / 2, True), (1 + 2 * RTOL, False)]:
        moved = json.loads(json.dumps(recorded))
        moved["pruning_curve"][1]["test_error"] = error * factor
        assert (not differing_metrics(moved, recorded)) is reproduced
    assert differing_metrics({**recorded, "n_weights": recorded["n_weights"] + 1}, recorded).keys() == {"n_weights"}
    assert differing_metrics({key: value for key, value in recorded.items() if key != "chains"}, recorded).keys() == {
        "chains"
    }


def test_the_scores_comparison_passes_within_the_tolerance_and_fails_beyond_it():
    """Oracle: scores summarised, then moved all together within :data:`RTOL`, or one entry beyond it."""
    generator = np.random.default_rng(1)
    scores = {"1.weight": generator.normal(size=(30, 20)) * 100, "1.bias": generator.normal(size=30)}
    recorded = json.loads(json.dumps(scores_summary(scores)))
    assert not differing_scores({site: values * (1 + RTOL / 2) for site, values in scores.items()}, recorded)
    assert differing_scores({site: values * (1 + 2 * RTOL) for site, values in scores.items()}, recorded)
    recorded_index = int(next(iter(recorded["1.weight"]["entries"])))
    unrecorded_index = next(i for i in range(600) if str(i) not in recorded["1.weight"]["entries"])
    for index in recorded_index, unrecorded_index:  # an unrecorded entry moves the mean and the standard deviation
        moved = {site: values.copy() for site, values in scores.items()}
        moved["1.weight"].flat[index] += 10.0  # a few hundredths of the site's largest magnitude
        assert differing_scores(moved, recorded).keys() == {"1.weight"}
    assert differing_scores({"1.weight": scores["1.weight"]}, recorded)


if __name__ == "__main__":
    import tempfile

    from conftest import short_config_of

    torch.set_num_threads(1)
    for name in sys.argv[1:] or [*METHODS, "default"]:
        with tempfile.TemporaryDirectory() as folder:
            metrics, scores = golden_run(name, short_config_of, Path(folder) / "run")
        metrics_file, scores_file = recording(name)
        metrics_file.write_text(json.dumps(metrics, indent=1) + "\n")
        scores_file.write_text(json.dumps(scores_summary(scores), indent=1) + "\n")
        print("recorded", name)
