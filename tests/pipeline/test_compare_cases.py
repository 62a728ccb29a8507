"""``[[compare.cases]]``: several networks or levels, each with its own seeds, in one comparison. The oracle
is the comparison without cases: each case's cells, start networks and leaderboard rows are those of a
separate ``compare`` of its config; a case added later is new cells, ``--seeds`` narrows every case, and
bad cases are refused before anything is written."""

import csv
import json
import tomllib

import pytest
import tomli_w
import torch

from bayesprune.cli import main
from bayesprune.pipeline.compare import compare, comparison_cells, load_comparison
from bayesprune.pipeline.compare.cases import start_key
from helpers import TINY

pytestmark = pytest.mark.usefixtures("cells_in_this_process")

#: One sparsity, each seed's network pre-trained one epoch (a start file each).
QUICK = [*TINY, "compare.sparsities=[0.5]", "model.pretrain_epochs=1"]
#: The baseline alone (its plain network's error is every row's plain_test_error).
ALONE = [*QUICK, "compare.methods=['magnitude']"]
#: A case of another network (20 hidden units), from the same seed.
NARROW = {"name": "narrow", "seeds": [0], "set": {"model.hidden": [20]}}
#: What differs between two fits of one config (timing) or names the folder the row was read from.
UNTIMED = ("train_seconds", "latency_ms", "cells")


def _cases(*cases) -> str:
    """The ``--set`` of ``compare.cases`` (TOML inline tables)."""
    return f"compare.cases={_inline(list(cases))}"


def _inline(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)} = {_inline(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    return json.dumps(value)


def _metrics(folder) -> dict:
    metrics = json.loads((folder / "metrics.json").read_text())
    return {key: value for key, value in metrics.items() if "seconds" not in key}


def _rows(rows) -> list:
    return [{key: value for key, value in row.items() if key not in (*UNTIMED, "case")} for row in rows]


def test_each_case_is_the_comparison_of_its_config_and_a_case_added_later_is_new_cells(tmp_path):
    """A comparison with one case (no keys: its cells named as without cases), then the case NARROW added to its
    comparison.toml and --resume: the first case's files untouched, NARROW's cells fitted from a start network of
    their own (the same seed, another network). Every cell, start network and leaderboard row equals those of two
    comparisons without cases, one of each case's config; --seeds 0 7 narrows the call (7 is no case's) and
    leaves the comparison's seeds as they were. The first of those comparisons, given both cases in its
    comparison.toml, keeps its finished cell."""
    out, lines = tmp_path / "cases", []
    compare(None, out, overrides=[*ALONE, "compare.seeds=[0]", _cases({"name": "wide"})], status=lines.append)
    first = {path: path.stat().st_mtime_ns for path in (out / "cells").rglob("*")}
    marker = tomllib.loads((out / "comparison.toml").read_text())
    marker["compare"]["cases"].append(NARROW)
    (out / "comparison.toml").write_text(tomli_w.dumps(marker))
    lines.clear()
    rows = compare(out=out, resume=True, seeds=[0, 7], status=lines.append)
    assert lines[0].startswith(
        "bayesprune: training the start network of seed 0 (narrow), 1 epoch,"
    )  # wide's read back
    assert lines[2] == "bayesprune: 2 cells, 1 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in first} == first
    assert tomllib.loads((out / "comparison.toml").read_text())["compare"]["seeds"] == [0]

    wide, narrow = tmp_path / "wide", tmp_path / "narrow"
    alone = {
        "wide": compare(None, wide, overrides=[*ALONE, "compare.seeds=[0]"]),
        "narrow": compare(None, narrow, overrides=[*ALONE, "compare.seeds=[0]", "model.hidden=[20]"]),
    }
    key = start_key(load_comparison(str(out / "comparison.toml"))[1].cases[1])
    assert sorted(path.name for path in (out / "starts").iterdir()) == sorted(["seed-0.pt", f"seed-0-{key}.pt"])
    for mine, theirs in (
        (out / "starts" / "seed-0.pt", wide / "starts" / "seed-0.pt"),
        (out / "starts" / f"seed-0-{key}.pt", narrow / "starts" / "seed-0.pt"),
    ):
        held, given = (torch.load(path, weights_only=True) for path in (mine, theirs))
        assert held.keys() == given.keys() and all(torch.equal(held[name], given[name]) for name in held)
    for prefix, separate in (("", wide), ("narrow-", narrow)):
        names = sorted(folder.name for folder in (separate / "cells").iterdir())
        assert names == ["magnitude-seed0"]
        for name in names:
            assert _metrics(out / "cells" / f"{prefix}{name}") == _metrics(separate / "cells" / name), name

    assert [row["case"] for row in rows] == ["wide", "narrow"]
    assert _rows(rows[:1]) == _rows(alone["wide"]) and _rows(rows[1:]) == _rows(alone["narrow"])
    assert rows[1]["plain_test_error"] != rows[0]["plain_test_error"]  # each case's own plain network
    assert "Per case, method and target sparsity" in (out / "leaderboard.md").read_text()
    with open(out / "leaderboard.csv") as handle:
        assert [(row["case"], row["method"]) for row in csv.DictReader(handle)] == [
            ("wide", "magnitude"),
            ("narrow", "magnitude"),
        ]

    # the comparison run without cases gains them: its finished cell is the first case's, read back
    before = {path: path.stat().st_mtime_ns for path in (wide / "cells").rglob("*")}
    marker = tomllib.loads((wide / "comparison.toml").read_text())
    marker["compare"]["cases"] = [{"name": "wide"}, NARROW]
    (wide / "comparison.toml").write_text(tomli_w.dumps(marker))
    lines.clear()
    compare(out=wide, resume=True, status=lines.append)
    assert lines[0].startswith(
        "bayesprune: training the start network of seed 0 (narrow), 1 epoch,"
    )  # wide's read back
    assert lines[2] == "bayesprune: 2 cells, 1 finished earlier (read back), 1 to fit"
    assert {path: path.stat().st_mtime_ns for path in before} == before


def test_the_leaderboard_at_equal_macs_has_a_row_per_case_at_its_level(tmp_path):
    """Two MAC levels as cases: leaderboard-macs holds each case's Torch-Pruning row at its own target, the
    30 % row's network smaller (in MACs) than the 50 % row's and each at or below its share of the dense MACs."""
    settings = [
        *TINY,
        "prune.level='unit'",
        "prune.macs=0.5",
        "compare.methods=['torch-pruning']",
        "compare.variants={magnitude={held_out=[]}}",
        "model.hidden=[40]",
        "data.batch_size=512",
        _cases({"name": "half"}, {"name": "third", "set": {"prune.macs": 0.3}}),
    ]
    compare(None, tmp_path / "out", overrides=settings)
    rows = json.loads((tmp_path / "out" / "leaderboard-macs.json").read_text())
    assert [(row["case"], row["method"], row["macs_target"]) for row in rows] == [
        ("half", "torch-pruning", 0.5),
        ("third", "torch-pruning", 0.3),
    ]
    assert rows[1]["cells"] == "cells/third-torch-pruning-m0.3-seed0"
    assert rows[1]["macs"] < rows[0]["macs"] and all(row["macs_fraction"] <= row["macs_target"] for row in rows)
    assert "Per case, method and `prune.macs` target" in (tmp_path / "out" / "leaderboard-macs.md").read_text()


def test_cells_are_named_by_case_seeds_narrow_and_a_level_shares_the_start():
    """Cell names, seeds and keys per case; ``seeds`` narrows every case; a case that changes [prune] only starts
    from the comparison's own network, one that changes the network from its own."""
    cases = _cases(
        {"name": "base"},
        {"name": "half", "seeds": [1], "set": {"prune": {"finetune_epochs": 2}}},
        {"name": "small", "set": {"model": {"hidden": [20]}, "sparse-vd": {"threshold": 2.0}}},
    )
    raw, options = load_comparison(None, [*QUICK, "compare.methods=['sparse-vd']", "compare.seeds=[0, 1]", cases])
    cells = {cell.name: cell for cell in comparison_cells(raw, options)}
    assert sorted(cells) == sorted(
        [
            *(f"{method}-seed{seed}" for method in ("magnitude", "sparse-vd") for seed in (0, 1)),
            "half-magnitude-seed1",
            "half-sparse-vd-seed1",
            *(f"small-{method}-seed{seed}" for method in ("magnitude", "sparse-vd") for seed in (0, 1)),
        ]
    )
    assert cells["half-sparse-vd-seed1"].run_config().prune.finetune_epochs == 2
    assert cells["sparse-vd-seed1"].run_config().prune.finetune_epochs == 0
    assert cells["small-sparse-vd-seed0"].run_config().to_dict()["model"]["hidden"] == [20]
    assert cells["small-sparse-vd-seed0"].run_config().method_options.threshold == 2.0
    assert {cell.case for cell in cells.values()} == {"base", "half", "small"}
    narrowed = [cell.name for cell in comparison_cells(raw, options, seeds={0})]
    assert sorted(narrowed) == sorted(
        ["magnitude-seed0", "sparse-vd-seed0", "small-magnitude-seed0", "small-sparse-vd-seed0"]
    )
    keys = [start_key(case) for case in options.cases]
    assert keys[0] == keys[1] == "" and len(keys[2]) == 10


BAD = [
    ([{"name": "a", "nope": 1}], "compare.cases[a].nope"),
    ([{"name": "a"}, {"name": "a", "set": {"prune.finetune_epochs": 2}}], "compare.cases[1].name must"),
    ([{"name": "a", "set": {"train.epochs": -1}}], "compare.cases[a]: train.epochs must"),
    ([{"name": "a", "set": {"prune.nope": 1}}], "compare.cases[a]: unknown config key 'prune.nope'"),
    ([{"name": "a", "seeds": [0.5]}], "compare.cases[a].seeds must"),
    ([{"name": "a", "seeds": ["0"]}], "compare.cases[a].seeds must"),
    ([{"name": "a", "set": {"compare.seeds": [1]}}], "compare.cases[a].set: 'compare.seeds' cannot be set"),
    ([{"name": "a"}, {"name": "b"}], "compare.cases[b].set must differ from case a's"),
    ([{"name": "a b"}], "compare.cases[0].name must"),
    ([{"seeds": [0]}], "compare.cases[0].name must"),
]


@pytest.mark.parametrize("cases, named", BAD, ids=[named for _, named in BAD])
def test_a_bad_case_is_refused_in_one_line_naming_its_key_before_anything_is_written(cases, named, tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["compare", "--out", str(out), "--set", _cases(*cases)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and named in err and "Traceback" not in err, err
    assert not out.exists()


def test_a_cases_relative_files_are_read_from_the_config_files_folder(tmp_path, monkeypatch):
    """A case's model.weights and data file, relative, are the files beside the config file (absolute in its cells),
    as the config's own are; a name found nowhere is read from the current folder."""
    folder, elsewhere = tmp_path / "configs", tmp_path / "elsewhere"
    folder.mkdir(), elsewhere.mkdir()
    (folder / "w.pt").write_bytes(b""), (folder / "table.csv").write_text("x,y\n")
    sets = '{"model.weights" = "w.pt", data = {path = "table.csv"}, "data.test" = "missing.csv"}'
    (folder / "cmp.toml").write_text(f'[[compare.cases]]\nname = "own"\nset = {sets}\n')
    monkeypatch.chdir(elsewhere)
    raw, options = load_comparison(str(folder / "cmp.toml"))
    (case,) = options.cases
    assert case.overrides == {
        "model": {"weights": str(folder / "w.pt")},
        "data": {"path": str(folder / "table.csv"), "test": str(elsewhere / "missing.csv")},
    }


def test_seeds_no_case_runs_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["compare", "--out", str(out), "--seeds", "9", "--set", _cases({"name": "a", "seeds": [0, 1]})])
    err = capsys.readouterr().err
    assert status == 2 and err == "bayesprune: error: --seeds 9: no case of this comparison runs these seeds\n"
    assert not out.exists()


def test_the_packaged_structured_leaderboard_is_one_command_of_four_cases():
    """compare-structured-fashion: resnet18 and mobilenet_v2 at half the MACs from seeds 0-2, the ViT at half and
    resnet18 at 30 % from seed 0; the resnet18 case's cells keep the names they had without cases, and the
    30 % case starts from resnet18's network."""
    raw, options = load_comparison("compare-structured-fashion")
    cells = comparison_cells(raw, options)
    seen = {}
    for cell in cells:
        config = cell.run_config().to_dict()
        seen.setdefault((cell.case, config["model"]["network"], tuple(config["prune"]["macs"])), set()).add(cell.seed)
    assert seen == {
        ("resnet18", "resnet18", (0.5,)): {0, 1, 2},
        ("mobilenet_v2", "mobilenet_v2", (0.5,)): {0, 1, 2},
        ("vit", "vision_transformer", (0.5,)): {0},
        ("resnet18-macs30", "resnet18", (0.3,)): {0},
    }
    names = {cell.name for cell in cells}
    assert {"hard-concrete-m0.5-seed2", "torch-pruning-taylor-global-m0.5-seed0"} <= names
    assert {"vit-hard-concrete-m0.5-seed0", "resnet18-macs30-hard-concrete-m0.3-seed0"} <= names
    keys = {case.name: start_key(case) for case in options.cases}
    assert keys["resnet18"] == keys["resnet18-macs30"] == "" != keys["vit"] != keys["mobilenet_v2"] != ""
