"""bayesprune.pipeline.compare: a comparison's cells and leaderboard read back against the cells' own files, a
finished cell never refitted, bad grids refused, a budget split. The cells run in this process
(``cells_in_this_process``); resuming with cells added is in test_compare_resume.py, the engines' workers
(pool, jobs, Ray, signals) in test_compare_workers.py and test_compare_signals.py."""

import csv
import json
import tomllib

import pytest

from bayesprune.cli import main
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.methods import available_methods
from bayesprune.pipeline.compare import compare, comparison_cells, load_comparison
from bayesprune.pipeline.compare.leaderboard import pareto_front
from bayesprune.pipeline.compare.sweep import parse_grid
from bayesprune.pipeline.config import load_config
from helpers import TINY

pytestmark = pytest.mark.usefixtures("cells_in_this_process")

REQUIRED = (
    "method",
    "sparsity",
    "achieved_sparsity",
    "test_error",
    "test_error_std",
    "plain_test_error",
    "train_seconds",
    "params",
    "macs",
    "latency_ms",
    "bound",
)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory, cells_in_this_process):
    out = tmp_path_factory.mktemp("compare") / "cmp"
    rows = compare(
        None,
        out,
        methods=["sbnn", "pbp"],
        sparsities=[0.5, 0.9],
        seeds=[0],
        overrides=[*TINY, "compare.certify=true"],
        report=lambda *a: None,
    )
    return out, rows


def _metrics(out, name):
    return json.loads((out / "cells" / name / "metrics.json").read_text())


def test_the_cells_of_a_comparison():
    raw, options = load_comparison(None, TINY)
    cells = {cell.name: cell for cell in comparison_cells(raw, options)}
    assert {
        "magnitude-seed0",
        "sbnn-seed0",
        "sparse-vd-seed0",
        "unit-gates-seed0",
        "pft-s0.5-seed0",
        "pbp-s0.95-seed0",
        "probmask-s0.8-seed0",
        "saliency-s0.9-seed0",
    } <= set(cells)
    # every method but Torch-Pruning (its sparsities are of units), one cell per sparsity and seed where it has a sparsity option
    methods = [
        method
        for method in available_methods().values()
        if "weight" in method.prune_levels or method.sparsity_option is None
    ]
    per_sparsity = sum(method.sparsity_option is not None for method in methods)
    assert len(options.seeds) == 1 and len(cells) == len(methods) - per_sparsity + per_sparsity * len(
        options.sparsities
    )
    assert "torch-pruning" not in {cell.method for cell in cells.values()}
    pft, pbp = cells["pft-s0.9-seed0"].run_config(), cells["pbp-s0.8-seed0"].run_config()
    assert pft.method_options.sparsities == (0.9,) and pft.prune.sparsities == (0.0, 0.9)
    assert pbp.method_options.sparsity == 0.8 and pbp.optim.name == "sgd"  # [optim] of pbp-digits
    sbnn = cells["sbnn-seed0"].run_config()
    assert (
        sbnn.prune.sparsities == (0.0, 0.5, 0.8, 0.9, 0.95) and sbnn.optim.name == "adam" and not sbnn.baseline.enabled
    )
    assert {config.train.epochs for config in (pft, pbp, sbnn)} == {1}  # the same budget
    assert cells["unit-gates-seed0"].run_config().prune.level == "unit"


def test_the_leaderboard_reads_back_the_cells(comparison):
    out, rows = comparison
    with open(out / "leaderboard.csv") as handle:
        table = list(csv.DictReader(handle))
    assert set(REQUIRED) <= set(table[0])
    assert (out / "leaderboard.md").read_text().count("\n| ") == 7  # the certificate cells add no row
    assert (out / "leaderboard.png").stat().st_size > 20_000  # drawn (60 kB); the same axes left empty: 13 kB
    by = {(row["method"], row["sparsity"]): row for row in rows}
    assert set(by) == {(method, s) for method in ("magnitude", "sbnn", "pbp") for s in (0.5, 0.9)}
    magnitude, sbnn = _metrics(out, "magnitude-seed0"), _metrics(out, "sbnn-seed0")
    for s in (0.5, 0.9):
        pbp = _metrics(out, f"pbp-s{s:g}-seed0")
        curve = {row["droprate"]: row["test_error"] for row in sbnn["pruning_curve"]}
        assert by[("sbnn", s)]["test_error"] == curve[s] and by[("sbnn", s)]["train_seconds"] == sbnn["train_seconds"]
        assert (
            by[("pbp", s)]["test_error"] == pbp["pruning_curve"][1]["test_error"]
            and by[("pbp", s)]["bound"] == pbp["bound"]
        )
        finetuned = {row["droprate"]: row["test_error_finetuned"] for row in magnitude["pruning_curve"]}
        assert by[("magnitude", s)]["test_error"] == finetuned[s]  # fine-tuned compare.finetune_epochs
        for method in ("magnitude", "sbnn", "pbp"):
            row = by[(method, s)]
            assert row["plain_test_error"] == magnitude["baseline_test_error"] and row["seeds"] == 1
            assert row["test_error_std"] is None  # one seed
            # at least the budget is removed (dead units go too), and params count what is left
            assert row["achieved_sparsity"] >= s - 1e-9 and row["params"] <= round(7400 * (1 - s)) + 110
            assert row["macs"] > 0 and row["latency_ms"] > 0
    # compare.certify: the sbnn rows carry the bound of PBP started from sbnn's mask on S_P; the magnitude
    # rows PBP's own (pbp-digits starts from magnitude pruning), which is not fitted twice
    for s in (0.5, 0.9):
        folder = out / "cells" / f"certificate-sbnn-s{s:g}-seed0"
        config = tomllib.loads((folder / "config.toml").read_text())
        assert config["pbp"]["start_mask"] == "sbnn" and config["pbp"]["sparsity"] == s
        assert (
            config["pbp"]["prior_epochs"] == 1 and config["pbp"]["start_optim"]["name"] == "adam"
        )  # sbnn's budget and optimiser
        assert by[("sbnn", s)]["bound"] == json.loads((folder / "metrics.json").read_text())["bound"] > 0
        assert by[("magnitude", s)]["bound"] == _metrics(out, f"pbp-s{s:g}-seed0")["bound"]
    assert not list((out / "cells").glob("certificate-magnitude-*"))
    assert float(table[0]["test_error"]) == rows[0]["test_error"]


def test_resume_reads_back_finished_cells_and_a_new_start_never_overwrites(comparison):
    out, rows = comparison
    files = sorted((out / "cells").rglob("*"))
    before = {path: path.stat().st_mtime_ns for path in files}
    again = compare(out=out, resume=True, report=lambda *a: None)
    assert sorted((out / "cells").rglob("*")) == files and {path: path.stat().st_mtime_ns for path in files} == before
    assert [row["test_error"] for row in again] == [row["test_error"] for row in rows]
    with pytest.raises(BayesPruneError, match="holds a comparison; continue it with --resume"):
        compare(None, out, methods=["sbnn", "pbp"], sparsities=[0.5, 0.9], seeds=[0], overrides=TINY)
    with pytest.raises(BayesPruneError, match="--set cannot be given"):  # a resumed grid runs as it was started
        compare(out=out, resume=True, overrides=["train.epochs=2"])
    with pytest.raises(BayesPruneError, match="holds no comparison.toml"):
        compare(out=out / "cells", resume=True)
    assert {path: path.stat().st_mtime_ns for path in files} == before


def test_grids_parse_with_lists_and_strings():
    assert parse_grid(["pbp.alpha=0.5,0.7", "model.hidden=[10],[20, 30]", "pbp.start_mask=magnitude,snip"]) == {
        "pbp.alpha": [0.5, 0.7],
        "model.hidden": [[10], [20, 30]],
        "pbp.start_mask": ["magnitude", "snip"],
    }


def test_the_pareto_front():
    assert pareto_front([(50, 3.0), (80, 2.5), (90, 4.0), (70, 3.5)]) == [(80, 2.5), (90, 4.0)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--methods", "nope"], "--methods must be a non-empty list of methods of"),
        (["compare", "--sparsities", "1.5"], "--sparsities"),
        (
            ["compare", "--sparsities", "0.5", "0.5"],
            r"--sparsities must be a non-empty list of numbers in \(0, 1\) without repeats",
        ),
        (["compare", "--jobs", "0"], "--jobs must be a positive integer"),
        (["compare", "no-such-comparison"], "unknown comparison config"),
        (["sweep", "pbp-digits", "--grid", "pbp.nope=1,2"], "unknown config key 'pbp.nope'"),
        (["sweep", "pbp-digits", "--grid", "pbp.alpha="], "non-empty list"),
        (["sweep", "pbp-digits", "--grid", "pbp.alpha=0.5,high"], "pbp.alpha"),
        (["sweep", "pbp-digits", "--grid", "nothing.here=1"], "nothing"),
        (["sweep", "pbp-digits", "--grid", "seed=1,2"], "--seeds"),
        (["sweep", "pbp-digits"], "at least one --grid"),
        (
            ["sweep", "pbp-digits", "--grid", "pbp.alpha=0.5", "--engine", "ray", "--address", "127.0.0.1:1"],
            "--address|Ray",
        ),
    ],
)
def test_bad_grids_are_refused_in_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    import re

    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and re.search(message, error), error
    assert not out.exists()


def test_resume_with_a_sparsity_added_evaluates_finished_cells_without_fitting_them(tmp_path, comparison):
    """--resume with --sparsities 0.5 0.9 after a comparison at 0.5: the magnitude cell prunes its saved plain
    network at 0.9, the sBNN cell evaluates its saved fit there; nothing is trained again (the fit's files
    untouched), and the new rows equal those of the module's comparison, asked for both sparsities from the
    start (its sbnn and magnitude cells are these cells' configs but for the sparsities)."""
    whole = comparison[1]
    grid = dict(methods=["sbnn"], seeds=[0], report=None, status=lambda line: None)
    compare(None, tmp_path / "cmp", sparsities=[0.5], overrides=TINY, **grid)
    cells = tmp_path / "cmp" / "cells"
    fits = [
        cells / "sbnn-seed0" / "checkpoint.pt",
        cells / "sbnn-seed0" / "history.csv",
        cells / "magnitude-seed0" / "checkpoint.pt",
        cells / "magnitude-seed0" / "history.csv",
    ]
    before = {path: path.stat().st_mtime_ns for path in fits}
    rows = compare(out=tmp_path / "cmp", resume=True, sparsities=[0.5, 0.9], **grid)
    assert {path: path.stat().st_mtime_ns for path in fits} == before
    by = {(row["method"], row["sparsity"]): row for row in rows}
    assert set(by) == {(method, s) for method in ("magnitude", "sbnn") for s in (0.5, 0.9)}
    for row in whole:
        if row["method"] != "pbp":
            assert by[(row["method"], row["sparsity"])]["test_error"] == row["test_error"], row
    for method in ("magnitude", "sbnn"):
        held = tomllib.loads((cells / f"{method}-seed0" / "config.toml").read_text())
        assert held["prune"]["sparsities"] == [0.0, 0.5, 0.9]


def test_under_a_budget_each_fit_trains_the_budget_and_probmasks_schedule_ends_inside_it(tmp_path):
    """compare.budget_epochs = 6 on digits: saliency (a grid of criteria and stage counts, each fine-tuned) and
    ProbMask (its own magnitude baseline) train 6 epochs in all, as counted by the fit; ProbMask's t1, t2
    (6 and 24 of its 40 epochs) scale with its main stage, cut to 4 epochs (and 2 of fine-tuning):
    floor(0.6) = 0 and round(2.4) = 2, so its budget is reached inside the stage, not after it."""
    rows = compare(
        None,
        tmp_path / "cmp",
        methods=["saliency", "probmask"],
        overrides=["compare.budget_epochs=6", "compare.latency_repeats=2"],
        sparsities=[0.5],
        seeds=[0],
        report=None,
        status=lambda line: None,
    )
    assert {row["method"]: row["train_epochs"] for row in rows} == {"magnitude": 6, "saliency": 6, "probmask": 6}
    held = tomllib.loads((tmp_path / "cmp" / "cells" / "probmask-s0.5-seed0" / "config.toml").read_text())
    assert held["train"]["epochs"] == 4 and held["probmask"]["finetune_epochs"] == 2
    assert (held["probmask"]["t1"], held["probmask"]["t2"], held["probmask"]["baseline"]) == (0, 2, False)


def test_compare_budget_is_read_as_budget_epochs_with_a_note_and_both_are_refused():
    """The epoch budget was ``compare.budget`` (a name it shared with a mask's sparsity, core.pruning.Budget)."""
    from bayesprune.core.validation import RenamedKey

    with pytest.warns(RenamedKey, match=r"^compare\.budget is renamed compare\.budget_epochs"):
        _, options = load_comparison(None, ["compare.budget=6"])
    assert options.budget_epochs == 6
    with pytest.raises(ConfigError, match=r"^compare\.budget is the old name of compare\.budget_epochs"):
        load_comparison(None, ["compare.budget=6", "compare.budget_epochs=6"])


@pytest.mark.parametrize("budget", [6, 13])
def test_a_budget_splits_every_methods_epochs_in_its_own_proportions(budget):
    raw, options = load_comparison(None, [f"compare.budget_epochs={budget}"])
    for cell in comparison_cells(raw, options):
        config = cell.run_config()
        own = {key: value for key, value in vars(config.method_options).items() if key.endswith("_epochs") and value}
        stages = {"train": config.train.epochs, **own}
        packaged_config = load_config(f"{cell.method}-digits")
        packaged = {"train": 40, **{key: getattr(packaged_config.method_options, key) for key in own}}
        if config.prune.finetune_epochs:  # the baseline's fine-tuning: compare-digits' finetune_epochs
            stages["finetune"], packaged["finetune"] = config.prune.finetune_epochs, 10
        assert cell.method != "magnitude" or set(stages) == {"train", "finetune"}
        assert sum(stages.values()) == budget, (cell.name, stages)
        total = sum(packaged.values())
        for key, epochs in stages.items():  # one each, the rest by largest remainder: within one of the share
            assert abs(epochs - (1 + (budget - len(stages)) * packaged[key] / total)) < 1, (cell.name, key, stages)
        if cell.method == "pft":
            assert (
                config.method_options.start_masks == ("magnitude",) and not config.method_options.equal_budget_baseline
            )
