"""A comparison at equal MACs (``prune.macs``): every row, a Bayesian method's cut by its unit scores and
Torch-Pruning's pruned to the target in its fit, stands at or below the target's share of the dense
network's MACs, counted independently on the dense network, and within one hidden unit's cost of it."""

import json

from torch import nn

from bayesprune.core.export import count_macs
from bayesprune.pipeline.compare import compare
from helpers import TINY, cells_here


def test_every_row_stands_at_the_mac_target(tmp_path):
    settings = [
        *TINY,
        "prune.level='unit'",
        "prune.macs=[0.5]",
        "compare.sparsities=[0.5]",
        "compare.methods=['sparse-vd', 'torch-pruning']",
        "compare.variants={torch-pruning={scope=['global', 'layer']}}",
        "model.hidden=[40]",
        "data.batch_size=512",
    ]
    with cells_here():
        compare(None, tmp_path / "out", overrides=settings)
    fit = json.loads((tmp_path / "out" / "cells" / "torch-pruning-global-m0.5-seed0" / "metrics.json").read_text())
    assert fit["macs_curve"][0]["units_removed"] == 0  # pruned to the target in its fit, nothing cut after
    rows = {row["method"]: row for row in json.loads((tmp_path / "out" / "leaderboard-macs.json").read_text())}
    assert set(rows) == {"sparse-vd", "torch-pruning-global", "torch-pruning-layer"}  # a row per variant
    assert all(row["seeds"] == 1 for row in rows.values())

    def mlp(hidden):
        return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    dense = count_macs(mlp(40), (64,))
    unit = dense - count_macs(mlp(39), (64,))  # one hidden unit's MACs
    for method, row in rows.items():
        assert row["macs_target"] == 0.5
        assert 0.5 * dense - unit < row["macs"] <= 0.5 * dense, method
        kept = round((row["macs"] - 10) / unit)  # the hidden units of a 64-kept-10 network
        assert row["macs"] == count_macs(mlp(kept), (64,))
        weights = 65 * kept + (kept + 1) * 10  # non-zero parameters: Sparse VD's own mask may zero some
        assert (
            row["params"] == weights if method.startswith("torch-pruning") else 0.9 * weights < row["params"] <= weights
        )
        assert 0 <= row["test_error"] <= 100 and row["latency_ms"] > 0
