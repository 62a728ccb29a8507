"""What ``bayesprune compare`` and ``sweep`` share around their cells: the grid's folder (a new one or one to
continue), the checks of every cell before any fit, and the exit status of a finished grid."""

import sys
from pathlib import Path

from bayesprune.core.errors import BayesPruneError
from bayesprune.pipeline.compare.cells import check_folder, finished, refusal


def grid_folder(name: str, out: str | None, resume: str | None) -> Path:
    """The folder of ``bayesprune compare`` or ``sweep`` (``name``): ``--out`` (a new grid) or ``--resume``
    (one to continue), exactly one of them, naming a folder."""
    if (out is None) == (resume is None):
        raise BayesPruneError(f"{name} needs --out DIR (a new {name}) or --resume DIR (continue one), not both")
    if "" in (out, resume):
        raise BayesPruneError(f"{'--out' if out == '' else '--resume'} is empty; name a folder")
    return Path(resume or out)


def exit_status(rows: list, table: Path) -> int:
    """A finished grid's exit status: 1, after one line on stderr, where a row has a failed cell, else 0."""
    failed = [row for row in rows if row.get("failed")]
    if failed:
        message = f"{len(failed)} of {len(rows)} rows have a failed cell (reasons in {table}); run the same grid with --resume to fit them again"
        print(f"bayesprune: {message}", file=sys.stderr)
    return 1 if failed else 0


def check_grid_dir(out: Path, marker: str, *, resume: bool) -> Path | None:
    """Refuse an ``out`` a grid may not use; return the marker file to continue from when ``resume``.

    A new grid needs a missing or empty folder (a finished one is never overwritten); ``--resume``
    needs the folder a grid of this kind started, its ``marker`` written before the first cell."""
    kind = marker.partition(".")[0]
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BayesPruneError(f"{'--resume' if resume else '--out'} {out}: exists and is not a directory")
    if resume:
        if (out / marker).is_symlink():
            raise BayesPruneError(f"--resume {out}: its {marker} is a symbolic link; it is never followed")
        if not (out / marker).is_file():
            raise BayesPruneError(f"--resume {out}: holds no {marker}, so it is not a {kind} to continue")
        return out / marker
    if out.is_dir() and any(out.iterdir()):
        if (out / marker).is_file():
            raise BayesPruneError(
                f"--out {out}: holds a {kind}; continue it with --resume {out}, or give a new directory"
            )
        raise BayesPruneError(f"--out {out}: is not empty; give a new directory")
    return None


def refuse_with_resume(**given):
    """A grid continued with ``--resume`` keeps its config: refuse what would change it."""
    named = [name for name, value in given.items() if value]
    if named:
        flag = named[0] if named[0] == "config" else "--" + named[0].replace("_", "-")
        raise BayesPruneError(f"--resume continues a grid with its own config; {flag} cannot be given with it")


def check_cells(out: Path, cells: list) -> list:
    """The cells' folders, after refusing, before any fit: a ``cells`` folder or a cell folder that is a
    link or a file, a finished cell whose files are tampered or hold another fit (naming the file or
    the key), and every cell the checks of ``bayesprune run`` refuse, all of them, one line per reason (a
    reason every method gives, such as a bad ``model.weights``, said once with the methods that give it)."""
    folder = out / "cells"
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise BayesPruneError(f"{folder}: is not a directory (a link or a file); it is never followed")
    folders = [folder / cell.name for cell in cells]
    for cell, path in zip(cells, folders):
        check_folder(cell, path)
    refused, datasets = {}, {}
    for cell, path in zip(cells, folders):
        why = None if finished(path) else refusal(cell, datasets)
        if why:
            refused.setdefault(why, []).append(cell)
    if refused:
        raise CellsRefused([_refused(why, given) for why, given in refused.items()])
    return folders


def _refused(why: str, cells: list) -> str:
    """The line of the cells refused for one reason: the methods that refuse them, the first cells' names."""
    methods, names = list(dict.fromkeys(cell.method for cell in cells)), [cell.name for cell in cells]
    who = f"method {methods[0]} refuses" if len(methods) == 1 else f"methods {', '.join(methods)} refuse"
    return f"{who} {len(names)} cell{'s' * (len(names) > 1)} ({', '.join(names[:3])}{', …' * (len(names) > 3)}): {why}"


class CellsRefused(BayesPruneError):
    """Every refusal of a grid's cells, one line each in ``lines`` (the command line prints each)."""

    def __init__(self, lines):
        super().__init__("; ".join(lines))
        self.lines = list(lines)
