"""The README's Python examples run as written (the run directory they read is made by a short run)."""
import re
from pathlib import Path

import pytest

from bayesprune.cli import main

pytestmark = pytest.mark.usefixtures("single_thread")

README = (Path(__file__).parents[1] / "README.md").read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_the_api_example_prunes_half_the_weights(capsys):
    exec(compile(EXAMPLES[0], "README example 1", "exec"), {})
    error = float(re.search(r"half the weights removed: ([\d.]+) %", capsys.readouterr().out).group(1))
    assert error < 10  # digits, 64-100-10 sBNN with 50% of the weights removed


def test_the_arviz_and_importance_example_reads_a_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--out", "runs/default", "--quiet", "--set", "train.epochs=2", "--set", "baseline.enabled=false",
                 "--set", "sbnn.predictive_samples=2"]) == 0
    exec(compile(EXAMPLES[1], "README example 2", "exec"), {})
    assert "'feature': 'x0'" in capsys.readouterr().out


def test_the_budget_example_builds_a_784_90_30_10_network(capsys):
    exec(compile(EXAMPLES[2], "README example 3", "exec"), {})
    assert capsys.readouterr().out.split()[0] == str(784 * 90 + 90 + 90 * 30 + 30 + 30 * 10 + 10)


def test_the_bounds_example_prints_theorems_1_and_2(capsys):
    from bayesprune.bounds import kl_bernoulli

    exec(compile(EXAMPLES[3], "README example 4", "exec"), {})
    theorem1, theorem2, inverse = map(float, re.findall(r": ([\d.]+)", capsys.readouterr().out))
    assert 0.02 < theorem2 <= theorem1 < 0.1
    assert float(kl_bernoulli(0.02, inverse)) == pytest.approx(0.01, abs=1e-3)
