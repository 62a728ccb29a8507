"""No module of the package over 600 lines and no function over 80 (docs/developing.md, "Size limits"),
read from the folders with ast, so that a file or a function that grows past them fails here, named."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]

#: The folders the limits hold in: the package and the layers installed under it.
FOLDERS = ("bayesprune", "models", "guides", "analysis")

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

#: What is still over the limits, at its size now: each may shrink, none may grow, and an entry that is no
#: longer over its limit must leave the list (docs/developing.md, "Size limits", gives the counts).
OVER: dict = {}


def modules() -> list:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def long_functions(path: Path) -> list:
    """``(name, lines)`` of every function or method of ``path`` over the limit: decorators included, its
    docstring not (a long docstring documents, it does not make a function do more)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            lines = node.end_lineno - first + 1
            if ast.get_docstring(node) is not None:
                lines -= node.body[0].end_lineno - node.body[0].lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append((node.name, lines))
    return found


def over_the_limits() -> dict:
    """``path`` or ``path:function`` → lines, of every module and function over its limit."""
    found = {}
    for path in modules():
        name = str(path.relative_to(ROOT))
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
        found.update({f"{name}:{function}": count for function, count in long_functions(path)})
    return found


def test_no_module_is_over_600_lines_and_no_function_over_80():
    found = over_the_limits()
    new = {name: lines for name, lines in found.items() if name not in OVER}
    assert not new, f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function: {new}"
    grown = {name: (OVER[name], lines) for name, lines in found.items() if name in OVER and lines > OVER[name]}
    assert not grown, f"grown past their recorded size (recorded, now): {grown}"
    done = sorted(set(OVER) - set(found))
    assert not done, f"within the limits now: take them out of OVER (and docs/developing.md's counts): {done}"


def test_developing_md_gives_the_counts():
    text = (ROOT / "docs" / "developing.md").read_text(encoding="utf-8")
    modules_over = sum(":" not in name for name in OVER)
    assert f"{modules_over} modules over 600 lines and {len(OVER) - modules_over} functions over 80" in text


def test_the_limits_see_a_long_function_and_a_long_module(tmp_path):
    """The oracle: a function of 81 lines and a module of 601, written here, are found."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    source = tmp_path / "long.py"
    doc = '    """A docstring\n    of three\n    lines."""\n'
    source.write_text(f"def short():\n{doc}    return 1\n\n\n@staticmethod\ndef long():\n{doc}{body}\n" + "\n" * 520)
    assert long_functions(source) == [("long", 81)]
    assert len(source.read_text().splitlines()) > MAX_MODULE_LINES
