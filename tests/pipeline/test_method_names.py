"""No registered method is named in ``bayesprune/pipeline/``'s code: each method's behaviour reaches the
pipeline through the :class:`~bayesprune.methods.Method` contract (its attributes and hooks), so a method
added or renamed edits nothing there. Comments, docstrings and the default config (the embedded
``DEFAULT_CONFIG`` a bare ``bayesprune run`` fits) may name them; every other string and identifier may not.
The names are read from the registry, so a method added later is checked too."""

import ast
import io
import re
import tokenize
from pathlib import Path

import bayesprune
from bayesprune.methods import available_methods

PIPELINE = Path(bayesprune.__file__).parent / "pipeline"


def _docstrings(tree) -> set:
    """The (line, column) where each docstring of the module, its classes and functions starts."""
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    starts.add((body[0].lineno, body[0].col_offset))
    return starts


def _default_config_lines(tree) -> set:
    """The lines of the default config: an assignment to ``DEFAULT_CONFIG`` and the default of ``RunConfig``'s
    ``method`` field (what a config without ``method`` fits)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DEFAULT_CONFIG" for t in node.targets):
            lines.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.ClassDef) and node.name == "RunConfig":
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and getattr(field.target, "id", "") == "method":
                    lines.update(range(field.lineno, field.end_lineno + 1))
    return lines


def method_names_in_code(path: Path, names) -> list:
    """``(line, text)`` of every string or identifier token of ``path`` that holds one of ``names`` as a word,
    outside comments, docstrings and the default config."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    docstrings, default = _docstrings(tree), _default_config_lines(tree)
    forms = {form for name in names for form in (name, name.replace("-", "_"))}
    pattern = re.compile(r"(?<!\w)(" + "|".join(sorted(map(re.escape, forms), key=len, reverse=True)) + r")(?!\w)")
    hits = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.STRING, tokenize.NAME):
            continue
        if token.start in docstrings or token.start[0] in default:
            continue
        if pattern.search(token.string):
            hits.append((token.start[0], token.string[:80]))
    return hits


def test_the_pipeline_names_no_registered_method():
    names = list(available_methods())
    assert {"sbnn", "magnitude", "torch-pruning"} <= set(names)  # the registry, baselines included
    found = {
        str(path.relative_to(PIPELINE)): hits
        for path in sorted(PIPELINE.rglob("*.py"))
        if (hits := method_names_in_code(path, names))
    }
    assert not found, found


def test_the_check_finds_a_method_name_in_code_and_not_in_a_docstring(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        '"""pbp in the docstring."""\n\n# sbnn in a comment\n'
        "def f(config, sparse_vd, sparse_vd_table):\n"
        '    """sparse-vd here too."""\n'
        '    return config.method == "pbp" or f"{config}-sbnn" or sparse_vd_table\n'
    )
    assert method_names_in_code(module, ["pbp", "sbnn", "sparse-vd"]) == [
        (4, "sparse_vd"),
        (6, '"pbp"'),
        (6, 'f"{config}-sbnn"'),
    ]
