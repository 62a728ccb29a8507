"""The README's examples run as written: its Python blocks, its TOML file and the `bayesprune run` commands
(the quick-start configs validated, the own-data run made with 2 epochs); its command synopsis matches
the parsers; it stays under 15 KB."""

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from bayesprune.cli import main

PATH = Path(__file__).parents[1] / "README.md"
README = PATH.read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.DOTALL)
PYTHON = [text for lang, text in BLOCKS if lang == "python"]
(TOML,) = [text for lang, text in BLOCKS if lang == "toml"]
RUNS = [
    line for lang, text in BLOCKS if lang == "bash" for line in text.splitlines() if line.startswith("bayesprune run")
]


def python(holding: str) -> str:
    """The one Python block of the README that holds ``holding``."""
    (found,) = [text for text in PYTHON if holding in text]
    return found


def run_args(line: str) -> list:
    """The arguments of ``bayesprune run ...`` after ``run``."""
    args = shlex.split(line, comments=True)
    assert args[:2] == ["bayesprune", "run"]
    return args[1:]


def test_the_readme_is_under_15_kb():
    assert len(README.encode()) < 15_000


def test_every_python_block_is_run_below():
    assert len(PYTHON) == 4


def test_the_python_quick_start_prunes_90_percent_of_a_users_network(capsys):
    exec(compile(python("fit_method"), "README, Python quick start", "exec"), {})
    error = float(re.search(r"weights removed: ([\d.]+)%", capsys.readouterr().out).group(1))
    assert error < 15  # 10 epochs of Sparse VD on digits, 90 % of the weights removed (measured 6.4 %)


def test_the_quick_start_runs_the_digits_config_of_every_method():
    from bayesprune.methods import available_methods
    from bayesprune.pipeline.config import load_config

    (methods,) = re.findall(
        r"\nfor method in ([\w -]+); do\n +bayesprune run \$method-digits --out runs/\$method\ndone\n", README
    )
    assert methods.split() == sorted(available_methods())
    for method in methods.split():
        assert load_config(f"{method}-digits").method == method


def test_your_own_network_and_data_run_from_the_toml_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mynets", raising=False)
    (tmp_path / "mynets.py").write_text(python("def mlp("))
    exec(compile(python("np.savez"), "README, the npz example", "exec"), {})
    (tmp_path / "my-run.toml").write_text(TOML)
    (line,) = [line for line in RUNS if "my-run.toml" in line]
    assert main([*run_args(line), "--quiet", "--set", "train.epochs=2"]) == 0  # the README's run is 30 epochs
    capsys.readouterr()
    exec(compile(python("metrics.json"), "README, reading a run", "exec"), {})
    out = capsys.readouterr().out
    assert "0.00 removed:" in out and "variational" in out
    monkeypatch.delitem(sys.modules, "mynets", raising=False)


def test_the_run_reading_example_reads_a_regression_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "default",
                "--out",
                "runs/mine",
                "--quiet",
                "--set",
                "data.dataset=linear-regression",
                "--set",
                "data.n=200",
                "--set",
                "train.epochs=2",
                "--set",
                "baseline.epochs=1",
                "--set",
                "sbnn.predictive_samples=2",
                "--set",
                "prune.sparsities=[0.0, 0.5]",
            ]
        )
        == 0
    )
    capsys.readouterr()
    exec(compile(python("metrics.json"), "README, reading a run", "exec"), {})
    rmse = json.loads((tmp_path / "runs/mine/metrics.json").read_text())["pruning_curve"][1]["test_rmse"]
    assert f"0.50 removed: test_rmse {rmse:.4g}" in capsys.readouterr().out


def test_the_command_synopsis_matches_the_parsers(capsys):
    (synopsis,) = [text for lang, text in BLOCKS if lang == "text" and text.startswith("bayesprune run")]
    commands = {}
    for line in synopsis.splitlines():
        words = line.split("#")[0].split()
        commands.setdefault(words[1], set()).update(re.findall(r"--[\w-]+", " ".join(words)))
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.search(r"\{([\w,]+)\}", capsys.readouterr().out).group(1).split(",")
    assert sorted(commands) == sorted(listed)
    for command, flags in commands.items():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        usage = capsys.readouterr().out
        for flag in flags:
            assert flag in usage, f"bayesprune {command} has no {flag}"


def test_the_development_section_names_the_test_command_ci_runs():
    """The reported case: the README named no test command (only "editable, with pytest and ruff" in a
    comment). Its Development section names the command .ci/run ends with, as written there."""
    ci = (PATH.parent / ".ci" / "run").read_text().splitlines()
    command = next(line for line in reversed(ci) if line.strip() and not line.startswith("#"))
    section = README.split("## Development", 1)[1].split("\n## ", 1)[0]
    assert f"`{command}`" in section and "pip install -e" in section, section
