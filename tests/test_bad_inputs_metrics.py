"""``bayesprune report`` of a ``metrics.json`` whose method keys were tampered with: one line naming the file
and the key, exit status 2, nothing written (before, a report was written from an empty table of layers,
a ΔL list cut short by zip, or the string ``'abc'`` shown as a learned architecture).

Each case is a run of the method as the report sees it: the complete small run's folder with the
method's name in ``config.toml`` and ``metrics.json`` and the keys its fit adds, as a fit writes them
(the untampered folder is reported, which shows the refusals are the tampered keys').
"""

import hashlib
import json
import shutil

import pytest

from bayesprune.cli import main

VALID = {
    "probmask": {
        "test_error_before_finetune": 28.9,
        "sparsity": 0.9,
        "scope": "global",
        "remaining_ratio_per_layer": {"1.weight": 0.1, "3.weight": 0.2},
        "share_s_near_binary": 1.0,
        "s_histogram": [7000.0] + [0.0] * 18 + [510.0],
        "magnitude_test_error": 38.9,
    },
    "saliency": {
        "grid": [["magnitude", 1, 0.0], ["magnitude", 3, 0.0], ["obd", 1, 0.0], ["obd", 3, 0.0]],
        "delta_loss": [0.78, 0.7, 0.63, 0.6],
        "error_before_pruning": 21.1,
        "error_after_pruning": [39.7, 39.0, 31.1, 30.0],
        "error_after_finetune": [21.4, None, 15.0, None],
        "gap_before_finetune": [18.6, 17.9, 10.0, 8.9],
        "gap_after_finetune": [0.3, None, -6.1, None],
        "best": {
            criterion: {
                "penalty": 0.0,
                "stages": 3,
                "delta_loss": 0.6,
                "gap_before_finetune": 8.9,
                "gap_after_finetune": None,
                "rho": None,
            }
            for criterion in ("magnitude", "obd")
        },
        "spearman_rho": 0.5,
        "finetuned_points": 2,
    },
    "unit-gates": {
        "pruning_ratio": 0.5,
        "pruning_ratio_with_input_threshold": 0.5,
        "starting_architecture": [100, 100],
        "learned_architecture": [60, 40],
        "kept_units": [list(range(60)), list(range(40))],
        "units_alive": [200, 100],
        "epoch_seconds": [0.1, 0.1],
        "epoch_test_error": [70.0, 50.0],
        "theta_trajectories": [[[0.5] * 100, [0.5] * 100], [[0.9] * 100, [0.1] * 100]],
    },
    "hard-concrete": {
        "dense_macs": 17810.0,
        "learned_macs": 8878.0,
        "starting_architecture": [100, 100],
        "learned_architecture": [57, 74],
        "expected_macs_ratio": [0.93],
        "multipliers": [0.77, 1.09],
    },
}

#: (method, key, tampered value); ``"<short>"``: the list without its last two values.
TAMPERED = [
    ("probmask", "remaining_ratio_per_layer", {}),
    ("probmask", "sparsity", "0.9"),
    ("probmask", "s_histogram", "x"),
    ("saliency", "delta_loss", "<short>"),
    ("saliency", "grid", "abc"),
    ("saliency", "best", {}),
    ("unit-gates", "learned_architecture", "abc"),
    ("unit-gates", "learned_architecture", [500, 40]),
    ("unit-gates", "units_alive", "x"),
    ("hard-concrete", "learned_architecture", "abc"),
]


def method_run(complete_run, folder, method: str, **edits):
    """The complete run copied to ``folder`` as a run of ``method`` with its keys ``VALID[method]`` (and
    ``edits``); its posterior, stamped by the complete run's method, left out."""
    shutil.copytree(complete_run, folder)
    (folder / "posterior.nc").unlink(missing_ok=True)
    (folder / "report.md").unlink()
    config = folder / "config.toml"
    config.write_text(config.read_text().replace('method = "sbnn"', f'method = "{method}"', 1))
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics.update(VALID[method], method=method)
    for key, value in edits.items():
        metrics[key] = metrics[key][:-2] if value == "<short>" else value
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def _tree(root):
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file()
    }


@pytest.mark.parametrize("method", list(VALID))
def test_a_run_with_the_keys_as_written_is_reported(method, tmp_path, complete_run, capsys):
    run = method_run(complete_run, tmp_path / "run", method)
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    assert (run / "report.md").is_file()


@pytest.mark.parametrize("method, key, value", TAMPERED, ids=[f"{m}-{k}-{v!r}"[:60] for m, k, v in TAMPERED])
def test_a_tampered_method_key_is_one_line_naming_it(method, key, value, tmp_path, complete_run, capsys):
    run = method_run(complete_run, tmp_path / "run", method, **{key: value})
    before = _tree(tmp_path)
    status = main(["report", str(run)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "metrics.json" in err and repr(key) in err, err
    assert _tree(tmp_path) == before
