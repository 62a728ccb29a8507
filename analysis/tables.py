"""Tables of a run's results: markdown for ``report.md`` and CSV files."""
import csv
from pathlib import Path


def format_value(value, digits: int = 4) -> str:
    """One table cell: floats to ``digits`` significant digits, booleans as yes/no, the rest as text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(rows: list, columns=None, *, digits: int = 4) -> str:
    """Rows (dicts) as a markdown table of ``columns`` (default: all keys of the first row)."""
    columns = list(columns or rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_value(row[column], digits) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: Path, rows: list, *, digits=None):
    """Rows (dicts with the same keys) as a CSV file; cells through :func:`format_value` when ``digits`` is given."""
    if digits is not None:
        rows = [{key: format_value(value, digits) for key, value in row.items()} for row in rows]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
