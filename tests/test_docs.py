"""docs/: the config reference is what docs/generate.py writes from the code, and every Python example of
docs/ runs as written."""

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from bayesprune.cli import main
from bayesprune.core.validation import MAX_COUNT, Rule, count, one_of, option, unit

DOCS = Path(__file__).parents[1] / "docs"


def generator():
    """docs/generate.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def examples(name: str) -> list:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), flags=re.DOTALL)


def example(name: str, holding: str) -> str:
    """The one Python example of ``docs/<name>`` that holds the text ``holding``."""
    (found,) = [text for text in examples(name) if holding in text]
    return found


def test_the_reference_is_generated_from_the_code():
    gen = generator()
    assert (DOCS / "reference.md").read_text() == gen.generate(), f"docs/reference.md is out of date: {gen.HINT}"


def test_the_readmes_method_table_and_quick_start_are_generated_from_the_registry():
    gen = generator()
    text = gen.README.read_text()
    assert gen.readme(text) == text, f"README.md's method table or quick start is out of date: {gen.HINT}"
    from bayesprune.methods import available_methods

    table = text.split("<!-- methods: generated -->")[1].split("<!-- end of methods -->")[0]
    assert [line.split("`")[1] for line in table.strip().splitlines()[2:]] == sorted(available_methods())


def test_every_method_and_core_section_has_its_table():
    text = (DOCS / "reference.md").read_text()
    from bayesprune.methods import available_methods

    for section in [*available_methods(), "data", "model", "optim", "train", "prune", "baseline", "reference"]:
        assert f"## `[{section}]`" in text, section


def test_attributes_are_read_from_the_docstring_and_a_field_without_one_is_named():
    gen = generator()

    @dataclasses.dataclass(frozen=True)
    class Options:
        """``[toy]``: a toy table.

        Attributes:
            rate: the rate, on
                two lines.
            low, high: the interval.
            mode: ``"a"`` or ``"b"``; ``extra`` is its threshold.
        """

        rate: float = option(0.5, unit())
        low: int = option(0, count(0))
        high: int = option(1, count(0))
        mode: str = option("a", one_of(("a", "b")))
        extra: float = 2.0

        rules = (Rule("high", lambda o: o.low < o.high, lambda o: f"lie above toy.low = {o.low}"),)

    found = gen.attributes(Options)
    assert found["rate"] == "the rate, on two lines."
    assert found["low"] == found["high"] == found[("low", "high")] == "the interval."
    rows = gen.table("toy", Options, found, Options())
    assert "| `rate` | `0.5` | (0, 1) | the rate, on two lines |" in rows
    assert f"| `low`, `high` | `0`, `1` | a non-negative integer up to {MAX_COUNT} | the interval |" in rows
    assert '| `mode` | `"a"` | `"a"`, `"b"` | `"a"` or `"b"`; `extra` is its threshold |' in rows
    assert "| `extra` | `2.0` |  | see `mode` |" in rows
    assert rows[-1] == "- `toy.high` must lie above toy.low = 0"

    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        """``[toy]``: a toy table.

        Attributes:
            rate: the rate.
        """

        rate: float = 0.5
        forgotten: int = 3

    with pytest.raises(gen.UndocumentedField) as raised:
        gen.table("toy", Undocumented, gen.attributes(Undocumented), Undocumented())
    assert raised.value.args[0] == ["toy.forgotten"]


def test_the_bounds_example_prints_theorems_1_and_2(capsys):
    from bayesprune.methods.pbp.bounds import kl_bernoulli

    (example,) = examples("reference.md")
    exec(compile(example, "docs/reference.md example", "exec"), {})
    theorem1, theorem2, inverse = map(float, re.findall(r": ([\d.]+)", capsys.readouterr().out))
    assert 0.02 < theorem2 <= theorem1 < 0.1
    assert float(kl_bernoulli(0.02, inverse)) == pytest.approx(0.01, abs=1e-3)


def test_the_api_example_prunes_half_the_weights(capsys):
    exec(compile(example("usage.md", "bp.fit("), "docs/usage.md, the sBNN example", "exec"), {})
    error = float(re.search(r"half the weights removed: ([\d.]+) %", capsys.readouterr().out).group(1))
    assert error < 10  # digits, 64-100-10 sBNN with 50% of the weights removed


def test_the_arviz_and_importance_example_reads_a_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "--out",
                "runs/default",
                "--quiet",
                "--set",
                "train.epochs=2",
                "--set",
                "baseline.enabled=false",
                "--set",
                "sbnn.predictive_samples=2",
            ]
        )
        == 0
    )
    exec(compile(example("usage.md", "az.from_netcdf"), "docs/usage.md, the ArviZ example", "exec"), {})
    assert "'feature': 'x0'" in capsys.readouterr().out


def test_the_budget_example_builds_a_784_90_30_10_network(capsys):
    exec(compile(example("usage.md", "mask_parameters"), "docs/usage.md, the export example", "exec"), {})
    assert capsys.readouterr().out.split()[0] == str(784 * 90 + 90 + 90 * 30 + 30 + 30 * 10 + 10)


def test_every_python_example_of_docs_is_tested():
    assert len(examples("reference.md")) == 1 and len(examples("usage.md")) == 3
