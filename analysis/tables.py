"""Tables of a run's results: markdown for ``report.md`` and CSV files."""

import csv
from pathlib import Path


def format_value(value, digits: int = 4) -> str:
    """One table cell: floats to ``digits`` significant digits, booleans as yes/no, ``None`` (not
    evaluated) empty, the rest as text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


_MARKDOWN = str.maketrans({char: f"\\{char}" for char in "\\`*[]<>|!#"})


def markdown_text(value) -> str:
    """``value`` as literal text in one markdown line or table cell: line breaks and other control
    characters become spaces, markdown and HTML punctuation is backslash-escaped (a string read
    from a run's files cannot start a line, a link, an image or a tag in ``report.md``)."""
    text = "".join(" " if not char.isprintable() else char for char in str(value))
    return text.translate(_MARKDOWN)


def markdown_table(rows: list, columns=None, *, digits: int = 4) -> str:
    """Rows (dicts) as a markdown table of ``columns`` (default: all keys of the first row)."""
    columns = list(columns or rows[0])
    lines = ["| " + " | ".join(markdown_text(column) for column in columns) + " |", "|" + "---|" * len(columns)]
    lines += [
        "| " + " | ".join(markdown_text(format_value(row[column], digits)) for column in columns) + " |" for row in rows
    ]
    return "\n".join(lines)


def write_csv(path: Path, rows: list, *, digits=None):
    """Rows (dicts) as a CSV file, the columns every key of any row in order of appearance (a row without a
    key has it empty: a failed cell has no numbers); cells through :func:`format_value` when ``digits`` is given."""
    if digits is not None:
        rows = [{key: format_value(value, digits) for key, value in row.items()} for row in rows]
    from bayesprune.core.files import replacing

    with replacing(path) as temporary, open(temporary, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(key for row in rows for key in row)), restval="")
        writer.writeheader()
        writer.writerows(rows)
